"""Read exact offsets from the log with a plain consumer (assign + seek, no group membership).

Used to rebuild an epoch after a restart (the ledger says which offsets the epoch held, the
share group may have moved on, so the records are read back by position), and for every batch
of the Delta coordinator, whose executors read the offset ranges the driver locked.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from sharegroup_source.kafka.consumer_pool import ConsumerPool, consumer_pool
from sharegroup_source.kafka.errors import refusal
from sharegroup_source.kafka.settings import REPLAY_CONSUME_BATCH, replay_consumer_config
from sharegroup_source.kafka.transient import is_transient

__all__ = ["OffsetRangeReader", "RangeResult"]

#: How long one consume call waits to fill its batch. A call returns early only once the batch is
#: full, so a read that ends at the log's end, where fewer records come than offsets were asked
#: for (gaps, lost records), waits this long once; a short wait just makes the loop go round again.
_CONSUME_WAIT_S = 0.05
#: How long a read waits before it reads again from a log end that stopped below delivered offsets.
_END_RECHECK_S = 0.2
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
class _Read:
    """One partition's part of a read: the offsets still to come, where the log got to, and how it ended."""

    topic: str
    partition: int
    remaining: set[int]
    last: int  #: the last wanted offset
    position: int  #: the next offset the log would give: every wanted offset below it was read or is a gap
    result: RangeResult = field(default_factory=RangeResult)
    end: int | None = None  #: the log's end, when the read reached it (PARTITION_EOF)
    out_of_range: bool = False  #: the position is outside the log (below its start, or past its end)

    @property
    def done(self) -> bool:
        return self.end is not None or self.out_of_range or self.position > self.last

    def settle(self, end_is_final: bool) -> None:
        """Offsets the log passed without giving are gaps; past the log's end, missing (or, while the end may
        yet move past them, read again from where the log ended)."""
        self.result.gaps += [o for o in self.remaining if o < self.position]
        self.remaining = {o for o in self.remaining if o >= self.position}
        if self.end is not None and end_is_final:
            self.result.missing += self.remaining
            self.remaining = set()
        self.end = None if self.remaining else self.end


class OffsetRangeReader:
    """Reads requested offsets of topic-partitions, tolerating gaps, on a pooled consumer.

    Gaps (compacted records, transaction markers, aborted data) mean an offset may never
    arrive: reading a partition stops once the log position passes its last requested offset or
    reaches the partition's end, and the absent offsets are reported, not waited for. The consume
    itself tells where the log ends (PARTITION_EOF) or that a position left it (offset out of
    range); only then are the log's bounds looked up, so a read costs its fetches alone. The
    partitions of one ``read_many`` are assigned together, so their fetches go out in parallel
    (one round trip per leader, not one per partition). A node that is down or a leader that
    moves is waited for, up to ``timeout_s`` per read: a replay runs in a Spark task, and failing
    it fails the batch.

    The consumer is borrowed from ``pool`` (the process's) for the reader's life and given back
    at ``close``, or closed there if a read failed on it.

    ``delivered``: the offsets are records a share group delivered, so the log held every one of them. A
    log that ends below them is then a new leader whose high watermark has not caught up yet (its followers,
    a frozen old leader among them, have not confirmed the records to it), not a loss: the read waits up to
    half its timeout for the end to move past them before they count as missing. Offsets below the log's
    start are missing at once (retention or deleted records: the start does not move back).
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 30.0, pool: ConsumerPool | None = None,
                 delivered: bool = False):
        self._config = replay_consumer_config(config)
        self._pool = pool or consumer_pool()
        self._consumer: Consumer | None = self._pool.take(self._config)
        self._broken = False
        self._timeout_s = timeout_s
        self._delivered = delivered

    def read(self, topic: str, partition: int, offsets: Iterable[int]) -> RangeResult:
        """The records at ``offsets`` of one topic-partition."""
        return self.read_many({(topic, partition): offsets})[(topic, partition)]

    def read_many(self, wanted: Mapping[tuple[str, int], Iterable[int]]) -> dict[tuple[str, int], RangeResult]:
        """The records at the offsets of each (topic, partition) of ``wanted``, all partitions read at once."""
        reads = {}
        for (topic, partition), offsets in wanted.items():
            remaining = set(offsets)
            if remaining:
                reads[topic, partition] = _Read(topic, partition, remaining, max(remaining), min(remaining))
        try:
            if reads:
                self._read(self._open(), reads, time.monotonic() + self._timeout_s)
        except BaseException:
            self._broken = True  # whatever state the client is in, the next read gets a fresh one
            raise
        results = {key: reads[key].result if key in reads else RangeResult() for key in wanted}
        for result in results.values():
            result.missing.sort()
            result.gaps.sort()
        return results

    def _open(self) -> Consumer:
        if self._consumer is None:
            raise RuntimeError("this OffsetRangeReader is closed")
        return self._consumer

    def _read(self, consumer: Consumer, reads: dict[tuple[str, int], _Read], deadline: float) -> None:
        pending = list(reads.values())
        # until then an end below delivered offsets is waited for; the rest of the timeout reads past it
        end_wait_until = time.monotonic() + (self._timeout_s / 2 if self._delivered else 0)
        try:
            while pending:
                consumer.assign([TopicPartition(r.topic, r.partition, r.position) for r in pending])
                self._scan(consumer, reads, pending, deadline)
                end_is_final = time.monotonic() >= end_wait_until
                for read in pending:
                    read.settle(end_is_final)
                outside = [read for read in pending if read.out_of_range]
                for read in outside:  # only now: where does the log start and end?
                    low, high = self._watermarks(consumer, read.topic, read.partition, deadline)
                    end = high if end_is_final else None
                    read.result.missing += [o for o in read.remaining if o < low or (end is not None and o >= end)]
                    read.remaining = {o for o in read.remaining if low <= o and (end is None or o < end)}
                    read.out_of_range = False
                    read.position = min(read.remaining, default=read.last + 1)
                pending = [read for read in pending if read.remaining]
                if pending and not end_is_final:  # the log may still end below delivered offsets: not at once
                    time.sleep(_END_RECHECK_S)
        finally:
            consumer.unassign()

    def _scan(self, consumer: Consumer, reads: dict[tuple[str, int], _Read], pending: list[_Read],
              deadline: float) -> None:
        """Read until every one of ``pending`` is past its last offset, at the log's end, or outside the log."""
        while open_ := [read for read in pending if not read.done]:
            if time.monotonic() > deadline:
                shown = ", ".join(f"{r.topic}[{r.partition}] ({len(r.remaining)} offsets)" for r in open_)
                raise TimeoutError(f"replaying {shown} at bootstrap.servers={self._config.get('bootstrap.servers', '')}"
                                   f": not read after {self._timeout_s:.0f}s")
            budget = sum(read.last - read.position + 1 for read in open_)
            messages = consumer.consume(min(budget, REPLAY_CONSUME_BATCH), _CONSUME_WAIT_S)
            errors = list(map(Message.error, messages))
            start = 0
            for at in [at for at, error in enumerate(errors) if error is not None]:
                _keep_fetched(messages[start:at], reads)  # the records between events, taken together
                _on_event(cast(KafkaError, errors[at]), messages[at], reads, open_, self._config)
                start = at + 1
            _keep_fetched(messages[start:], reads)

    def _watermarks(self, consumer: Consumer, topic: str, partition: int, deadline: float) -> tuple[int, int]:
        while True:
            try:
                return consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=max(deadline - time.monotonic(), 0.1))
            except KafkaException as exc:
                error = exc.args[0]
                refused = refusal(error, self._config, "DESCRIBE", topics=[topic])
                if refused is not None:
                    raise refused from None
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


