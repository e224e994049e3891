"""The ``delta`` coordinator: the share group's state lives in a Delta table; Kafka only serves the log.

The driver's member locks offset ranges in the group's ``share_state`` table (one commit per
batch: the acquisition, carrying the settle of the batch before, in the member's own thread
while Spark runs a batch) and hands the ranges to Spark; executors read the records
themselves with a plain consumer, so no record passes through the driver and many tasks read
one Kafka partition. Only Metadata, ListOffsets and Fetch reach Kafka: queue semantics on any
cluster, share groups enabled or not.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from sharegroup_source.acks import AckRun
from sharegroup_source.coordinators.base import Failures, Outcome, Settled
from sharegroup_source.coordinators.data_loss import DataLoss
from sharegroup_source.coordinators.delta.group_setup import set_up_group
from sharegroup_source.coordinators.delta.member import GroupMember, Held, Spans
from sharegroup_source.kafka.metadata import reach
from sharegroup_source.options import SourceOptions
from sharegroup_source.schema import POSITIONS
from state_store import AckType, OffsetRange
from state_store.group import GroupStore
from state_store.progress import ProgressTable

__all__ = ["DeltaCoordinator", "positions", "query_member_prefix"]

log = logging.getLogger(__name__)

#: Ranges to settle per share-partition: (first, last, how), as ``GroupMember.acquire`` settles them.
Ranges = dict[tuple[str, int], list[tuple[int, int, AckType]]]
#: A member commit's outcome: each riding settle's failures, and what was acquired.
Committed = tuple[list[Failures], list[Held]]
#: How often an idle acquisition looks at the log ends again while it waits for records.
IDLE_CHECK_S = 0.2


class DeltaCoordinator:
    """The query run's member of a Delta-coordinated group, behind the driver's Coordinator interface.

    Acknowledgements ride on the member's next commit, as a ShareFetch carries them: the acquisition
    ahead (one commit per batch, in the member's thread while Spark runs the batch), the next
    ``acquire``, or, when someone waits for their outcome, a commit of their own.
    """

    def __init__(self, member: GroupMember, max_records: int | None = None, query_prefix: str | None = None):
        """``max_records`` bounds an acquisition; None: what the subscribed share-partitions' in-flight
        windows hold (partitions x the group's ``share.partition.max.record.locks``). ``query_prefix``: the
        member ids of the query's runs (``query_member_prefix``), for a query's member; None for a worker."""
        self._member = member
        self._query_prefix = query_prefix
        self._max_records = max_records
        # the member's commits run here one at a time, in call order, so an acquisition never overtakes a settle
        # that frees what it would acquire
        self._turns = ThreadPoolExecutor(1, thread_name_prefix=f"member-{member.member_id}")
        self._riding: list[_Riding] = []  # acknowledgements not sent yet, in call order
        # the next batch's acquisition, started while Spark runs this one: (records asked for, its future)
        self._ahead: tuple[int, Future[Committed]] | None = None

    @classmethod
    def join(cls, options: SourceOptions, progress: ProgressTable, run_id: str,
             handover_timeout_s: float | None = None) -> DeltaCoordinator:
        """Join as ``<query prefix><run id>``; ``take_over`` gives back what the query's earlier runs hold."""
        assert options.group_location is not None, "options require groupLocation with coordinator=delta"
        reach(options.client_config)  # before anything else is asked of it: a wrong address is named as such
        group = GroupStore.open(options.group_location, options.group_id, {},
                                storage_options=dict(options.storage_options))
        set_up_group(group, options, first_run=not progress.totals(options.group_id))
        prefix = query_member_prefix(options.state_location)
        member = GroupMember(group, f"{prefix}{run_id}", "query", options.replay_config, options.topics,
                             DataLoss(options.fail_on_data_loss))
        return cls(member, options.max_poll_records, prefix)

    @property
    def member_id(self) -> str:
        return self._member.member_id

    @property
    def partitions(self) -> Mapping[str, int]:
        return self._member.partitions

    @property
    def lock_duration_ms(self) -> int | None:
        """None: the member renews its locks while it lives, so a held record never expires under a batch."""
        return None

    @property
    def delivery_limit(self) -> int:
        """The Delta group's ``share.delivery.count.limit`` setting, as the member last read it."""
        return self._member.group.settings.delivery_count_limit

    def acquires_at_most(self, max_records: int | None) -> int:
        """``max_records``: the member locks exactly the ranges it asks for (else every in-flight window)."""
        return max_records or self._max_records or self._windows

    @property
    def _windows(self) -> int:
        """Every subscribed share-partition's in-flight window, as many partitions as the topics have now."""
        return self._member.group.settings.max_record_locks * sum(self._member.partitions.values())

    def starts_at(self) -> str | None:
        """The Delta group's ``share.auto.offset.reset`` setting."""
        return self._member.group.settings.auto_offset_reset

    @property
    def next_run_takes_over(self) -> bool:
        """A query's member does: its runs' member ids share the query's prefix. A worker's does not."""
        return self._query_prefix is not None

    def take_over(self, unsettled: Sequence[OffsetRange]) -> None:
        """Hold what the query's earlier runs hold of ``unsettled``, and give back the rest they hold, so nothing
        waits for their locks to expire: the ledger fenced those runs. Only then: a run refused at its
        checkpoint check must not take a live run's records."""
        if self._query_prefix is not None:
            self._member.take_over(self._query_prefix, _spans(unsettled))

    def acquire(self, max_records: int | None, wait_s: float) -> pa.Table:
        """Positions (``schema.POSITIONS``) of at most ``max_records`` records, waiting up to ``wait_s`` for some."""
        limit = max_records or self._max_records or self._windows
        held = self._taken_ahead(limit)
        deadline = time.monotonic() + wait_s
        while not held:
            held = self._send(limit).result()[1]
            if held or time.monotonic() >= deadline:
                break
            time.sleep(min(IDLE_CHECK_S, max(deadline - time.monotonic(), 0)))
        return positions(held)

    def acquire_ahead(self, max_records: int | None) -> None:
        """Send what rides, and acquire the next batch with it, in the member's thread while Spark runs this one:
        the commit leaves the next ``latestOffset``. The acquisition only when a batch cannot hold every
        in-flight window: otherwise this batch holds them all until it settles, and nothing would be left."""
        limit = max_records or self._max_records or self._windows
        if self._ahead is None and limit < self._windows:
            self._ahead = (limit, self._send(limit))
        elif self._riding:
            self._send(0)

    def _taken_ahead(self, limit: int) -> list[Held]:
        """What ``acquire_ahead`` got (its error, if it failed); given back if it was asked for another size."""
        if self._ahead is None:
            return []
        (asked, future), self._ahead = self._ahead, None
        held = future.result()[1]
        if asked != limit and held:  # the read limit changed: the batch must not exceed the new one
            self.acknowledge([AckRun(h.topic, h.partition, h.records.first, h.records.last, AckType.RELEASE)
                              for h in held]).result()
            return []
        return held

    def acknowledge(self, acks: Sequence[AckRun]) -> Outcome:
        """Settle ``acks`` with the member's next commit."""
        ranges = _ranges((run.topic, run.partition, run.first, run.last, run.type) for run in acks)
        if not ranges:
            return Settled({})
        riding = _Riding(ranges, lambda: self._send(0))
        self._riding.append(riding)
        return riding

    def _send(self, max_records: int) -> Future[Committed]:
        """One commit in the member's thread: what rides, then an acquisition of up to ``max_records`` (none at 0)."""
        riding, self._riding = self._riding, []
        future = self._turns.submit(self._member.acquire, max_records, [r.ranges for r in riding])
        for n, r in enumerate(riding):
            r.carried_by(future, n)
        return future

    def archived(self) -> pa.Table:
        """Positions the group archived at its delivery-count limit since the last call."""
        return positions(self._member.archived())

    def lost_unread(self) -> int:
        """Records the member's acquisitions moved past after the log start left them unprocessed."""
        return self._member.data_loss.drain()

    def close(self, keep: Sequence[OffsetRange] = ()) -> None:
        """Leave the group, giving back what is held but ``keep`` (what was acquired ahead too)."""
        if self._ahead is not None:
            error = self._ahead[1].exception()  # waits: the member must not close under an acquisition
            if error is not None:
                log.info("member %s: the acquisition ahead failed while the query stopped: %s",
                         self._member.member_id, error)
            self._ahead = None
        self._turns.shutdown()  # waits for commits still under way: what they settled is no longer held
        self._member.close(_spans(keep))


class _Riding:
    """Acknowledgements waiting for the member's next commit; waiting for their outcome sends them at once."""

    def __init__(self, ranges: Ranges, send: Callable[[], object]):
        self.ranges = ranges
        self._send = send
        self._commit: Future[Committed] | None = None  # the commit that carries them, once sent
        self._index = 0  # which of its settles they are

    def carried_by(self, commit: Future[Committed], index: int) -> None:
        self._commit, self._index = commit, index

    def done(self) -> bool:
        return self._commit is not None and self._commit.done()

    def result(self) -> Failures:
        if self._commit is None:
            self._send()
        assert self._commit is not None, "sending gives every riding acknowledgement its commit"
        return self._commit.result()[0][self._index]


def _spans(ranges: Iterable[OffsetRange]) -> Spans:
    """The ledger's offset ranges as spans per share-partition, as ``GroupMember`` keeps and takes them over."""
    spans: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in ranges:
        spans.setdefault((r.topic, r.partition), []).extend(r.spans())
    return spans


def _ranges(runs: Iterable[tuple[str, int, int, int, AckType]]) -> Ranges:
    """Runs (topic, partition, first, last, type) by share-partition, as ``GroupMember.acquire`` settles them."""
    ranges: Ranges = {}
    for topic, partition, first, last, kind in runs:
        ranges.setdefault((topic, partition), []).append((first, last, kind))
    return ranges


def positions(held: Sequence[Held]) -> pa.Table:
    """Every offset of ``held`` as a row of ``schema.POSITIONS``."""
    sizes = [h.records.last - h.records.first + 1 for h in held]
    names = sorted({h.topic for h in held})
    index = {name: n for n, name in enumerate(names)}
    topics = pa.DictionaryArray.from_arrays(  # cast in C++, not a Python string per row
        pa.array(np.repeat(np.array([index[h.topic] for h in held], dtype=np.int32), sizes), pa.int32()),
        pa.array(names, pa.string())).cast(pa.string())
    return pa.table({
        "topic": topics,
        "partition": pa.array(np.repeat(np.array([h.partition for h in held], dtype=np.int32), sizes), pa.int32()),
        "offset": pa.array(np.concatenate([np.arange(h.records.first, h.records.last + 1, dtype=np.int64)
                                           for h in held]) if held else np.array([], np.int64), pa.int64()),
        "deliveryCount": pa.array(np.repeat(np.array([h.records.delivery_count for h in held], dtype=np.int32),
                                            sizes), pa.int32()),
    }, schema=POSITIONS)


def query_member_prefix(state_location: str) -> str:
    """Member ids of one query's runs share this prefix (its stateLocation is the query's identity)."""
    return f"query-{hashlib.sha256(state_location.encode()).hexdigest()[:12]}-"
