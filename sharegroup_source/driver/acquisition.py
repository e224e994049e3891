"""Where records enter the driver: acquired from the coordinator, judged (``admission``), cut into epochs.

Acquire until fresh records arrive or the queue stays idle long enough; hand every acquisition
to ``admission.admit``, and what it settles on the spot to the epoch book; more than the read
limit is kept acquired in the backlog for the next epochs. How many records an epoch takes is
``pacing``'s: a record on its last delivery attempt is never given back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from sharegroup_source.acks import record_keys, releases
from sharegroup_source.coordinators import Coordinator
from sharegroup_source.driver.admission import admit
from sharegroup_source.driver.backlog import Backlog, epoch_size
from sharegroup_source.driver.epoch_book import EpochBook
from sharegroup_source.driver.pacing import Pacing, longer_lock
from sharegroup_source.driver.run_context import RunContext
from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.metadata import log_end_offsets, log_offsets
from sharegroup_source.options import SourceOptions
from sharegroup_source.schema import NO_RECORDS

__all__ = ["Acquisition"]

log = logging.getLogger(__name__)

#: How long an AvailableNow run keeps polling an empty queue before it ends.
AVAILABLE_NOW_IDLE_S = 5.0
#: How long a run's first acquisition waits for records. Apache Kafka hands a new member its
#: partitions with its second heartbeat (about 5 s after it subscribes, at the default 5 s
#: interval); answering "nothing" before that would give Spark an empty first batch, and end
#: an AvailableNow run before it read anything. Two heartbeats and some.
FIRST_ACQUISITION_WAIT_S = 12.0


class Acquisition:
    """Acquires through ``coordinator`` for run ``run``; the verdict's settlements go through ``book``, which keeps
    the query's epochs. The lock duration bounds the backlog's age."""

    def __init__(self, coordinator: Coordinator, book: EpochBook, options: SourceOptions, run: RunContext):
        self._coordinator = coordinator
        self._book = book
        self._options = options
        self._run = run
        self._backlog = Backlog()
        self._pacing = Pacing(options.group_id, run.lock_duration_ms, coordinator.delivery_limit,
                              sum(coordinator.partitions.values()))
        limit = options.max_records_per_trigger
        self._pacing.warn_at_start(limit, coordinator.acquires_at_most(limit))
        #: what this run last gave back unread (to tell its return from records other members gave back), and when
        self._given_back: set[tuple[str, int, int]] = set()
        self._gave_back_at: float | None = None
        #: an AvailableNow run's target: per topic-partition, the log end when the run began (None: no such run)
        self._target: Mapping[tuple[str, int], int] | None = None
        # an AvailableNow run saw a record past its target: polling again would re-acquire the
        # records it gave back, spending a delivery attempt each time, so the run ends instead
        self._past_target = False
        self._assigned = False  # true once the member surely has its partitions: after its first acquisition
        self._told_empty_start = False  # whether a new query's empty start was explained (once)

    @property
    def past_target(self) -> bool:
        """Whether this AvailableNow run saw a record past its target: it acquires nothing more."""
        return self._past_target

    def available_now(self, target: Mapping[tuple[str, int], int] | None = None) -> None:
        """Make this an AvailableNow run: only records below ``target`` (per topic-partition; the log end now, if
        not given) belong to it, and later ones wait for the next."""
        self._target = target if target is not None else log_end_offsets(self._options.replay_config,
                                                                          self._coordinator.partitions)

    def ahead(self, max_records: int | None) -> None:
        """Let the coordinator acquire the next batch while Spark runs this one; never in an AvailableNow run,
        where records taken past its target would have a delivery spent for nothing."""
        if self._target is None:
            self._coordinator.acquire_ahead(max_records)

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
            fresh = self._admit(acquired, max_records, acquired_at_ms)
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
        idle_s = AVAILABLE_NOW_IDLE_S if self._target is not None else poll_s
        until = started + (idle_s if self._assigned else max(idle_s, FIRST_ACQUISITION_WAIT_S))
        if self._target is None:
            return until
        setbacks = [at for at in (self._gave_back_at, self._book.emitted.expected_at) if at is not None]
        return max([until] + [at + (self._run.lock_duration_ms or 0) / 1000 for at in setbacks])

    def give_back(self) -> None:
        """RELEASE the backlog: what a stop leaves."""
        self._book.give_back(releases(self._backlog.give_back()))

    def _give_back_aged(self) -> None:
        """RELEASE a backlog that no batch can emit inside its lock any more: emitted now, the batch would outlive
        the lock and its records be processed twice. None of it is on its last delivery attempt (``pacing``), so
        the group archives none of it.

        Work done again, so said at WARNING with what would avoid it: batches this slow need a longer lock, or
        fewer records acquired at once than the batches take."""
        waited_ms = int(time.time() * 1000) - self._backlog.acquired_at_ms
        records = self._backlog.give_back()
        self._run.counters.given_back += records.num_rows
        self._given_back, self._gave_back_at = set(record_keys(records)), time.monotonic()
        self._book.give_back(releases(records))
        lock_ms = self._run.lock_duration_ms
        assert lock_ms is not None, "a backlog whose locks are renewed never ages"
        log.warning("group %s: gave back %d acquired records that waited %.1fs for a batch, too long for one more "
                    "batch inside their %.1fs acquisition lock: they come back with their delivery count raised, to "
                    "this query or another member. Batches are slow for the lock: %s, or acquire fewer records at "
                    "once (groupConfig.share.partition.max.record.locks) or more per batch (maxRecordsPerTrigger)",
                    self._options.group_id, records.num_rows, waited_ms / 1000, lock_ms / 1000,
                    longer_lock(self._options.group_id, waited_ms, lock_ms, self._options.bootstrap_servers))

    def _note_redelivered(self, records: pa.Table) -> None:
        """Count the next epoch's records the group delivered before, and say where they come back from."""
        again = records.filter(pc.greater(records.column("deliveryCount"), 1)) if records.num_rows else records
        if not again.num_rows:
            return
        self._run.counters.redelivered += again.num_rows
        keys = record_keys(again)
        ours = sum(1 for key in keys if key in self._given_back)
        self._given_back.difference_update(keys)
        log.info("group %s: %d of the next batch's %d records were delivered before (delivery count up to %d): %d "
                 "this run gave back unread, %d another member's lock or release gave back (a stopped run of this "
                 "query included)", self._options.group_id, again.num_rows, records.num_rows,
                 pc.max(again.column("deliveryCount")).as_py(), ours, again.num_rows - ours)

    def _admit(self, records: pa.Table, max_records: int | None, acquired_at_ms: int) -> pa.Table:
        """The next epoch of an acquisition: what ``admit`` admits, cut by the read limit and the pace; the rest of
        what it admits waits in the backlog, and what it settles on the spot goes through the book."""
        verdict = admit(records, self._book.emitted, self._book.decision, max_deliveries=self._options.max_deliveries,
                        target=self._target, delivery_limit=self._pacing.delivery_limit)
        self._past_target |= verdict.past_target
        admitted = verdict.admitted
        cut = self._pacing.size(admitted.num_rows,
                                epoch_size(admitted, max_records, self._options.max_bytes_per_trigger),
                                verdict.last_attempts, acquired_at_ms)
        # released on purpose before, emitted again now in a new epoch
        self._book.came_back([epoch for at, epoch in verdict.came_back.items() if at < cut])
        self._book.settle_on_arrival(records, verdict)
        if cut < admitted.num_rows:
            self._backlog.keep(admitted.slice(cut), acquired_at_ms)
        return admitted.slice(0, cut)

    def explain_empty_start(self) -> None:
        """A new query whose first acquisitions found nothing while its topics hold records: say once why that may
        be (a group starting at the log end is the first run's usual surprise), and how to start at the beginning."""
        if self._told_empty_start or self._past_target:
            return
        self._told_empty_start = True
        starts_at = self._coordinator.starts_at()
        if starts_at == "earliest":
            return
        try:
            offsets = log_offsets(self._options.replay_config, self._coordinator.partitions, timeout_s=5.0)
        except ClusterError as error:  # only a hint: a cluster that cannot say fails no query
            log.debug("group %s: no log offsets to explain an empty start: %s", self._options.group_id, error)
            return
        held = sum(end - start for start, end in offsets.values())
        if held <= 0:
            return
        setting = ("share.auto.offset.reset=latest" if starts_at == "latest"
                   else "share.auto.offset.reset (latest unless the group sets it; the cluster did not say)")
        log.warning("group %s acquired nothing for this new query, though %s hold %s records: a share group "
                    "starting at the log end (%s) gets only records produced after it first fetched, and records "
                    "delivered to the group before are not delivered again. To read what the topics hold, start a new "
                    "group with the source option startingOffsets=earliest (it sets share.auto.offset.reset=earliest "
                    "before the group's first fetch), or move this one with sharegroup reset-offsets",
                    self._options.group_id, ", ".join(sorted(self._coordinator.partitions)), f"{held:,}", setting)
