"""The ``broker`` coordinator: the Kafka broker's share group holds the locks; the driver is the member.

Acquisition locks belong to the member that fetched a record, and Spark's commit point is on
the driver, so the driver's one share consumer acquires every record and sends every
acknowledgement. A restarted query first waits for its previous run's member to leave (see
``handover``), so the broker does not split the partitions between the two.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from sharegroup_source.acks import AckRun, AckType
from sharegroup_source.coordinators.base import Failures, Settled
from sharegroup_source.coordinators.broker.group_setup import group_settings, set_up_group
from sharegroup_source.coordinators.broker.handover import HANDOVER_TIMEOUT_S, await_previous_member
from sharegroup_source.coordinators.broker.retention import RetentionCheck
from sharegroup_source.coordinators.broker.share_client import NEEDS, ShareClient
from sharegroup_source.coordinators.data_loss import DataLoss
from sharegroup_source.kafka.metadata import group_start, reach
from sharegroup_source.kafka.topic_watch import TopicWatch
from sharegroup_source.options import SourceOptions
from sharegroup_source.schema import POSITIONS, records_to_arrow
from state_store import OffsetRange
from state_store.group import GroupSettings
from state_store.progress import ProgressTable

__all__ = ["BrokerCoordinator"]

log = logging.getLogger(__name__)

#: How long the member waits for the cluster's metadata (the topics' partitions) when it joins.
METADATA_TIMEOUT_S = 30.0


class BrokerCoordinator:
    """One explicit-mode share consumer (``client``) acquiring and acknowledging for run ``run_id``."""

    def __init__(self, client: ShareClient, run_id: str, settings: GroupSettings,
                 kafka_config: Mapping[str, Any] | None = None, watch: TopicWatch | None = None,
                 retention: RetentionCheck | None = None):
        """``settings``: the group's lock duration, delivery-count limit and in-flight window as the cluster said
        them; ``kafka_config``: the client's configuration (``group.id`` included), to ask the cluster about the
        group; ``watch``: the subscribed topics as they are now (None: as the client found them); ``retention``:
        asks, before the member fetches, whether the log start passed records the group had not processed."""
        self._client = client
        self._watch = watch
        self._retention = retention
        self._run_id = run_id
        self._settings = settings
        self._kafka_config = dict(kafka_config or {})
        #: held records on their last delivery attempt, with their delivery count: given back, the broker archives them
        self._last_attempts: dict[tuple[str, int, int], int] = {}
        self._archived: list[tuple[str, int, int, int]] = []

    @classmethod
    def join(cls, options: SourceOptions, progress: ProgressTable, run_id: str,
             handover_timeout_s: float | None = None) -> BrokerCoordinator:
        """Join the share group once the query's previous member has left (that run's stop writes its
        releases to the ledger, which the driver reads next); ``handover_timeout_s`` bounds the wait. The
        group's configs the options set are set before the member's first fetch (``startingOffsets`` in the
        query's first run only: the progress table has no run of it yet)."""
        reach(options.client_config)  # before anything else is asked of it: a wrong address is named as such
        await_previous_member(progress, options.group_id,
                              HANDOVER_TIMEOUT_S if handover_timeout_s is None else handover_timeout_s)
        read = set_up_group(options, first_run=not progress.totals(options.group_id))
        settings, said = group_settings(options, read)
        client = ShareClient(options.client_config, options.topics, options.max_poll_records,
                             metadata_timeout_s=METADATA_TIMEOUT_S)
        watch = TopicWatch(options.client_config, options.topics, client.partitions, _reads_new(settings),
                           needs=NEEDS)
        retention = RetentionCheck(options.client_config, options.group_id, DataLoss(options.fail_on_data_loss),
                                   cannot_see=None if said else "the cluster says no share group's configs")
        try:
            retention.check(client.partitions)  # before the first fetch: Kafka's would move past the lost records
        except BaseException:
            retention.close()
            client.close()
            raise
        return cls(client, run_id, settings, options.client_config, watch, retention)

    @property
    def member_id(self) -> str:
        """The run id: librdkafka's share consumer does not expose the member id the broker gave it."""
        return self._run_id

    @property
    def partitions(self) -> Mapping[str, int]:
        """As the topics have them now: Kafka assigns a partition a topic gained to the group's members itself."""
        return self._watch.counts if self._watch is not None else self._client.partitions

    @property
    def lock_duration_ms(self) -> int:
        """The group's lock duration as the cluster said it when the member joined; the ``lockDurationMs`` option
        where it did not say (a broker without group configurations)."""
        return self._settings.lock_duration_ms

    @property
    def delivery_limit(self) -> int:
        """The group's ``share.delivery.count.limit`` as the cluster said it when the member joined (else Kafka's
        default)."""
        return self._settings.delivery_count_limit

    def acquires_at_most(self, max_records: int | None) -> int:
        """Every subscribed share-partition's in-flight window: the broker acquires whole producer batches, beyond
        ``max.poll.records``, up to ``share.partition.max.record.locks`` a share-partition."""
        return max(sum(self.partitions.values()), 1) * self._settings.max_record_locks

    def starts_at(self) -> str | None:
        """The group's ``share.auto.offset.reset`` as the broker's group configuration says it."""
        group_id = self._kafka_config.get("group.id")
        return group_start(self._kafka_config, str(group_id)) if group_id else None

    @property
    def next_run_takes_over(self) -> bool:
        """No: a broker's locks belong to the member, and a new member cannot take them over."""
        return False

    def take_over(self, unsettled: Sequence[OffsetRange]) -> None:
        """Nothing: the broker released the previous run's records when its member left, which the join waited
        for (a member that died without leaving loses its locks on their expiry)."""

    def acquire(self, max_records: int | None, wait_s: float) -> pa.Table:
        """One ShareFetch round; its size is the consumer's ``max.poll.records`` (a soft limit), not ``max_records``.
        Records on their last delivery attempt are noted: a RELEASE of theirs archives them. A subscribed topic
        that is gone fails here, naming it: the share consumer would wait on it, idle, for good."""
        if self._watch is not None:
            self._watch.refresh()
        if self._retention is not None:
            self._retention.check(self.partitions)
        acquired = records_to_arrow(self._client.poll(wait_s), 0, include_headers=True)
        counts = acquired.column("deliveryCount").to_numpy()
        for row in (counts >= self.delivery_limit).nonzero()[0].tolist():
            key = (acquired.column("topic")[row].as_py(), acquired.column("partition")[row].as_py(),
                   acquired.column("offset")[row].as_py())
            self._last_attempts[key] = int(counts[row])
        return acquired

    def acquire_ahead(self, max_records: int | None) -> None:
        """Nothing: an explicit-mode member cannot poll again before its last poll is acknowledged."""

    def acknowledge(self, acks: Sequence[AckRun]) -> Settled:
        """Stage and commit ``acks`` before returning: the member cannot poll before they are committed. A RELEASE
        of a record on its last delivery attempt archives it, whether it took or its lock runs out instead."""
        if self._last_attempts:
            for run in acks:
                for offset in range(run.first, run.last + 1):
                    count = self._last_attempts.pop((run.topic, run.partition, offset), None)
                    if count is not None and run.type == AckType.RELEASE:
                        self._archived.append((run.topic, run.partition, offset, count))
        return Settled(self._commit(acks))

    def _commit(self, acks: Sequence[AckRun]) -> Failures:
        """A share-partition the commit has no result for failed too: nothing says the broker applied its
        acknowledgements, and counting it ACKED would let a redelivery pass as new."""
        if not acks:
            return {}
        self._client.acknowledge_runs(acks)
        results = self._client.commit()
        failures = {(r.topic, r.partition): r.error for r in results if r.error is not None}
        answered = {(r.topic, r.partition) for r in results}
        for partition in sorted({(a.topic, a.partition) for a in acks} - answered):
            failures[partition] = "no result in the commit's answer"
        return failures

    def archived(self) -> pa.Table:
        """The records this member gave back on their last delivery attempt since the last call: the broker
        archived them at its delivery-count limit, without telling its members."""
        archived, self._archived = self._archived, []
        return pa.Table.from_pylist([{"topic": t, "partition": p, "offset": o, "deliveryCount": c}
                                     for t, p, o, c in archived], schema=POSITIONS)

    def lost_unread(self) -> int:
        """Records the retention check found gone unprocessed since the last call (``failOnDataLoss=false``)."""
        return self._retention.data_loss.drain() if self._retention is not None else 0

    def close(self, keep: Sequence[OffsetRange] = ()) -> None:
        """Leave the group: the broker releases what the member still holds (``keep`` is always empty here), and
        archives what of it was on its last delivery attempt."""
        self._archived += [(*key, count) for key, count in self._last_attempts.items()]
        self._last_attempts.clear()
        if self._retention is not None:
            self._retention.close()
        self._client.close()


def _reads_new(settings: GroupSettings) -> str:
    """How a broker group reads a partition its topic gained, for the growth's log line."""
    start = settings.auto_offset_reset
    skipped = "" if start == "earliest" else (": records written to them before the group first fetched them are "
                                              "not delivered (startingOffsets=earliest on a new group avoids that)")
    return (f"Kafka assigns the new ones to the group's members, which start each at its {start} offset "
            f"(share.auto.offset.reset){skipped}")
