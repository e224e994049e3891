"""Replay exact offsets from the log with a plain consumer (assign + seek, no group).

Used to rebuild an epoch after a restart: the ledger says which offsets the epoch held,
the share group may have moved on, so the records are read back by position.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from sharegroup_source.kafka_clients import consumer_config
from sharegroup_source.schema import message_key

__all__ = ["REPLAY_GROUP_ID", "OffsetRangeReader", "RangeResult", "replay_consumer_config"]

#: Never the share group's id: a classic member under that id would clash with it.
REPLAY_GROUP_ID = "sharegroup-replay"
#: What a share group delivers unless its ``share.isolation.level`` says otherwise (Kafka's
#: default). A plain consumer defaults to read_committed instead, and would stop at the last
#: stable offset before records of an open transaction that the group already delivered.
SHARE_GROUP_ISOLATION = "read_uncommitted"

#: Records taken from the client per call: one Python call per fetch, not per record.
_CONSUME_BATCH = 10_000
#: A leader that moves, a node that is down or a request cut off with its connection: retried until the deadline.
_TRANSIENT = {KafkaError._UNKNOWN_PARTITION, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
              KafkaError._ALL_BROKERS_DOWN, KafkaError._DESTROY_BROKER, KafkaError.LEADER_NOT_AVAILABLE,
              KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT}


@dataclass
class RangeResult:
    """Records found for the requested offsets, the ones the log no longer holds (below its start, or
    past its end: data loss), and gaps: offsets inside the log that hold no record (compaction,
    transaction markers), which is how the log is, not a loss, as for Spark's Kafka source."""

    records: list[Message] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    gaps: list[int] = field(default_factory=list)


class OffsetRangeReader:
    """Reads requested offsets of one topic-partition at a time, tolerating gaps.

    Gaps (compacted records, transaction markers, aborted data) mean an offset may never
    arrive: reading stops once the log position passes the last requested offset or reaches
    the partition's end, and the absent offsets are reported, not waited for. A node that is
    down or a leader that moves is waited for, up to ``timeout_s`` per read: a replay runs in a
    Spark task, and failing it fails the batch.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 30.0):
        self._consumer = Consumer(consumer_config(replay_consumer_config(config)))  # logs: sharegroup_source.kafka
        self._timeout_s = timeout_s

    def read(self, topic: str, partition: int, offsets: Iterable[int]) -> RangeResult:
        wanted = sorted(set(offsets))
        result = RangeResult()
        if not wanted:
            return result
        deadline = time.monotonic() + self._timeout_s
        low, high = self._watermarks(topic, partition, deadline)
        result.missing = [o for o in wanted if o < low or o >= high]
        present = [o for o in wanted if low <= o < high]
        if present:
            result.records, result.gaps = self._fetch(topic, partition, present, deadline)
        return result

    def _watermarks(self, topic: str, partition: int, deadline: float) -> tuple[int, int]:
        while True:
            try:
                return self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=max(deadline - time.monotonic(), 0.1))
            except KafkaException as exc:
                error = exc.args[0]
                if not _transient(error) or time.monotonic() >= deadline:
                    waited = f"still failing after {self._timeout_s:.0f}s: " if _transient(error) else ""
                    raise KafkaException(KafkaError(
                        error.code(), f"replaying {topic}[{partition}]: {waited}{error.str()}")) from None
                time.sleep(0.2)  # metadata refreshes in the background; ask again shortly

    def _fetch(self, topic: str, partition: int, wanted: list[int],
               deadline: float) -> tuple[list[Message], list[int]]:
        remaining = set(wanted)
        found: list[Message] = []
        last = wanted[-1]
        self._consumer.assign([TopicPartition(topic, partition, wanted[0])])
        try:
            while remaining:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"replaying {topic}[{partition}] offsets {wanted[0]}..{last}: "
                        f"{len(remaining)} not read after {self._timeout_s:.0f}s"
                    )
                if self._take(self._consumer.consume(min(len(remaining), _CONSUME_BATCH), 0.5), remaining, found, last):
                    break
        finally:
            self._consumer.unassign()
        return found, sorted(remaining)

    @staticmethod
    def _take(messages: list[Message], remaining: set[int], found: list[Message], last: int) -> bool:
        """Keep the wanted records of one fetch; whether the read is over (past ``last``, or the log's end)."""
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return True
                if error.code() == KafkaError._AUTO_OFFSET_RESET:
                    return True  # the first offset left the log while we read
                if _transient(error):
                    continue  # librdkafka reconnects and refetches on its own
                raise KafkaException(error)
            offset = message_key(message)[2]
            if offset in remaining:
                remaining.discard(offset)
                found.append(message)
            if offset >= last:
                return True
        return False

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> OffsetRangeReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def replay_consumer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The plain consumer's librdkafka configuration for ``config`` (the source's ``kafka.*``).

    Shared with the option check at ``load()``, so a setting this consumer would refuse on an
    executor is refused on the driver first. ``isolation.level`` is the user's if given (a group
    set to read_committed), else what a share group delivers by default.
    """
    return {
        "isolation.level": SHARE_GROUP_ISOLATION,
        # a reader assigns anew for each read, and the new position's first fetch waits for the previous
        # one, a long poll at the log end: each read but the first took 500 ms (the default). A read stops
        # at the log end, so long polls gain nothing here.
        "fetch.wait.max.ms": 10,
        **config,
        "group.id": REPLAY_GROUP_ID,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    }


def _transient(error: KafkaError) -> bool:
    return not error.fatal() and (error.retriable() or error.code() in _TRANSIENT)

