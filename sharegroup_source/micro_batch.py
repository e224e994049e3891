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

import numpy as np
import pyarrow as pa

from sharegroup_source.acknowledger import Acknowledger, settled_statuses
from sharegroup_source.acks import Ack, AckType, record_keys, releases, runs_of
from sharegroup_source.backlog import Backlog, epoch_size
from sharegroup_source.commit_log import CommitLog, CommitWatcher
from sharegroup_source.coordinators import open_coordinator
from sharegroup_source.emitted_index import EmittedIndex
from sharegroup_source.errors import FencedError, StateMismatchError
from sharegroup_source.locations import check_source_locations
from sharegroup_source.metadata import log_end_offsets
from sharegroup_source.offset import EpochOffset
from sharegroup_source.options import SourceOptions
from sharegroup_source.partition_reader import PayloadPartition, ReplayPartition, read_back
from sharegroup_source.schema import NO_RECORDS, by_partition, has_payload, row_bytes, spans, to_ipc
from state_store import UNSETTLED, EpochStatus, LedgerEntry, OffsetRange, SourceCounters, StateStore
from state_store.dead_letters import DELIVERY_LIMIT_REASON
from state_store.maintenance import BackgroundMaintenance

__all__ = ["MicroBatchDriver", "offset_ranges", "payload_partitions", "replay_partitions", "task_cuts"]

log = logging.getLogger(__name__)