def _on_event(error: KafkaError, message: Message, reads: Mapping[tuple[str, int], _Read], open_: list[_Read],
              config: Mapping[str, Any]) -> None:
    """A partition's end, a position outside the log, or a client error; transient ones librdkafka recovers from
    on its own (it reconnects and fetches again). The replay group is only a name librdkafka requires: a read by
    offset never uses it, so a principal without an ACL on it (it needs none) reads on."""
    hit = reads.get((message.topic(), message.partition()))  # type: ignore[arg-type]
    if error.code() == KafkaError._PARTITION_EOF and hit is not None:
        hit.end = hit.position = cast(int, message.offset())  # the EOF's offset is the log's end
    elif error.code() in _OUT_OF_RANGE:
        for read in [hit] if hit is not None else open_:  # no partition named: ask about each
            read.out_of_range = True
    elif error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
        return
    elif not is_transient(error):
        raise refusal(error, config, "READ", topics=[str(message.topic())]) or KafkaException(error)


def _keep_fetched(records: list[Message], reads: Mapping[tuple[str, int], _Read]) -> None:
    """Keep the wanted ones of ``records`` (runs of one partition's, each in offset order; records of a partition
    not read are dropped) and move each partition's position past its records."""
    if not records:
        return
    if len(reads) == 1:  # one partition assigned: every record is its
        _keep(records, next(iter(reads.values())))
        return
    # runs of one partition's records, found without a loop per record
    runs = np.fromiter(map(Message.partition, records), np.int64, len(records))
    topics = sorted({topic for topic, _ in reads})
    if len(topics) > 1:  # the same partition number of two topics: apart, too
        index: dict[str | None, int] = {t: i for i, t in enumerate(topics)}
        runs += np.fromiter(map(index.__getitem__, map(Message.topic, records)), np.int64, len(records)) << 32
    bounds = [0, *(np.flatnonzero(np.diff(runs)) + 1).tolist(), len(records)]
    for start, end in itertools.pairwise(bounds):
        read = reads.get((records[start].topic(), records[start].partition()))  # type: ignore[arg-type]
        if read is not None:
            _keep(records[start:end], read)


def _keep(records: list[Message], read: _Read) -> None:
    """Keep the wanted ones of ``records`` (one partition's, in offset order) and move the position past them."""
    if not records:
        return
    offsets = cast(list[int], list(map(Message.offset, records)))  # a fetched record always has its offset
    if read.remaining.issuperset(offsets):
        read.result.records += records
    else:
        read.result.records += [record for record, offset in zip(records, offsets, strict=True)
                                if offset in read.remaining]
    read.remaining.difference_update(offsets)
    read.position = offsets[-1] + 1
