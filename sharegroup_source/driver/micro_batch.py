"""Driver side of a micro-batch: acquire an epoch, ledger it, plan it, settle it.

One instance lives in the driver's Python worker for a query run. Spark calls
``latestOffset(N)`` before ``commit(N)`` (and ``commit(N)`` only when it builds batch N+1),
and an explicit-mode share consumer cannot poll until its last poll is acknowledged:
so every committed epoch is settled first thing in ``latest_offset``, and again,
idempotently, in ``commit``. With ``checkpointLocation`` a watcher settles each epoch as
soon as Spark's commit log has it, whatever the trigger, and ``stop`` settles what Spark
committed before it releases the rest.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence

from sharegroup_source.coordinators import open_coordinator
from sharegroup_source.driver.acknowledger import Acknowledger
from sharegroup_source.driver.acquisition import Acquisition
from sharegroup_source.driver.checkpoint_check import CheckpointCheck
from sharegroup_source.driver.checkpoint_logs import CommitLog
from sharegroup_source.driver.commit_watcher import CommitWatcher
from sharegroup_source.driver.epoch_book import EpochBook
from sharegroup_source.driver.planning import payload_partitions, replay_partitions
from sharegroup_source.driver.read_back import read_back
from sharegroup_source.driver.run_context import RunContext
from sharegroup_source.errors import FencedError
from sharegroup_source.locations import check_source_locations
from sharegroup_source.offset import EpochOffset
from sharegroup_source.options import SourceOptions
from sharegroup_source.termination import uninterrupted
from state_store import LedgerEntry, OffsetRange, SourceCounters, StateStore
from state_store.ledger import Fence
from state_store.maintenance import BackgroundMaintenance

__all__ = ["MAINTAIN_EVERY_EPOCHS", "MicroBatchDriver"]

log = logging.getLogger(__name__)

#: Compact, checkpoint and vacuum the state tables this often (in the background), so a long-running query's
#: state stays small. A Delta commit costs more with every live file of its table (delta-rs 1.6: a ledger write of
#: 16 ranges took 5 ms on a fresh table, 22-25 ms 150-200 epochs later, 5 ms again after a maintenance round of
#: 54-77 ms), and every epoch's ledger write is on the batch's path.
MAINTAIN_EVERY_EPOCHS = 50
#: How long a stop waits for a maintenance round under way.
MAINTENANCE_STOP_WAIT_S = 30.0
#: How often a run's counters go to the progress table (and when it stops): a row per epoch would double the
#: commits of a steady query.
PUBLISH_EVERY_S = 5.0


class MicroBatchDriver:
    """Spark's calls for one query run, under one lock: the checkpoint is checked (``CheckpointCheck``), records
    are acquired and admitted (``Acquisition``), epochs are ledgered, planned and settled (``EpochBook``, which
    alone acknowledges, through its ``Acknowledger``; tasks by ``planning``), and the run's counters go to the
    progress table. The member itself is opened, handed over and closed here.

    ``handover_timeout_s``: how long a run waits for the previous run's member to leave
    (None: the coordinator's default)."""

    def __init__(self, options: SourceOptions, handover_timeout_s: float | None = None):
        check_source_locations(options.locations, options.storage_options)  # fails here, before the member joins
        self._options = options
        self._group_id = options.group_id
        self._run_id = uuid.uuid4().hex
        self.store = StateStore(options.state_location, dead_letter_location=options.dead_letter_location,
                                storage_options=dict(options.storage_options))
        # Spark's checkpoint, where the option names it: read before joining, so a run the state
        # will refuse is refused before it joins the group; watched once the run started
        self._commit_log = CommitLog(options.checkpoint_location) if options.checkpoint_location else None
        self._checkpoint = CheckpointCheck(options, self.store, self._commit_log)
        self._checkpoint.before_joining()
        self.counters = SourceCounters()
        self._maintenance: BackgroundMaintenance[StateStore] = BackgroundMaintenance(
            lambda: StateStore(options.state_location, dead_letter_location=options.dead_letter_location,
                               storage_options=dict(options.storage_options)),
            StateStore.maintain, f"query {options.group_id}'s state")
        self._published: dict[str, int | None] = {}
        self._published_at = 0.0
        # None until Spark's first call that names the checkpoint's position: only then does this run know
        # whether the state is its own, so only then does it fence earlier runs (see _start)
        self._fence: Fence | None = None
        # joins once the previous run's member has left: that run's stop writes its releases to the ledger
        self._coordinator = open_coordinator(options, self.store.progress, self._run_id, handover_timeout_s)
        run = RunContext(self._group_id, self._run_id, self.store, self.counters, self._coordinator.lock_duration_ms,
                         options.bootstrap_servers, options.state_location_shown)
        acks = Acknowledger(self._coordinator, run, functools.partial(read_back, client_config=options.replay_config))
        self._book = EpochBook(run, acks, hand_over=self._coordinator.next_run_takes_over,
                               maintenance=self._maintenance, maintain_every=MAINTAIN_EVERY_EPOCHS)
        self._acquisition = Acquisition(self._coordinator, self._book, options, run)
        self._planned_through = 0  # Spark logged every epoch through the newest it planned: a stop's replayed ones
        self._lock = threading.RLock()  # Spark's calls and the commit watcher share the member: one at a time
        self._stopped = False
        self._watcher: CommitWatcher | None = None
        try:
            self._publish_counters()  # the member is in the group: a next run waits for it to leave
        except BaseException:  # SIGTERM included: a member nobody will stop must leave now
            self._coordinator.close()
            self._publish_counters(left=True)
            raise
        if self._commit_log is None:
            log.info("group %s: an epoch is acknowledged when Spark builds the next batch; set the source option "
                     "checkpointLocation to the query's checkpoint to acknowledge at Spark's commit", self._group_id)

    def _start(self, offsets: Sequence[EpochOffset], position: int) -> None:
        """Check the checkpoint against the state, then fence earlier runs: both in one commit.

        Called by every Spark call that names the checkpoint's position (``position``: the epoch
        Spark resumes after; ``offsets``: the offsets it handed over), before anything is written.
        A run the state refuses raises StateMismatchError and fences nobody, so a second query
        pointed at a running one's state fails alone. A run the state accepts (a restart of
        the same checkpoint) fences every earlier run, a zombie driver included, before its first
        ledger write: from then on their writes fail.
        """
        if self._fence is not None:
            return
        self._fence = self.store.ledger.fence(self._group_id, self._run_id,
                                              check=lambda view: self._checkpoint.check(view, offsets, position))
        self._book.read_ledger()
        self._coordinator.take_over(self._book.take_over_unsettled())
        if self._commit_log is not None:
            self._watcher = CommitWatcher(self._commit_log, functools.partial(self.commit, at_once=True),
                                          self._record_settled_between_batches)

    # -- Spark's calls ---------------------------------------------------------------
    def initial_offset(self) -> dict:
        """Always epoch 0: Spark asks again when it re-runs batch 0, so the answer must not move."""
        return EpochOffset(0).json()

    def latest_offset(self, start: Mapping, max_records: int | None, acquire_ahead: bool = True) -> dict:
        """The next epoch's end offset. ``acquire_ahead``: whether the coordinator may acquire the batch after it
        while Spark runs this one (never under AvailableNow, which the driver knows of when Spark says so)."""
        with self._lock, uninterrupted():
            idle = False  # nothing new: a batch waits on nothing, so the counters go out at once
            try:
                offset = self._latest_offset(EpochOffset.of(start), max_records, acquire_ahead)
                idle = offset.epoch == EpochOffset.of(start).epoch
                self._book.dead_letter_archived()
                return offset.json()
            finally:
                self._publish_counters(at_once=idle)

    def _latest_offset(self, start: EpochOffset, max_records: int | None, acquire_ahead: bool) -> EpochOffset:
        self._start((start,), start.epoch)
        self._book.settle_through(start.epoch)
        next_epoch = start.epoch + 1
        if self._checkpoint.ledgered_next(next_epoch):
            self._book.record_settled()
            return self._offset(next_epoch)  # ledgered by an earlier run before Spark logged it: same epoch again
        # a RELEASED epoch Spark never logged gave its records back: the epoch is acquired anew
        fresh, acquired_at_ms = self._acquisition.acquire(max_records)
        if not fresh.num_rows:
            if next_epoch == 1:
                self._acquisition.explain_empty_start()
            self._book.record_settled()
            return start
        self._book.write(next_epoch, fresh, acquired_at_ms)
        if acquire_ahead:
            self._acquisition.ahead(max_records)
        return self._offset(next_epoch)

    def _offset(self, epoch: int) -> EpochOffset:
        """An offset names the state it belongs to, so a checkpoint can never be paired with another state."""
        assert self._fence is not None, "an offset is handed out only by a started run"
        return EpochOffset(epoch, self._fence.state_id)

    def plan(self, start: Mapping, end: Mapping) -> list:
        with self._lock, uninterrupted():
            return self._plan(EpochOffset.of(start), EpochOffset.of(end))

    def _plan(self, start: EpochOffset, end: EpochOffset) -> list:
        self._start((start, end), end.epoch)  # a restart's first call when Spark runs its last batch again
        partitions: list = []
        replayed: list[LedgerEntry] = []  # earlier runs' epochs
        for epoch in range(start.epoch + 1, end.epoch + 1):
            payload, held = self._book.payload(epoch), self._book.held(epoch)
            if payload is not None:  # this run's epochs stay ACQUIRED until settled: no commit per plan
                partitions += payload_partitions(epoch, payload, self._options)
            elif held is not None:  # acquired by position: read from the log
                partitions += replay_partitions(held, self._options)
            else:
                replayed.append(self._checkpoint.logged(epoch))
                partitions += replay_partitions(replayed[-1], self._options)
        self._book.replaying(replayed)
        self._planned_through = max(self._planned_through, end.epoch)
        return partitions

    def commit(self, epoch: int, at_once: bool = False) -> None:
        """Settle through ``epoch``: called by Spark at the next trigger, and by the commit watcher, which
        settles ``at_once`` rather than with the coordinator's next acquisition (Spark may not ask soon)."""
        with self._lock, uninterrupted():
            try:
                self._start((), epoch)
                self._book.settle_through(epoch)
                if at_once:
                    self._book.collect(wait=True)
                self._book.dead_letter_archived()
            finally:
                self._publish_counters()

    def stop(self) -> None:
        """Give back what is held and leave the group; once, however often it is called."""
        if self._watcher is not None:
            self._watcher.stop()
        with self._lock:
            if not self._stopped:
                self._stopped = True
                self._stop()

    def _stop(self) -> None:
        kept: tuple[OffsetRange, ...] = ()  # epochs Spark runs again, locked for the next run where it takes over
        replayed = self._book.held_through(self._planned_through)  # one not planned yet: dead-lettered, maybe replayed
        try:
            try:
                self._settle_committed()
            finally:
                # whatever cut the settling short (Kafka, the state store, a signal), what is held goes back and the
                # ledger says so, each part whatever the other did: a member leaving with an epoch still ACQUIRED in
                # the ledger tells the next run of locks that nobody holds
                try:
                    self._acquisition.give_back()
                finally:
                    kept = self._book.release_held()
        finally:
            try:
                self._coordinator.close(kept)
                self._book.dead_letter_archived(replayed)  # a RELEASE at the limit archives
            finally:
                self._publish_counters(left=True)
                self._maintenance.close(MAINTENANCE_STOP_WAIT_S)

    def _settle_committed(self) -> None:
        """Settle what Spark committed before the stop: it will not call commit for it again."""
        if self._fence is None:  # a run that never started holds nothing, and the ledger may be another run's
            self._book.collect(wait=True)
            return
        committed = self._commit_log.committed_epoch() if self._commit_log is not None else None
        try:
            if committed is not None:
                self._book.settle_through(committed)
            self._book.collect(wait=True)
            self._book.record_settled()
        except FencedError as fenced:  # the ACCEPTs went out; what is held still goes back
            log.warning("%s", fenced)

    def prepare_available_now(self) -> None:
        """Only records already in the log now belong to this run; later ones wait for the next."""
        self._acquisition.available_now()

    # -- between Spark's calls ---------------------------------------------------------
    def _record_settled_between_batches(self) -> None:
        """The commit watcher's call when Spark has not come by since it settled: under a long trigger the
        next epoch's entry, which would carry the statuses, is a trigger interval away."""
        with self._lock:
            if not self._stopped:
                self._book.record_settled()

    # -- telemetry ---------------------------------------------------------------------
    def _publish_counters(self, left: bool = False, at_once: bool = False) -> None:
        """The first row says the member joined, the last that it left; in between, while records flow, one
        every PUBLISH_EVERY_S, and ``at_once`` when the queue is idle."""
        self.counters.lost_unread += self._coordinator.lost_unread()
        snapshot = self.counters.snapshot()
        due = at_once or not self._published or time.monotonic() - self._published_at >= PUBLISH_EVERY_S
        if (snapshot != self._published and due) or left:
            self.store.progress.append(self._group_id, self._run_id, snapshot, left=left)
            self._published, self._published_at = snapshot, time.monotonic()
