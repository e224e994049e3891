"""The subscribed topics as they are now: partitions added while a member runs, and topics deleted under it.

A member reads its topics' partition counts when it joins, but a topic may grow while it runs
(CreatePartitions), and Spark's own Kafka source reads a new partition at the next trigger. So the
counts are asked again, at most every ``REFRESH_S``, on a kept admin client (one connection for the
member's life: on the embedded broker any client connection that closes drops every share session of
its node). A growth is logged once; a topic that is gone fails the member in one line naming it,
where a share consumer would wait on it, idle, for good; so does one deleted and created again under
its name between two asks (its topic id changed: a share group reads the new one as a new topic, from
``share.auto.offset.reset``, and a Delta group's state would describe the old log). Ids are asked
where the cluster has a controller to answer DescribeTopics (not the embedded broker). A metadata
answer that does not come is no reason to fail: the counts stay as they were until the next ask.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.metadata import partition_counts
from sharegroup_source.kafka.settings import admin_config

__all__ = ["REFRESH_S", "TopicWatch"]

log = logging.getLogger(__name__)

#: How often the subscribed topics' partition counts are asked again: the bound on a new partition's first read.
REFRESH_S = 5.0
#: How long one metadata ask may take before the counts stay as they were.
_ASK_TIMEOUT_S = 5.0


class TopicWatch:
    """``topics``' partition counts, ``counts`` at first, asked again every ``every_s``; ``reads_new`` says, in the
    growth's log line, from where the member reads new partitions. ``needs``: what the member needs of the cluster,
    said with an authorization error."""

    def __init__(self, config: Mapping[str, Any], topics: Sequence[str], counts: Mapping[str, int], reads_new: str,
                 every_s: float = REFRESH_S, needs: str = ""):
        self._config = config
        self._topics = list(topics)
        self._counts = dict(counts)
        self._reads_new = reads_new
        self._every_s = every_s
        self._needs = needs
        self._admin = AdminClient(admin_config(config))
        self._ids: dict[str, str] = {}  # each topic's id when first asked: at once, so a change from the start counts
        self._asked_at = time.monotonic()
        try:
            if self._admin.list_topics(timeout=_ASK_TIMEOUT_S).controller_id >= 0:
                self._check_ids()
        except KafkaException as error:  # asked at the next refresh
            log.debug("the subscribed topics' ids were not read: %s", error)

    @property
    def counts(self) -> dict[str, int]:
        """The partition counts as last asked."""
        return dict(self._counts)

    def refresh(self) -> dict[str, int]:
        """The partition counts, asked again if ``every_s`` passed; raises ClusterError for a topic that is gone."""
        if time.monotonic() - self._asked_at < self._every_s:
            return self.counts
        self._asked_at = time.monotonic()
        try:
            metadata = self._admin.list_topics(timeout=_ASK_TIMEOUT_S)
        except KafkaException as error:
            log.debug("the subscribed topics' partitions were not read again: %s", error)
            return self.counts
        gone = [t for t in self._topics if t not in metadata.topics or _unknown(metadata.topics[t].error)]
        if gone:
            self._gone(gone)
        if metadata.controller_id >= 0:
            self._check_ids()
        for topic in self._topics:
            found = metadata.topics[topic]
            count = len(found.partitions)
            if found.error is None and count > self._counts.get(topic, 0):
                log.warning("topic %s grew from %d to %d partitions while the query read it: %s", topic,
                            self._counts.get(topic, 0), count, self._reads_new)
                self._counts[topic] = count
        return self.counts

    def _check_ids(self) -> None:
        """Each topic's id as first asked, or ClusterError for a topic whose id changed: deleted and created again."""
        futures = self._admin.describe_topics(TopicCollection(self._topics), request_timeout=_ASK_TIMEOUT_S)
        for topic, future in futures.items():
            try:
                topic_id = str(future.result(_ASK_TIMEOUT_S).topic_id)
            except Exception as error:  # asked again at the next refresh
                log.debug("topic %s: its id was not read: %s", topic, error)
                continue
            known = self._ids.setdefault(topic, topic_id)
            if known != topic_id:
                raise ClusterError(f"topic {topic} was deleted and created again while the query read it (topic id "
                                   f"{known}, now {topic_id}): the records of the deleted one that were not read "
                                   f"are gone, and the new one is another log; restart the query to read it (a "
                                   f"coordinator=delta group first needs `sharegroup delete-offsets <groupLocation> "
                                   f"--topic {topic} --execute`: its state is of the deleted one)")

    def _gone(self, topics: Sequence[str]) -> None:
        """A topic missing from the kept client's metadata: asked by name on a fresh client, which says whether it
        was deleted (or refused); raised as the member's error."""
        try:
            partition_counts(self._config, topics, needs=self._needs)
        except ClusterError as error:
            raise ClusterError(f"a subscribed topic is gone while the query read it: {error}") from None


def _unknown(error: KafkaError | None) -> bool:
    return error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