MAX_DELIVERIES_REASON = "max deliveries exceeded"
#: Compact, checkpoint and vacuum the state tables this often (in the background), so a long-running query's
#: state stays small.
MAINTAIN_EVERY_EPOCHS = 200
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
        self.counters = SourceCounters()
        self._maintenance = BackgroundMaintenance(
            lambda: StateStore(options.state_location, dead_letter_location=options.dead_letter_location,
                               storage_options=dict(options.storage_options)).maintain(),
            f"query {options.group_id}'s state")
        self._published: dict[str, int | None] = {}
        self._published_at = 0.0
        # statuses of settled epochs, recorded with the next ledger write: one commit per steady epoch
        self._settled: dict[int, EpochStatus] = {}
        # joins once the previous run's member has left: that run's stop writes its releases to the ledger
        self._coordinator = open_coordinator(options, self.store.progress, self._run_id, handover_timeout_s)
        lock_duration_ms = self._coordinator.lock_duration_ms
        self._acks = Acknowledger(self._coordinator, self.store, self._group_id, self.counters, lock_duration_ms,
                                  functools.partial(read_back, client_config=options.replay_config))
        self._backlog = Backlog(lock_duration_ms)
        self._available_now: dict[tuple[str, int], int] | None = None
        # an AvailableNow run saw a record past its target: polling again would re-acquire the
        # records it gave back, spending a delivery attempt each time, so the run ends instead
        self._past_target = False
        self._decisions: dict[int, dict] = {}  # decisions of emitted epochs, for their redeliveries
        self._assigned = False  # true once the member surely has its partitions: after its first acquisition
        # Spark's calls and the commit watcher share the member: one at a time
        self._lock = threading.RLock()
        self._stopped = False
        self._watcher: CommitWatcher | None = None
        try:
            self._publish_counters()  # the member is in the group: a next run waits for it to leave
            # from here on a run still writing (a zombie driver, another host) fails at its next write
            self._fence = self.store.ledger.fence(self._group_id, self._run_id)
            self._read_ledger()
            self._commit_log = CommitLog(options.checkpoint_location) if options.checkpoint_location else None
            self._watcher = CommitWatcher(self._commit_log, self.commit) if self._commit_log else None
        except BaseException:  # SIGTERM included: a member nobody will stop must leave now
            if self._watcher is not None:
                self._watcher.stop()
            self._coordinator.close()
            self._publish_counters(left=True)
            raise
        if self._watcher is None:
            log.info("group %s: an epoch is acknowledged when Spark builds the next batch; set the source option "
                     "checkpointLocation to the query's checkpoint to acknowledge as soon as Spark commits",
                     options.group_id)

    def _read_ledger(self) -> None:
        """What earlier runs left: epochs to deduplicate redeliveries against, and epochs to settle."""
        # epochs this run's member acquired and has not settled, with their payload
        self._held: dict[int, LedgerEntry] = {}
        self._payload: dict[int, pa.Table] = {}
        live = self.store.ledger.entries(self._group_id, statuses=(*UNSETTLED, EpochStatus.ACK_FAILED))
        self._emitted = EmittedIndex(live)
        for entry in live:
            if entry.status == EpochStatus.ACK_FAILED:  # how many failed is not kept: all of them, at most
                self._emitted.expect_back(entry.epoch, entry.record_count)
        # unsettled epochs of an earlier run: their locks died with that run's member
        self._foreign: dict[int, LedgerEntry] = {e.epoch: e for e in live if e.status in UNSETTLED}
        # epochs an earlier run RELEASEd on stop: Spark may have committed them already (it says so
        # only when it builds the next batch), and then their records come back and must not be
        # emitted again
        self._released: dict[int, LedgerEntry] = {
            e.epoch: e for e in self.store.ledger.entries(self._group_id, statuses=(EpochStatus.RELEASED,))}

    # -- Spark's calls ---------------------------------------------------------------
    def initial_offset(self) -> dict:
        """Always epoch 0: Spark asks again when it re-runs batch 0, so the answer must not move."""
        return EpochOffset(0).json()

    def latest_offset(self, start: Mapping, max_records: int | None) -> dict:
        with self._lock:
            idle = False  # nothing new: a batch waits on nothing, so the counters go out at once
            try:
                offset = self._latest_offset(EpochOffset.of(start), max_records)
                idle = offset.epoch == EpochOffset.of(start).epoch
                self._dead_letter_archived()
                return offset.json()
            finally:
                self._publish_counters(at_once=idle)

    def _latest_offset(self, start: EpochOffset, max_records: int | None) -> EpochOffset:
        self._check_state_belongs(start)
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
        return self._offset(next_epoch)

    def _offset(self, epoch: int) -> EpochOffset:
        """An offset names the state it belongs to, so a checkpoint can never be paired with another state."""
        return EpochOffset(epoch, self._fence.state_id)

    def _check_state_belongs(self, start: EpochOffset) -> None:
        """Refuse a checkpoint whose offsets this state location cannot have produced."""
        where = f"stateLocation={self._options.state_location_shown}"
        if start.state is not None and start.state != self._fence.state_id:
            raise StateMismatchError(
                f"the checkpoint's offsets belong to state {start.state}, but {where} holds state "
                f"{self._fence.state_id}: the state location was replaced, or another query's checkpoint is used; "
                "each checkpoint needs the stateLocation it started with")
        if start.epoch > 0 and self.store.ledger.get(self._group_id, start.epoch) is None:
            raise StateMismatchError(
                f"the checkpoint resumes after epoch {start.epoch}, which {where} does not hold: was the state "
                "location deleted or replaced? Restore it, or start a new checkpoint with a new stateLocation")
        newest = self.store.ledger.max_epoch(self._group_id)
        if start.epoch == 0 and newest is not None and newest > 1:
            raise StateMismatchError(
                f"a new checkpoint starts on {where}, which already holds epochs up to {newest} of group "
                f"{self._group_id!r}: each checkpoint needs its own stateLocation")

    def plan(self, start: Mapping, end: Mapping) -> list:
        with self._lock:
            return self._plan(EpochOffset.of(start), EpochOffset.of(end))

    def _plan(self, start: EpochOffset, end: EpochOffset) -> list:
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

    def commit(self, epoch: int) -> None:
        """Settle through ``epoch``: called by Spark at the next trigger, and by the commit watcher."""
        with self._lock:
            try:
                self.settle_through(epoch)
                self._dead_letter_archived()
            finally:
                self._publish_counters()

    def settle_through(self, epoch: int) -> None:
        held = [self._held.pop(e) for e in sorted(self._held) if e <= epoch]
        payloads = {e.epoch: self._payload.pop(e.epoch) for e in held if e.epoch in self._payload}
        unacknowledged = self._acks.settle(held, payloads)
        self._settled.update(settled_statuses(unacknowledged))
        if held and held[-1].epoch % MAINTAIN_EVERY_EPOCHS == 0:
            self._maintenance.request()
        for e, records in unacknowledged.items():
            if records:
                self._emitted.expect_back(e, records)
            else:
                self._emitted.remove_epoch(e)
                self._decisions.pop(e, None)
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
            committed = self._commit_log.committed_epoch() if self._commit_log else None
            try:
                if committed is not None:  # Spark committed it and will not call commit for it again
                    self.settle_through(committed)
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
        admitted_records = records.take(pa.array(rows, pa.int64()))
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
    """An acquired epoch's tasks: at most maxRecordsPerPartition records and maxBytesPerPartition bytes each
    (a larger record alone), since a task travels to its executor in one RPC message, which Spark caps."""
    table = table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    if not options.include_headers:
        table = table.drop_columns(["headers"])
    return [PayloadPartition(epoch, to_ipc(table.slice(a, b - a)))
            for a, b in itertools.pairwise(task_cuts(np.asarray(row_bytes(table), np.int64),
                                                     options.max_records_per_partition,
                                                     options.max_bytes_per_partition))]


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
