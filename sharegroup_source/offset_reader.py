"""Read exact offsets from the log with a plain consumer (assign + seek, no group membership).

Used to rebuild an epoch after a restart (the ledger says which offsets the epoch held, the
share group may have moved on, so the records are read back by position), and for every batch
of the Delta coordinator, whose executors read the offset ranges the driver locked.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from sharegroup_source.consumer_pool import ConsumerPool, consumer_pool
from sharegroup_source.kafka_clients import is_transient
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
#: How long one consume call waits to fill its batch. A call returns early only once the batch is
#: full, so a read that ends at the log's end, where fewer records come than offsets were asked
#: for (gaps, lost records), waits this long once; a short wait just makes the loop go round again.
_CONSUME_WAIT_S = 0.05
#: A position outside the log: with ``auto.offset.reset=error`` librdkafka reports it, and stops fetching.
_OUT_OF_RANGE = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}


@dataclass
class RangeResult:
    """Records found for the requested offsets, the ones the log no longer holds (below its start, or
    past its end: data loss), and gaps: offsets inside the log that hold no record (compaction,
    transaction markers), which is how the log is, not a loss, as for Spark's Kafka source."""

    records: list[Message] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    gaps: list[int] = field(default_factory=list)


@dataclass
class _Scan:
    """One assignment's reading: where it got to, and how it ended."""

    position: int  #: the next offset the log would give: every wanted offset below it was read or is a gap
    end: int | None = None  #: the log's end, when the read reached it (PARTITION_EOF)
    out_of_range: bool = False  #: the position is outside the log (below its start, or past its end)


class OffsetRangeReader:
    """Reads requested offsets of one topic-partition at a time, tolerating gaps, on a pooled consumer.

    Gaps (compacted records, transaction markers, aborted data) mean an offset may never
    arrive: reading stops once the log position passes the last requested offset or reaches
    the partition's end, and the absent offsets are reported, not waited for. The consume
    itself tells where the log ends (PARTITION_EOF) or that a position left it (offset out of
    range); only then are the log's bounds looked up, so a read costs its fetches alone. A node
    that is down or a leader that moves is waited for, up to ``timeout_s`` per read: a replay
    runs in a Spark task, and failing it fails the batch.

    The consumer is borrowed from ``pool`` (the process's) for the reader's life and given back
    at ``close``, or closed there if a read failed on it.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 30.0, pool: ConsumerPool | None = None):
        self._config = replay_consumer_config(config)
        self._pool = pool or consumer_pool()
        self._consumer: Consumer | None = self._pool.take(self._config)
        self._broken = False
        self._timeout_s = timeout_s

    def read(self, topic: str, partition: int, offsets: Iterable[int]) -> RangeResult:
        wanted = sorted(set(offsets))
        if not wanted:
            return RangeResult()
        try:
            return self._read(self._open(), topic, partition, wanted, time.monotonic() + self._timeout_s)
        except BaseException:
            self._broken = True  # whatever state the client is in, the next read gets a fresh one
            raise

    def _open(self) -> Consumer:
        if self._consumer is None:
            raise RuntimeError("this OffsetRangeReader is closed")
        return self._consumer

    def _read(self, consumer: Consumer, topic: str, partition: int, wanted: list[int], deadline: float) -> RangeResult:
        result = RangeResult()
        remaining = set(wanted)
        start = wanted[0]
        try:
            while True:
                consumer.assign([TopicPartition(topic, partition, start)])
                scan = self._scan(consumer, topic, partition, start, wanted[-1], remaining, result.records, deadline)
                result.gaps += [o for o in remaining if o < scan.position]
                remaining = {o for o in remaining if o >= scan.position}
                if scan.end is not None:  # the log's end: what lies past it is not there
                    result.missing += remaining
                elif scan.out_of_range:  # only now: where does the log start and end?
                    low, high = self._watermarks(consumer, topic, partition, deadline)
                    result.missing += [o for o in remaining if o < low or o >= high]
                    remaining = {o for o in remaining if low <= o < high}
                    if remaining:
                        start = min(remaining)
                        continue
                break
        finally:
            consumer.unassign()
        result.missing.sort()
        result.gaps.sort()
        return result

    def _scan(self, consumer: Consumer, topic: str, partition: int, start: int, last: int, remaining: set[int],
              found: list[Message], deadline: float) -> _Scan:
        """Read from ``start`` until past ``last``, the log's end, or a position outside the log."""
        scan = _Scan(start)
        while scan.position <= last:
            if time.monotonic() > deadline:
                raise TimeoutError(f"replaying {topic}[{partition}] offsets {start}..{last} at bootstrap.servers="
                                   f"{self._config.get('bootstrap.servers', '')}: {len(remaining)} not read after "
                                   f"{self._timeout_s:.0f}s")
            messages = consumer.consume(min(last - scan.position + 1, _CONSUME_BATCH), _CONSUME_WAIT_S)
            if not any(map(Message.error, messages)):  # a fetch's records alone: taken without a loop per record
                _keep(messages, remaining, found, scan)
                continue
            for message in messages:
                error = message.error()
                if error is None:
                    _keep([message], remaining, found, scan)
                elif error.code() == KafkaError._PARTITION_EOF:
                    scan.end = scan.position = message_key(message)[2]  # the EOF's offset is the log's end
                    return scan
                elif error.code() in _OUT_OF_RANGE:
                    scan.out_of_range = True
                    return scan
                elif not is_transient(error):
                    raise KafkaException(error)
                # transient: librdkafka reconnects and refetches on its own
        return scan

    def _watermarks(self, consumer: Consumer, topic: str, partition: int, deadline: float) -> tuple[int, int]:
        while True:
            try:
                return consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=max(deadline - time.monotonic(), 0.1))
            except KafkaException as exc:
                error = exc.args[0]
                if not is_transient(error) or time.monotonic() >= deadline:
                    waited = f"still failing after {self._timeout_s:.0f}s: " if is_transient(error) else ""
                    raise KafkaException(KafkaError(
                        error.code(), f"replaying {topic}[{partition}]: {waited}{error.str()}")) from None
                time.sleep(0.2)  # metadata refreshes in the background; ask again shortly

    def close(self) -> None:
        """Give the consumer back to the pool (close it, if a read failed on it)."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            self._pool.give_back(self._config, consumer, broken=self._broken)

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
        # a read takes tens of thousands of records from one partition; once the client's fetch queue held more
        # than a read asks for at once, its next fetch waited a second (the default): a 100,000-record batch of
        # 2 partitions spent 788 ms in addBatch, 398 ms with 10 (Apache Kafka 4.3.1, 2026-11-24)
        "fetch.queue.backoff.ms": 10,
        **config,
        "group.id": REPLAY_GROUP_ID,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    }


def _keep(records: list[Message], remaining: set[int], found: list[Message], scan: _Scan) -> None:
    """Keep the wanted ones of ``records`` (one partition's, in offset order) and move the position past them."""
    if not records:
        return
    offsets = cast(list[int], list(map(Message.offset, records)))  # a fetched record always has its offset
    if remaining.issuperset(offsets):
        found += records
    else:
        found += [record for record, offset in zip(records, offsets, strict=True) if offset in remaining]
    remaining.difference_update(offsets)
    scan.position = offsets[-1] + 1

