"""The connector's share-group member: one explicit-mode ShareConsumer, polled and acked.

Acquisition locks belong to the member that fetched a record, so the same client that
polls must send the acknowledgements. An explicit-mode consumer refuses to poll again
until every record of its previous poll is acknowledged: one poll is one epoch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, Message, ShareConsumer

from sharegroup_source.acks import Ack, AckRun, AckType, runs_of
from sharegroup_source.kafka.errors import is_refusal, refusal
from sharegroup_source.kafka.metadata import no_share_groups, partition_counts
from sharegroup_source.kafka.settings import MAX_RECORD_LOCKS, consumer_config, share_consumer_config
from sharegroup_source.redaction import redact

__all__ = ["AckResult", "ShareClient"]

log = logging.getLogger(__name__)

#: Longest a stop waits for the share consumer to leave the group.
CLOSE_TIMEOUT_S = 30.0
#: What a member of a broker-coordinated share group needs, said with any authorization error.
NEEDS = "a share-group member needs READ on its GROUP and READ on each subscribed TOPIC"
#: librdkafka's largest ``max.poll.records``
_MAX_POLL_RECORDS = 2**31 - 1
_KAFKA_ACK_TYPES = {AckType.ACCEPT: AcknowledgeType.ACCEPT, AckType.RELEASE: AcknowledgeType.RELEASE,
                    AckType.REJECT: AcknowledgeType.REJECT}


@dataclass(frozen=True)
class AckResult:
    """Outcome of one share-partition's acknowledgements; ``error`` is None on success."""

    topic: str
    partition: int
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


class ShareClient:
    """A share-group member with explicit acknowledgement.

    ``config`` is librdkafka configuration (``bootstrap.servers``, ``group.id``, security
    settings...). ``max_poll_records`` bounds one poll, which is also one epoch; None asks for
    what the subscribed share-partitions' in-flight windows can hold (``poll_size``). The topics
    are checked first, so a typo fails here (ClusterError) instead of polling nothing forever.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        topics: Iterable[str],
        max_poll_records: int | None = None,
        metadata_timeout_s: float = 15.0,
    ):
        self.topics = list(topics)
        self.partitions = partition_counts(config, self.topics, metadata_timeout_s, needs=NEEDS)
        self._config = share_consumer_config(config, max_poll_records or poll_size(self.partitions))
        self._consumer = ShareConsumer(consumer_config(self._config))  # its log: sharegroup_source.kafka
        self._consumer.subscribe(self.topics)

    def __repr__(self) -> str:
        return f"ShareClient(topics={self.topics}, config={redact(self._config)})"

    def poll(self, timeout_s: float) -> list[Message]:
        """One ShareFetch round: records acquired for this member, errors raised.

        Every returned record must be acknowledged before the next poll.
        """
        try:
            messages = self._consumer.poll(timeout_s)
        except KafkaException as error:
            raise self._explain(error.args[0]) from None
        records = []
        for message in messages:
            failure = message.error()
            if failure is None:
                records.append(message)
            elif failure.fatal() or not failure.retriable() or is_refusal(failure):
                raise self._explain(failure)
            else:
                log.warning("share fetch: %s", failure)
        return records

    def _explain(self, error: KafkaError) -> Exception:
        refused = refusal(error, self._config, "READ", topics=self.topics, group=str(self._config.get("group.id")),
                          needs=NEEDS)
        if refused is not None:
            return refused
        if error.code() == KafkaError.UNSUPPORTED_VERSION:
            return no_share_groups(str(self._config.get("bootstrap.servers")), error.str())
        return KafkaException(error)

    def acknowledge(self, acks: Iterable[Ack]) -> None:
        """Stage acknowledgements; they reach the broker with :meth:`commit`."""
        self.acknowledge_runs(runs_of(acks))

    def acknowledge_runs(self, runs: Iterable[AckRun]) -> None:
        """Stage runs of acknowledgements (the client takes them one offset at a time)."""
        for run in runs:
            kind = _KAFKA_ACK_TYPES[run.type]
            for offset in range(run.first, run.last + 1):
                self._consumer.acknowledge_offset(run.topic, run.partition, offset, kind)

    def commit(self, timeout_s: float = 30.0) -> list[AckResult]:
        """Send staged acknowledgements and wait: one result per share-partition.

        A failed partition comes back as a value, not an exception, because a lost ack is
        a normal event for a queue (the broker redelivers) and the caller must count it.
        """
        try:
            results = self._consumer.commit_sync(timeout_s)
        except KafkaException as error:
            raise self._explain(error.args[0]) from None
        return [
            AckResult(tp.topic, tp.partition, None if error is None else _describe(error))
            for tp, error in sorted((results or {}).items(), key=lambda item: (item[0].topic, item[0].partition))
        ]

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Leave the group, waiting at most ``timeout_s``.

        librdkafka's share consumer has been seen to block in close for good when it is closed
        right after it subscribed (Apache Kafka 4.3, a loaded machine): a stop must not hang the
        driver, so the close runs aside and is given up on; the broker then drops the member at
        its session timeout and lets its locks expire.
        """
        closing = threading.Thread(target=self._consumer.close, name="share-consumer-close", daemon=True)
        closing.start()
        closing.join(timeout_s)
        if closing.is_alive():
            log.warning("the share consumer did not close within %.0fs; the broker will drop the member at "
                        "its session timeout", timeout_s)

    def __enter__(self) -> ShareClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def poll_size(partitions: Mapping[str, int]) -> int:
    """A poll that the share-partitions' in-flight windows bound, not the client: each subscribed partition
    may give up to ``MAX_RECORD_LOCKS`` records (the broker acquires at most its group's
    ``share.partition.max.record.locks`` and whole producer batches; bytes are bounded by ``fetch.max.bytes``)."""
    return min(max(sum(partitions.values()), 1) * MAX_RECORD_LOCKS, _MAX_POLL_RECORDS)


def _describe(error: Exception) -> str:
    inner = error if isinstance(error, KafkaError) else (error.args[0] if error.args else None)
    return f"{inner.name()}: {inner.str()}" if isinstance(inner, KafkaError) else str(error)
