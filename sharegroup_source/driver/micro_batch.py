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
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

from sharegroup_source.acks import Ack, AckType, record_keys, releases, runs_of
from sharegroup_source.coordinators import open_coordinator
from sharegroup_source.driver.acknowledger import Acknowledger, Settlement, settled_statuses
from sharegroup_source.driver.backlog import Backlog, epoch_size
from sharegroup_source.driver.checkpoint_logs import CommitLog, CommitWatcher
from sharegroup_source.driver.emitted_index import EmittedIndex
from sharegroup_source.errors import ClusterError, FencedError, StateMismatchError
from sharegroup_source.executor.partition_reader import PayloadPartition, ReplayPartition, read_back
from sharegroup_source.kafka.metadata import log_end_offsets, log_offsets
from sharegroup_source.locations import check_source_locations
from sharegroup_source.offset import EpochOffset
from sharegroup_source.options import SourceOptions
from sharegroup_source.redaction import redact_location
from sharegroup_source.schema import NO_RECORDS, by_partition, has_payload, row_bytes, spans, to_ipc
from state_store import UNSETTLED, EpochStatus, LedgerEntry, OffsetRange, SourceCounters, StateStore
from state_store.dead_letters import DELIVERY_LIMIT_REASON
from state_store.ledger import Fence, LedgerView
from state_store.maintenance import BackgroundMaintenance

__all__ = ["MicroBatchDriver", "offset_ranges", "payload_partitions", "replay_partitions", "task_cuts"]

log = logging.getLogger(__name__)

MAX_DELIVERIES_REASON = "max deliveries exceeded"
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
#: How long an AvailableNow run keeps polling an empty queue before it ends.
AVAILABLE_NOW_IDLE_S = 5.0
#: How long a run's first acquisition waits for records. Apache Kafka hands a new member its
#: partitions with its second heartbeat (about 5 s after it subscribes, at the default 5 s
#: interval); answering "nothing" before that would give Spark an empty first batch, and end
#: an AvailableNow run before it read anything. Two heartbeats and some.
FIRST_ACQUISITION_WAIT_S = 12.0


