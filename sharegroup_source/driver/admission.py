"""Which acquired records make the next epoch, and what becomes of the others.

An acquisition may bring records this query emitted before (their acknowledgement was lost:
settled on the spot as decided then, not emitted twice, unless they were RELEASEd on
purpose), records past ``maxDeliveries`` (rejected), records past an AvailableNow run's
target (given back), and more than the read limit (kept acquired in the backlog for the next
epochs). Only rows that may be any of those are looked at one by one. How many records an epoch
takes is ``pacing``'s: a record on its last delivery attempt is never given back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sharegroup_source.acks import Ack, AckType, record_keys, releases, runs_of
from sharegroup_source.coordinators import Coordinator
from sharegroup_source.driver.acknowledger import Acknowledger, longer_lock
from sharegroup_source.driver.backlog import Backlog, epoch_size
from sharegroup_source.driver.epoch_book import EpochBook
from sharegroup_source.driver.pacing import Pacing
from sharegroup_source.options import SourceOptions
from sharegroup_source.schema import NO_RECORDS, by_partition
from state_store import SourceCounters

__all__ = ["Admission"]

log = logging.getLogger(__name__)

MAX_DELIVERIES_REASON = "max deliveries exceeded"
#: How long an AvailableNow run keeps polling an empty queue before it ends.
AVAILABLE_NOW_IDLE_S = 5.0
#: How long a run's first acquisition waits for records. Apache Kafka hands a new member its
#: partitions with its second heartbeat (about 5 s after it subscribes, at the default 5 s
#: interval); answering "nothing" before that would give Spark an empty first batch, and end
#: an AvailableNow run before it read anything. Two heartbeats and some.
FIRST_ACQUISITION_WAIT_S = 12.0


class Admission:
    """Acquires through ``coordinator`` and admits against ``book``; what is not admitted is settled through
    ``acks`` at once. ``lock_duration_ms`` (None: renewed while the member lives) bounds the backlog's age."""

    def __init__(self, coordinator: Coordinator, acks: Acknowledger, book: EpochBook, options: SourceOptions,
                 counters: SourceCounters, lock_duration_ms: int | None):
        self._coordinator = coordinator
        self._acks = acks
        self._book = book
        self._options = options
        self._counters = counters
        self._backlog = Backlog()
        self._lock_duration_ms = lock_duration_ms
        self._pacing = Pacing(options.group_id, lock_duration_ms, coordinator.delivery_limit,
                              sum(coordinator.partitions.values()))
        limit = options.max_records_per_trigger
        self._pacing.warn_at_start(limit, coordinator.acquires_at_most(limit))
        #: what this run last gave back unread (to tell its return from records other members gave back), and when
        self._given_back: set[tuple[str, int, int]] = set()
        self._gave_back_at: float | None = None
        #: an AvailableNow run's target: per topic-partition, the log end when the run began (None: no such run)
        self.target: Mapping[tuple[str, int], int] | None = None
        # an AvailableNow run saw a record past its target: polling again would re-acquire the
        # records it gave back, spending a delivery attempt each time, so the run ends instead
        self._past_target = False
        self._assigned = False  # true once the member surely has its partitions: after its first acquisition

    @property
    def past_target(self) -> bool:
        """Whether this AvailableNow run saw a record past its target: it acquires nothing more."""
        return self._past_target

    def acquire(self, max_records: int | None) -> tuple[pa.Table, int]:
        """The next epoch's records and when they were acquired: from the backlog, or newly acquired.

        Acquire until fresh records arrive or the queue stays idle long enough. Redeliveries are
        settled on the spot and do not end the wait. Under Trigger.AvailableNow an empty
        answer ends the run, and a new member's first acquisitions return nothing until its
        assignment arrives, so emptiness must last a while; but once an acquisition brought records
        past the run's target, the run ends without acquiring again (each time would acquire
        them anew, and the group archives a record at its delivery-count limit).
        """
        self._pacing.pace.called()
        fresh, acquired_at_ms = self._acquire(max_records)
        self._pacing.pace.answered(fresh.num_rows)
        return fresh, acquired_at_ms

    def _acquire(self, max_records: int | None) -> tuple[pa.Table, int]:
        if self._backlog:
            if self._pacing.emittable(self._backlog.acquired_at_ms):
                waiting = self._backlog.records
                taken = self._backlog.take(self._pacing.size(
                    waiting.num_rows, epoch_size(waiting, max_records, self._options.max_bytes_per_trigger), 0,
                    self._backlog.acquired_at_ms))
                self._note_redelivered(taken)
                return taken, self._backlog.acquired_at_ms
            self._give_back_aged()
        if self._past_target:
            return NO_RECORDS, int(time.time() * 1000)
        poll_s = self._options.poll_timeout_ms / 1000
        started = time.monotonic()
        while True:
            remaining = self._idle_until(started, poll_s) - time.monotonic()
            acquired_at_ms = int(time.time() * 1000)
            acquired = self._coordinator.acquire(max_records, max(min(poll_s, remaining), 0.01))
            self._book.collect()  # settled before it was acquired: a record that failed to settle is expected back
            fresh = self.admit(acquired, max_records, acquired_at_ms)
            # past the target: acquiring again would take back what was just given back
            if fresh.num_rows or self._past_target or time.monotonic() >= self._idle_until(started, poll_s):
                self._assigned = True
                self._note_redelivered(fresh)
                return fresh, acquired_at_ms

    def _idle_until(self, started: float, poll_s: float) -> float:
        """Until when an acquisition that began at ``started`` waits on an empty queue before it answers "nothing".

        A poll's timeout; under AvailableNow, whose run ends on that answer, ``AVAILABLE_NOW_IDLE_S``, and no sooner
        than one lock duration after this run last gave records back unread or had an acknowledgement fail: those
        records are the group's to deliver again by the end of their lock at the latest, and the member's next
        fetches may be slow (librdkafka's embedded broker answered 5 s apart after a failed acknowledgement, which
        ended runs with records still in the queue)."""
        idle_s = AVAILABLE_NOW_IDLE_S if self.target is not None else poll_s
        until = started + (idle_s if self._assigned else max(idle_s, FIRST_ACQUISITION_WAIT_S))
        if self.target is None:
            return until
        setbacks = [at for at in (self._gave_back_at, self._book.emitted.expected_at) if at is not None]
        return max([until] + [at + (self._lock_duration_ms or 0) / 1000 for at in setbacks])

    def give_back(self) -> None:
        """RELEASE the backlog: what a stop leaves."""
        self._acks.send(releases(self._backlog.give_back()))

    def _give_back_aged(self) -> None:
        """RELEASE a backlog that no batch can emit inside its lock any more: emitted now, the batch would outlive
        the lock and its records be processed twice. None of it is on its last delivery attempt (``pacing``), so
        the group archives none of it.

        Work done again, so said at WARNING with what would avoid it: batches this slow need a longer lock, or
        fewer records acquired at once than the batches take."""
        waited_ms = int(time.time() * 1000) - self._backlog.acquired_at_ms
        records = self._backlog.give_back()
        self._counters.given_back += records.num_rows
        self._given_back, self._gave_back_at = set(record_keys(records)), time.monotonic()
        self._acks.send(releases(records))
        assert self._lock_duration_ms is not None, "a backlog whose locks are renewed never ages"
        log.warning("group %s: gave back %d acquired records that waited %.1fs for a batch, too long for one more "
                    "batch inside their %.1fs acquisition lock: they come back with their delivery count raised, to "
                    "this query or another member. Batches are slow for the lock: %s, or acquire fewer records at "
                    "once (groupConfig.share.partition.max.record.locks) or more per batch (maxRecordsPerTrigger)",
                    self._options.group_id,
                    records.num_rows, waited_ms / 1000, self._lock_duration_ms / 1000,
                    longer_lock(self._options.group_id, waited_ms, self._lock_duration_ms,
                                self._options.bootstrap_servers))

    def _note_redelivered(self, records: pa.Table) -> None:
        """Count the next epoch's records the group delivered before, and say where they come back from."""
        again = records.filter(pc.greater(records.column("deliveryCount"), 1)) if records.num_rows else records
        if not again.num_rows:
            return
        self._counters.redelivered += again.num_rows
        keys = record_keys(again)
        ours = sum(1 for key in keys if key in self._given_back)
        self._given_back.difference_update(keys)
        log.info("group %s: %d of the next batch's %d records were delivered before (delivery count up to %d): %d "
                 "this run gave back unread, %d another member's lock or release gave back (a stopped run of this "
                 "query included)", self._options.group_id, again.num_rows, records.num_rows,
                 pc.max(again.column("deliveryCount")).as_py(), ours, again.num_rows - ours)

    def admit(self, records: pa.Table, max_records: int | None, acquired_at_ms: int) -> pa.Table:
        """Split an acquisition into fresh records, the backlog, and records settled on the spot.

        A redelivery of a record this query emitted gets the outcome decided for it then (ACCEPT
        unless recorded otherwise); one that was RELEASEd on purpose is emitted again. Records
        past ``maxDeliveries`` are rejected; records past the AvailableNow target are given
        back; records past the read limit wait in the backlog for the next epochs. Only rows that
        may be any of those are looked at one by one; the rest are admitted as a whole.
        """
        admitted = ~self._worth_a_look(records)
        came_back: dict[int, int] = {}  # admitted row -> the epoch that emitted (and released) it before
        immediate: list[Ack] = []
        rejected: dict[tuple[str, int, int], str | None] = {}
        deduped: list[tuple[int, tuple[str, int, int]]] = []  # (the epoch that emitted it, record)
        looked = np.flatnonzero(~admitted)
        candidates = records.take(pa.array(looked, pa.int64()))
        for row, key, count in zip(looked.tolist(), record_keys(candidates),
                                   candidates.column("deliveryCount").to_pylist(), strict=True):
            epoch = self._book.emitted.epoch_of(*key)
            earlier = self._book.decision(epoch, key) if epoch is not None else None
            if epoch is not None and earlier is not None and earlier[0] != AckType.RELEASE:
                immediate.append(Ack(*key, AckType(earlier[0])))
                deduped.append((epoch, key))
                self._counters.redeliveries_deduped += 1
                if earlier[0] == AckType.REJECT:
                    rejected[key] = earlier[1]
            elif self._options.max_deliveries and count > self._options.max_deliveries:
                immediate.append(Ack(*key, AckType.REJECT))
                rejected[key] = MAX_DELIVERIES_REASON
            elif self._beyond_target(key) and count < self._pacing.delivery_limit:  # else its last attempt
                immediate.append(Ack(*key, AckType.RELEASE))
                self._past_target = True
            else:
                admitted[row] = True
                if epoch is not None:
                    came_back[row] = epoch
        rows = np.flatnonzero(admitted)  # in acquisition order, but those on their last delivery attempt first
        last = records.column("deliveryCount").to_numpy()[rows] >= self._pacing.delivery_limit
        rows = np.concatenate([rows[last], rows[~last]])
        admitted_records = records if len(rows) == records.num_rows and not last.any() else records.take(
            pa.array(rows, pa.int64()))
        cut = self._pacing.size(admitted_records.num_rows,
                                epoch_size(admitted_records, max_records, self._options.max_bytes_per_trigger),
                                int(last.sum()), acquired_at_ms)
        # released on purpose before, emitted again now in a new epoch
        in_epoch = set(rows[:cut].tolist())
        self._book.came_back([epoch for row, epoch in came_back.items() if row in in_epoch])
        if rejected:
            self._acks.dead_letter(records, rejected)
        failed = self._acks.send(runs_of(immediate))
        self._book.came_back([epoch for epoch, key in deduped if key[:2] not in failed])
        if cut < admitted_records.num_rows:
            self._backlog.keep(admitted_records.slice(cut), acquired_at_ms)
        return admitted_records.slice(0, cut)

    def _worth_a_look(self, records: pa.Table) -> np.ndarray:
        """Per row, whether it may be a redelivery of an emitted record, past ``maxDeliveries`` or past the
        AvailableNow target: found per topic-partition, without a loop per record."""
        look = np.zeros(records.num_rows, np.bool_)
        if self._options.max_deliveries:
            look |= records.column("deliveryCount").to_numpy() > self._options.max_deliveries
        emitted = self._book.emitted
        if not len(emitted) and self.target is None:
            return look
        numbered = records.select(["topic", "partition", "offset"]).append_column(
            "row", pa.array(np.arange(records.num_rows), pa.int64()))
        for topic, partition, rows in by_partition(numbered):
            offsets = rows.column("offset").to_numpy()
            hit = emitted.may_hold(topic, partition, offsets)
            if self.target is not None:
                hit |= offsets >= self.target.get((topic, partition), 0)
            look[rows.column("row").to_numpy()[hit]] = True
        return look

    def _beyond_target(self, key: tuple[str, int, int]) -> bool:
        if self.target is None:
            return False
        return key[2] >= self.target.get(key[:2], 0)