class MicroBatchDriver:
    """``handover_timeout_s``: how long a run waits for the previous run's member to leave
    (None: the coordinator's default)."""

    def __init__(self, options: SourceOptions, handover_timeout_s: float | None = None):
        check_source_locations(options)  # a location it cannot use fails here, before the member joins
        self._options = options
        self._group_id = options.group_id
        self._run_id = uuid.uuid4().hex
        self.store = StateStore(options.state_location, dead_letter_location=options.dead_letter_location,
                                storage_options=dict(options.storage_options))
        # Spark's checkpoint, where the option names it: read before joining, so a run the state
        # will refuse is refused before it joins the group; watched once the run started
        self._commit_log = CommitLog(options.checkpoint_location) if options.checkpoint_location else None
        self._check_checkpoint_before_joining()
        self.counters = SourceCounters()
        self._maintenance = BackgroundMaintenance(
            lambda: StateStore(options.state_location, dead_letter_location=options.dead_letter_location,
                               storage_options=dict(options.storage_options)).maintain(),
            f"query {options.group_id}'s state")
        self._published: dict[str, int | None] = {}
        self._published_at = 0.0
        # statuses of settled epochs, recorded with the next ledger write: one commit per steady epoch
        self._settled: dict[int, EpochStatus] = {}
        self._settling: list[Settlement] = []  # settlements sent whose outcome is not applied yet, in order
        # None until Spark's first call that names the checkpoint's position: only then does this run know
        # whether the state is its own, so only then does it fence earlier runs (see _start)
        self._fence: Fence | None = None
        self._forget_ledger()
        # joins once the previous run's member has left: that run's stop writes its releases to the ledger
        self._coordinator = open_coordinator(options, self.store.progress, self._run_id, handover_timeout_s)
        lock_duration_ms = self._coordinator.lock_duration_ms
        self._acks = Acknowledger(self._coordinator, self.store, self._group_id, self.counters, lock_duration_ms,
                                  functools.partial(read_back, client_config=options.replay_config),
                                  options.bootstrap_servers)
        self._backlog = Backlog(lock_duration_ms)
        self._available_now: dict[tuple[str, int], int] | None = None
        # an AvailableNow run saw a record past its target: polling again would re-acquire the
        # records it gave back, spending a delivery attempt each time, so the run ends instead
        self._past_target = False
        self._decisions: dict[int, dict] = {}  # decisions of emitted epochs, for their redeliveries
        self._assigned = False  # true once the member surely has its partitions: after its first acquisition
        self._told_empty_start = False  # whether a new query's empty start was explained (once)
        # Spark's calls and the commit watcher share the member: one at a time
        self._lock = threading.RLock()
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
                     "checkpointLocation to the query's checkpoint to acknowledge as soon as Spark commits",
                     options.group_id)

    def _forget_ledger(self) -> None:
        """Nothing known of earlier runs: before the run started, and what an unstarted stop finds."""
        self._held: dict[int, LedgerEntry] = {}  # epochs this run's member acquired and has not settled
        self._payload: dict[int, pa.Table] = {}
        self._emitted = EmittedIndex()
        self._foreign: dict[int, LedgerEntry] = {}
        self._released: dict[int, LedgerEntry] = {}

    def _check_checkpoint_before_joining(self) -> None:
        """Refuse, before joining anything, a checkpoint whose committed position the state is ahead of.

        Spark names the position only in its first call, but the checkpoint the source option
        names says it now (Spark resumes after its newest committed batch). A run on a wrong
        checkpoint then never joins the share group: it takes no partitions from the run that
        holds the state, makes nobody wait for it, and fences nobody.
        """
        if self._commit_log is None:
            return
        try:
            committed = self._commit_log.committed_epoch()
        except (OSError, ValueError) as error:  # unreadable: Spark's first call carries the position anyway
            log.warning("cannot read the checkpoint at checkpointLocation=%s before joining (%s); the state is "
                        "checked at Spark's first call", self._checkpoint_shown, error)
            return
        self._check_checkpoint(self.store.ledger.view(self._group_id), (), committed or 0)

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
                                              check=lambda view: self._check_checkpoint(view, offsets, position))
        self._coordinator.take_over()
        self._read_ledger()
        if self._commit_log is not None:
            self._watcher = CommitWatcher(self._commit_log, functools.partial(self.commit, at_once=True),
                                          self._record_settled_between_batches)

    def _read_ledger(self) -> None:
        """What earlier runs left: epochs to deduplicate redeliveries against, and epochs to settle.

        Read once this run fenced them: from then on nobody else changes it."""
        live = self.store.ledger.entries(self._group_id, statuses=(*UNSETTLED, EpochStatus.ACK_FAILED))
        self._emitted = EmittedIndex(live)
        for entry in live:
            if entry.status == EpochStatus.ACK_FAILED:  # how many failed is not kept: all of them, at most
                self._emitted.expect_back(entry.epoch, entry.record_count)
        # unsettled epochs of an earlier run: their locks died with that run's member
        self._foreign = {e.epoch: e for e in live if e.status in UNSETTLED}
        # epochs an earlier run RELEASEd on stop: Spark may have committed them already (it says so
        # only when it builds the next batch), and then their records come back and must not be
        # emitted again
        self._released = {
            e.epoch: e for e in self.store.ledger.entries(self._group_id, statuses=(EpochStatus.RELEASED,))}

    # -- Spark's calls ---------------------------------------------------------------
    def initial_offset(self) -> dict:
        """Always epoch 0: Spark asks again when it re-runs batch 0, so the answer must not move."""
        return EpochOffset(0).json()

    def latest_offset(self, start: Mapping, max_records: int | None, acquire_ahead: bool = True) -> dict:
        """The next epoch's end offset. ``acquire_ahead``: whether the coordinator may acquire the batch after it
        while Spark runs this one (never under AvailableNow, which the driver knows of when Spark says so)."""
        with self._lock:
            idle = False  # nothing new: a batch waits on nothing, so the counters go out at once
            try:
                offset = self._latest_offset(EpochOffset.of(start), max_records, acquire_ahead)
                idle = offset.epoch == EpochOffset.of(start).epoch
                self._dead_letter_archived()
                return offset.json()
            finally:
                self._publish_counters(at_once=idle)

    def _latest_offset(self, start: EpochOffset, max_records: int | None, acquire_ahead: bool) -> EpochOffset:
        self._start((start,), start.epoch)
        self.settle_through(start.epoch)
        next_epoch = start.epoch + 1
        ledgered = self.store.ledger.get(self._group_id, next_epoch)
        if ledgered is not None and ledgered.status in (EpochStatus.ACKED, EpochStatus.ACK_FAILED):
            raise StateMismatchError(
                f"stateLocation={self._options.state_location_shown} already settled epoch {next_epoch}, which "
                f"this checkpoint has not started: each checkpoint needs its own stateLocation")
        if ledgered is not None and ledgered.status != EpochStatus.RELEASED:
            self._record_settled()
            return self._offset(next_epoch)  # ledgered by an earlier run before Spark logged it: same epoch again
        # a RELEASED epoch Spark never logged gave its records back: the epoch is acquired anew
        fresh, acquired_at_ms = self._acquire(max_records)
        if not fresh.num_rows:
            if next_epoch == 1 and not self._past_target:
                self._explain_empty_start()
            self._record_settled()
            return start
        entry = self._ledger_entry(next_epoch, fresh, acquired_at_ms)
        settled, self._settled = self._settled, {}
        try:
            kept = self.store.ledger.write_epoch(entry, replace_released=True, settled=settled)
            if kept.member_id != self._run_id:
                raise FencedError(f"query {self._group_id!r}: epoch {next_epoch} was ledgered by run "
                                  f"{kept.member_id} while this run ({self._run_id}) acquired it: two drivers use "
                                  f"stateLocation={self._options.state_location_shown}; this run gave its records "
                                  "back and stops")
        except BaseException:  # fenced, lost, the state unwritable, or SIGTERM: nothing holds these records
            self._settled = {**settled, **self._settled}  # not written, or written: writing them again is a no-op
            self._acks.send(releases(fresh))
            raise
        self._released.pop(next_epoch, None)
        self._held[next_epoch] = entry
        if has_payload(fresh):  # else the executors read the records themselves
            # headers are kept even when not emitted: a rejected record's dead letter needs them
            self._payload[next_epoch] = fresh.set_column(fresh.schema.get_field_index("epoch"), "epoch",
                                                         pa.array([next_epoch] * fresh.num_rows, pa.int64()))
        self._emitted.add(entry)
        self.counters.acquired += fresh.num_rows
        self.counters.epochs += 1
        if acquire_ahead and self._available_now is None:  # taken past an AvailableNow target: a delivery spent
            self._coordinator.acquire_ahead(max_records)
        return self._offset(next_epoch)

    def _offset(self, epoch: int) -> EpochOffset:
        """An offset names the state it belongs to, so a checkpoint can never be paired with another state."""
        assert self._fence is not None, "an offset is handed out only by a started run"
        return EpochOffset(epoch, self._fence.state_id)

    def _check_checkpoint(self, view: LedgerView, offsets: Sequence[EpochOffset], position: int) -> None:
        """Refuse a checkpoint this state cannot have produced, or that the state has gone past.

        ``position`` is the epoch the checkpoint resumes after: Spark's start offset, or the end
        of a batch it runs again. A run of this checkpoint ledgers at most the epoch after it
        (ledgered, then Spark failed before logging it), so a state holding more, or having
        settled that one, belongs to another checkpoint or to another run of this one.
        """
        where = f"stateLocation={self._options.state_location_shown}"
        for offset in offsets:
            if offset.state is not None and offset.state != view.state_id:
                holds = f"state {view.state_id}" if view.state_id else "no state (it is new, or was emptied)"
                raise StateMismatchError(
                    f"the checkpoint's offsets belong to state {offset.state}, but {where} holds {holds}: the state "
                    "location was replaced, or another query's checkpoint is used; each checkpoint needs the "
                    "stateLocation it started with")
        if position > 0 and position not in view.statuses:
            raise StateMismatchError(
                f"the checkpoint resumes after epoch {position}, which {where} does not hold: was the state "
                "location deleted or replaced? Restore it, or start a new checkpoint with a new stateLocation")
        newest = view.max_epoch
        following = view.statuses.get(position + 1)
        if newest is not None and (newest > position + 1 or following in (EpochStatus.ACKED, EpochStatus.ACK_FAILED)):
            raise StateMismatchError(self._ahead_of_checkpoint(view, position, newest))

    def _ahead_of_checkpoint(self, view: LedgerView, position: int, newest: int) -> str:
        """Why a state ahead of this run's checkpoint is refused, as precisely as this run can tell."""
        where = f"stateLocation={self._options.state_location_shown}"
        holds = (f"{where} already holds epochs up to {newest} of group {self._group_id!r}" if newest > position + 1
                 else f"{where} already settled epoch {newest} of group {self._group_id!r}")
        holder = f" (run {view.holder} holds it{self._run_whereabouts(view.holder)})" if view.holder else ""
        kept = "This run stops and fenced nothing: the run that holds the state goes on"
        if self._commit_log is None:
            began = "epoch 0 (its checkpoint had no batch)" if position == 0 else f"epoch {position}"
            return (f"this run resumes from {began}, but {holds}{holder}: either another query started on this "
                    "stateLocation with a checkpoint of its own (each checkpoint needs its own stateLocation), or "
                    "two runs of one checkpoint run at once (a checkpoint runs once at a time). Set the source "
                    f"option checkpointLocation to the query's checkpoint to be told which. {kept}")
        checkpoint = f"checkpointLocation={self._checkpoint_shown}"
        try:
            committed = CommitLog(self._commit_log_location).committed_epoch()  # now, not when this run began
        except (OSError, ValueError):
            committed = None
        if committed is not None and committed > position:
            return (f"another run of this query's checkpoint is ahead of this one: {checkpoint} has committed epoch "
                    f"{committed} and {holds}{holder}, while this run resumes from epoch {position}. A checkpoint "
                    f"runs once at a time: stop one of the two. {kept}")
        if committed is None and position == 0:
            return (f"a new checkpoint ({checkpoint} has no committed batch) starts on {where}, which already holds "
                    f"epochs up to {newest} of group {self._group_id!r}{holder}: each checkpoint needs its own "
                    f"stateLocation. {kept}")
        return (f"{checkpoint} resumes from epoch {position}, but {holds}{holder}: the checkpoint is another query's, "
                f"or older than the state (restored from a copy?); each checkpoint needs its own stateLocation. {kept}")

    def _run_whereabouts(self, run_id: str) -> str:
        """Where a run's member is, from the progress table: an operator looks for it there."""
        rows = [r for r in self.store.progress.table.snapshot().rows()
                if r["query_id"] == self._group_id and r["run_id"] == run_id]
        if not rows:
            return ""
        last = max(rows, key=lambda r: r["commit_version"])
        if last["left_at_ms"] is not None:
            return f", its member left the group at {_iso(last['left_at_ms'])}"
        return f", its member is in the group: pid {last['pid']} on {last['host']}"

    @property
    def _commit_log_location(self) -> str:
        assert self._options.checkpoint_location is not None
        return self._options.checkpoint_location

    @property
    def _checkpoint_shown(self) -> str:
        return redact_location(self._commit_log_location)

    def plan(self, start: Mapping, end: Mapping) -> list:
        with self._lock:
            return self._plan(EpochOffset.of(start), EpochOffset.of(end))

    def _plan(self, start: EpochOffset, end: EpochOffset) -> list:
        self._start((start, end), end.epoch)  # a restart's first call when Spark runs its last batch again
        partitions: list = []
        emitted = []
        for epoch in range(start.epoch + 1, end.epoch + 1):
            if epoch in self._payload:  # this run's epochs stay ACQUIRED until settled: no commit per plan
                partitions += payload_partitions(epoch, self._payload[epoch], self._options)
                continue
            if epoch in self._held:  # acquired by position: read from the log
                partitions += replay_partitions(self._held[epoch], self._options)
                continue
            entry = self.store.ledger.get(self._group_id, epoch)
            if entry is None:
                raise StateMismatchError(
                    f"epoch {epoch} is in Spark's checkpoint but not in the ledger at stateLocation="
                    f"{self._options.state_location_shown}: was the state location changed or deleted?")
            partitions += replay_partitions(entry, self._options)
            self._released.pop(epoch, None)
            if entry.status == EpochStatus.RELEASED:
                emitted.append(epoch)
                self._emitted.add(entry)
            if entry.status == EpochStatus.RELEASED or entry.status in UNSETTLED:
                self._foreign[epoch] = entry
        if emitted:
            self.store.ledger.set_status(self._group_id, emitted, EpochStatus.EMITTED)
        return partitions

    def commit(self, epoch: int, at_once: bool = False) -> None:
        """Settle through ``epoch``: called by Spark at the next trigger, and by the commit watcher, which
        settles ``at_once`` rather than with the coordinator's next acquisition (Spark may not ask soon)."""
        with self._lock:
            try:
                self._start((), epoch)
                self.settle_through(epoch)
                if at_once:
                    self._collect(wait=True)
                self._dead_letter_archived()
            finally:
                self._publish_counters()

    def settle_through(self, epoch: int) -> None:
        """Acknowledge the epochs this run holds through ``epoch``; their outcome is applied once the coordinator
        settled them (``_collect``), which a coordinator may do while Spark runs the next batch."""
        held = [self._held.pop(e) for e in sorted(self._held) if e <= epoch]
        if held:
            payloads = {e.epoch: self._payload.pop(e.epoch) for e in held if e.epoch in self._payload}
            self._settling.append(self._acks.settle(held, payloads))
            if held[-1].epoch % MAINTAIN_EVERY_EPOCHS == 0:
                self._maintenance.request()
        self._collect()
        committed = [self._released.pop(e) for e in sorted(self._released) if e <= epoch]
        for entry in committed:  # released by an earlier run's stop, yet committed by Spark
            self._emitted.add(entry)
            self._foreign[entry.epoch] = entry
        foreign = [self._foreign.pop(e) for e in sorted(self._foreign) if e <= epoch]
        if foreign:
            self._settled.update({e.epoch: EpochStatus.ACK_FAILED for e in foreign})
            self.counters.ack_failures += sum(e.record_count for e in foreign)
            for entry in foreign:  # their locks died with their member: every record comes back
                self._emitted.expect_back(entry.epoch, entry.record_count)

    def _collect(self, wait: bool = False) -> None:
        """Apply, in order, the outcome of settlements the coordinator finished; with ``wait``, of all of them.

        Before an acquisition is admitted, every settlement sent before it was acquired is applied: a
        coordinator settles in call order, so a record whose acknowledgement failed is expected back before
        it can come back."""
        while self._settling and (wait or self._settling[0].done()):
            unacknowledged = self._acks.outcome(self._settling[0])  # a failed commit raises here, and next time
            self._settling.pop(0)
            self._settled.update(settled_statuses(unacknowledged))
            for e, records in unacknowledged.items():
                if records:
                    self._emitted.expect_back(e, records)
                else:
                    self._emitted.remove_epoch(e)
                    self._decisions.pop(e, None)

    def stop(self) -> None:
        """Give back what is held and leave the group; once, however often it is called."""
        if self._watcher is not None:
            self._watcher.stop()
        with self._lock:
            if not self._stopped:
                self._stopped = True
                self._stop()

    def _stop(self) -> None:
        try:
            # a run that never started holds nothing and must not write: the ledger may be another run's
            committed = self._commit_log.committed_epoch() if self._commit_log and self._fence else None
            try:
                if committed is not None:  # Spark committed it and will not call commit for it again
                    self.settle_through(committed)
                self._collect(wait=True)
                if self._fence is not None:
                    self._record_settled()
            except FencedError as fenced:  # the ACCEPTs went out; what is held still goes back below
                log.warning("%s", fenced)
            self._acks.send(releases(self._backlog.give_back()))
            self._acks.release(self._held[e] for e in sorted(self._held))
            self._held.clear()
            self._payload.clear()
        finally:
            try:
                self._coordinator.close()
                self._dead_letter_archived()  # a RELEASE at the limit archives
            finally:
                self._publish_counters(left=True)
                self._maintenance.join(MAINTENANCE_STOP_WAIT_S)

    def prepare_available_now(self) -> None:
        """Only records already in the log now belong to this run; later ones wait for the next."""
        self._available_now = log_end_offsets(self._options.replay_config, self._coordinator.partitions)

    # -- helpers -----------------------------------------------------------------------
    def _record_settled(self) -> None:
        """Write the settled epochs' statuses now, when no ledger write of a new epoch will carry them."""
        settled, self._settled = self._settled, {}
        try:
            self.store.ledger.set_statuses(self._group_id, settled)
        except BaseException:
            self._settled = {**settled, **self._settled}
            raise

    def _record_settled_between_batches(self) -> None:
        """The commit watcher's call when Spark has not come by since it settled: under a long trigger the
        next epoch's entry, which would carry the statuses, is a trigger interval away."""
        with self._lock:
            if not self._stopped:
                self._record_settled()

    def _explain_empty_start(self) -> None:
        """A new query whose first acquisitions found nothing while its topics hold records: say once why that may
        be (a group starting at the log end is the first run's usual surprise), and how to start at the beginning."""
        if self._told_empty_start:
            return
        self._told_empty_start = True
        starts_at = self._coordinator.starts_at()
        if starts_at == "earliest":
            return
        try:
            offsets = log_offsets(self._options.replay_config, self._coordinator.partitions, timeout_s=5.0)
        except ClusterError as error:  # only a hint: a cluster that cannot say fails no query
            log.debug("group %s: no log offsets to explain an empty start: %s", self._group_id, error)
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
                    self._group_id, ", ".join(sorted(self._coordinator.partitions)), f"{held:,}", setting)

    def _publish_counters(self, left: bool = False, at_once: bool = False) -> None:
        """The first row says the member joined, the last that it left; in between, while records flow, one
        every PUBLISH_EVERY_S, and ``at_once`` when the queue is idle."""
        snapshot = self.counters.snapshot()
        due = at_once or not self._published or time.monotonic() - self._published_at >= PUBLISH_EVERY_S
        if (snapshot != self._published and due) or left:
            self.store.progress.append(self._group_id, self._run_id, snapshot, left=left)
            self._published, self._published_at = snapshot, time.monotonic()

    def _acquire(self, max_records: int | None) -> tuple[pa.Table, int]:
        """The next epoch's records and when they were acquired: from the backlog, or newly acquired.

        Acquire until fresh records arrive or the queue stays idle long enough. Redeliveries are
        settled on the spot and do not end the wait. Under Trigger.AvailableNow an empty
        answer ends the run, and a new member's first acquisitions return nothing until its
        assignment arrives, so emptiness must last a while; but once an acquisition brought records
        past the run's target, the run ends without acquiring again (each time would acquire
        them anew, and the group archives a record at its delivery-count limit).
        """
        if self._backlog:
            if self._backlog.fresh():
                taken = self._backlog.take(max_records, self._options.max_bytes_per_trigger)
                return taken, self._backlog.acquired_at_ms
            self._acks.send(releases(self._backlog.give_back()))
        if self._past_target:
            return NO_RECORDS, int(time.time() * 1000)
        poll_s = self._options.poll_timeout_ms / 1000
        idle_s = AVAILABLE_NOW_IDLE_S if self._available_now is not None else poll_s
        idle_until = time.monotonic() + (idle_s if self._assigned else max(idle_s, FIRST_ACQUISITION_WAIT_S))
        while True:
            remaining = idle_until - time.monotonic()
            acquired_at_ms = int(time.time() * 1000)
            acquired = self._coordinator.acquire(max_records, max(min(poll_s, remaining), 0.01))
            self._collect()  # settled before it was acquired: a record that failed to settle is expected back
            fresh = self._admit(acquired, max_records, acquired_at_ms)
            # past the target: acquiring again would take back what was just given back
            if fresh.num_rows or self._past_target or time.monotonic() >= idle_until:
                self._assigned = True
                return fresh, acquired_at_ms

    def _admit(self, records: pa.Table, max_records: int | None, acquired_at_ms: int) -> pa.Table:
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
            epoch = self._emitted.epoch_of(*key)
            earlier = self._decision(epoch, key) if epoch is not None else None
            if epoch is not None and earlier is not None and earlier[0] != AckType.RELEASE:
                immediate.append(Ack(*key, AckType(earlier[0])))
                deduped.append((epoch, key))
                self.counters.redeliveries_deduped += 1
                if earlier[0] == AckType.REJECT:
                    rejected[key] = earlier[1]
            elif self._options.max_deliveries and count > self._options.max_deliveries:
                immediate.append(Ack(*key, AckType.REJECT))
                rejected[key] = MAX_DELIVERIES_REASON
            elif self._beyond_target(key):
                immediate.append(Ack(*key, AckType.RELEASE))
                self._past_target = True
            else:
                admitted[row] = True
                if epoch is not None:
                    came_back[row] = epoch
        rows = np.flatnonzero(admitted)  # in acquisition order
        admitted_records = records if len(rows) == records.num_rows else records.take(pa.array(rows, pa.int64()))
        cut = epoch_size(admitted_records, max_records, self._options.max_bytes_per_trigger)
        # released on purpose before, emitted again now in a new epoch
        self._came_back([epoch for row, epoch in came_back.items() if cut and row <= rows[cut - 1]])
        if rejected:
            self._acks.dead_letter(records, rejected)
        failed = self._acks.send(runs_of(immediate))
        self._came_back([epoch for epoch, key in deduped if key[:2] not in failed])
        if cut < admitted_records.num_rows:
            self._backlog.keep(admitted_records.slice(cut), acquired_at_ms)
        return admitted_records.slice(0, cut)

    def _worth_a_look(self, records: pa.Table) -> np.ndarray:
        """Per row, whether it may be a redelivery of an emitted record, past ``maxDeliveries`` or past the
        AvailableNow target: found per topic-partition, without a loop per record."""
        look = np.zeros(records.num_rows, np.bool_)
        if self._options.max_deliveries:
            look |= records.column("deliveryCount").to_numpy() > self._options.max_deliveries
        if not len(self._emitted) and self._available_now is None:
            return look
        numbered = records.select(["topic", "partition", "offset"]).append_column(
            "row", pa.array(np.arange(records.num_rows), pa.int64()))
        for topic, partition, rows in by_partition(numbered):
            offsets = rows.column("offset").to_numpy()
            hit = self._emitted.may_hold(topic, partition, offsets)
            if self._available_now is not None:
                hit |= offsets >= self._available_now.get((topic, partition), 0)
            look[rows.column("row").to_numpy()[hit]] = True
        return look

    def _dead_letter_archived(self) -> None:
        """Records the group archived at its delivery-count limit: nobody gets them again, so they are kept."""
        archived = self._coordinator.archived()
        if archived.num_rows:
            self._acks.dead_letter(archived, dict.fromkeys(record_keys(archived), DELIVERY_LIMIT_REASON))

    def _came_back(self, epochs: Sequence[int]) -> None:
        """Redeliveries settled: an epoch none of whose records can come back any more is done."""
        done = [epoch for epoch in epochs if self._emitted.came_back(epoch)]
        for epoch in done:
            self._decisions.pop(epoch, None)
        # every record of theirs was acknowledged in the end; in order with their earlier ACK_FAILED
        self._settled.update(dict.fromkeys(done, EpochStatus.ACKED))

    def _decision(self, epoch: int, key: tuple[str, int, int]) -> tuple[str, str | None]:
        if epoch not in self._decisions:
            self._decisions[epoch] = self.store.decisions.for_epochs(self._group_id, [epoch])
        return self._decisions[epoch].get(key, (AckType.ACCEPT, None))

    def _beyond_target(self, key: tuple[str, int, int]) -> bool:
        if self._available_now is None:
            return False
        return key[2] >= self._available_now.get(key[:2], 0)

    def _ledger_entry(self, epoch: int, records: pa.Table, acquired_at_ms: int) -> LedgerEntry:
        lock_ms = self._coordinator.lock_duration_ms  # None: renewed while the member lives
        return LedgerEntry(self._group_id, epoch, offset_ranges(records), self._run_id, acquired_at_ms,
                           None if lock_ms is None else acquired_at_ms + lock_ms, EpochStatus.ACQUIRED)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def offset_ranges(records: pa.Table) -> tuple[OffsetRange, ...]:
    """An output table's records as the ledger keeps them: per topic-partition, offsets and delivery counts."""
    ranges = []
    for topic, partition, rows in by_partition(records):
        offsets, counts = rows.column("offset"), rows.column("deliveryCount").to_numpy()
        again = np.flatnonzero(counts != 1)
        redelivered = zip(offsets.to_numpy()[again].tolist(), counts[again].tolist(), strict=True)
        ranges.append(OffsetRange.of_spans(topic, partition, spans(offsets), tuple(redelivered)))
    return tuple(ranges)


def payload_partitions(epoch: int, table: pa.Table, options: SourceOptions) -> list[PayloadPartition]:
    """An acquired epoch's tasks: at most maxRecordsPerPartition records each, and at most maxBytesPerPartition
    bytes as each travels (compressed Arrow IPC), a larger record alone. Spark sends a task to its executor in one
    message and warns of every task above 1000 KiB, so the bound is on the bytes sent, which compression makes a
    fraction of the records' own for most payloads (offsets, timestamps and the topic nearly vanish)."""
    table = table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    if not options.include_headers:
        table = table.drop_columns(["headers"])
    record_bytes = np.asarray(row_bytes(table), np.int64)
    other_columns = -(-max(table.nbytes - int(record_bytes.sum()), 0) // max(table.num_rows, 1))  # per row, rounded up
    weights = record_bytes + other_columns  # a row as Arrow holds it, before compression
    pieces = itertools.pairwise(task_cuts(weights, options.max_records_per_partition, _UNBOUNDED))
    return [PayloadPartition(epoch, payload) for start, end in pieces
            for payload in _packed(table, weights, start, end, options.max_bytes_per_partition)]


#: no bound on a task's bytes (task_cuts then cuts by records alone)
_UNBOUNDED = 2**62
#: how much more than its piece's average a row may weigh compressed, when a piece too large is cut by estimate
_ESTIMATE_MARGIN = 1.1


def _packed(table: pa.Table, weights: np.ndarray, start: int, end: int, max_bytes: int) -> list[bytes]:
    """Rows ``start`` to ``end`` of ``table`` as compressed payloads of at most ``max_bytes`` (a larger row alone).

    What a row weighs compressed is known only once compressed, so the rows are compressed whole first; a payload
    too large is cut by its rows' weights scaled to what the piece compressed to (with a margin), and each part
    is packed the same way, so every payload is checked and a part that still exceeds is cut again."""
    payload = to_ipc(table.slice(start, end - start))
    if len(payload) <= max_bytes or end - start == 1:
        return [payload]
    scale = len(payload) / max(int(weights[start:end].sum()), 1) * _ESTIMATE_MARGIN
    cuts = [start + cut for cut in task_cuts(np.ceil(weights[start:end] * scale).astype(np.int64), end - start,
                                             max_bytes)]
    if len(cuts) == 2:  # the estimate fits the piece whole, which the payload did not: halve it
        cuts = [start, (start + end) // 2, end]
    return [each for a, b in itertools.pairwise(cuts) for each in _packed(table, weights, a, b, max_bytes)]


def task_cuts(weights: np.ndarray, max_records: int, max_bytes: int) -> list[int]:
    """Row indices where tasks start (and the end): each task takes rows while it holds fewer than
    ``max_records`` and stays within ``max_bytes``, but always at least one row. A step per task, not per row."""
    ends = np.cumsum(weights)
    cuts = [0]
    while cuts[-1] < len(weights):
        start = cuts[-1]
        before = ends[start - 1] if start else 0
        fits = int(np.searchsorted(ends, before + max_bytes, side="right"))  # rows [start, fits) fit the bytes
        cuts.append(min(max(fits, start + 1), start + max_records))
    return cuts


def replay_partitions(entry: LedgerEntry, options: SourceOptions) -> list[ReplayPartition]:
    """A ledgered epoch's tasks, offset ranges only: pieces of at most maxRecordsPerPartition records, packed in
    order into tasks of at most that many records (one task may read several Kafka partitions)."""
    most = options.max_records_per_partition
    tasks: list[list[OffsetRange]] = []
    held = 0
    for piece in (piece for r in entry.ranges for piece in r.split(most)):
        if not tasks or held + piece.record_count > most:
            tasks.append([])
            held = 0
        tasks[-1].append(piece)
        held += piece.record_count
    return [ReplayPartition(entry.epoch, tuple(pieces), options.include_headers, options.fail_on_data_loss,
                            options.replay_config) for pieces in tasks]
