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

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence

import pyarrow as pa
from confluent_kafka import Message

from sharegroup_source.acknowledger import Acknowledger
from sharegroup_source.backlog import Backlog, epoch_size
from sharegroup_source.commit_log import CommitLog, CommitWatcher
from sharegroup_source.emitted_index import EmittedIndex
from sharegroup_source.handover import HANDOVER_TIMEOUT_S, await_previous_member
from sharegroup_source.metadata import log_end_offsets
from sharegroup_source.options import SourceOptions
from sharegroup_source.partition_reader import PayloadPartition, ReplayPartition
from sharegroup_source.progress import SourceCounters
from sharegroup_source.schema import records_to_arrow, row_bytes, to_ipc
from sharegroup_source.share_client import Ack, AckType, ShareClient
from state_store import FencedError, LedgerEntry, OffsetRange, StateStore

__all__ = ["MicroBatchDriver", "StateMismatchError"]

log = logging.getLogger(__name__)

UNSETTLED = ("ACQUIRED", "EMITTED")
SETTLED = ("ACKED", "ACK_FAILED")
MAX_DELIVERIES_REASON = "max deliveries exceeded"
#: Compact, checkpoint and vacuum the state tables this often, so a long-running query's state stays small.
MAINTAIN_EVERY_EPOCHS = 200
#: How long an AvailableNow run keeps polling an empty queue before it ends.
AVAILABLE_NOW_IDLE_S = 5.0
#: How long a run's first acquisition waits for records. Apache Kafka hands a new member its
#: partitions with its second heartbeat (about 5 s after it subscribes, at the default 5 s
#: interval); answering "nothing" before that would give Spark an empty first batch, and end
#: an AvailableNow run before it read anything. Two heartbeats and some.
FIRST_ACQUISITION_WAIT_S = 12.0


class StateMismatchError(RuntimeError):
    """The state location belongs to another checkpoint."""


class MicroBatchDriver:
    """``handover_timeout_s``: how long a run waits for the previous run's member to leave."""

    def __init__(self, options: SourceOptions, handover_timeout_s: float = HANDOVER_TIMEOUT_S):
        self._options = options
        self._query_id = options.group_id
        self._run_id = uuid.uuid4().hex
        self.store = StateStore(options.state_location, dead_letter_location=options.dead_letter_location,
                                storage_options=dict(options.storage_options))
        self.counters = SourceCounters()
        # the previous run's stop writes its releases: read the ledger only once it has left
        await_previous_member(self.store.progress, self._query_id, handover_timeout_s)
        # from here on a run still writing (a zombie driver, another host) fails at its next write
        self._fence = self.store.ledger.fence(self._query_id, self._run_id)
        # epochs this run's member acquired and has not settled, with their payload
        self._held: dict[int, LedgerEntry] = {}
        self._payload: dict[int, pa.Table] = {}
        live = self.store.ledger.entries(self._query_id, statuses=(*UNSETTLED, "ACK_FAILED"))
        self._emitted = EmittedIndex(live)
        for entry in live:
            if entry.status == "ACK_FAILED":  # how many failed is not kept: all of them, at most
                self._emitted.expect_back(entry.epoch, entry.record_count)
        # unsettled epochs of an earlier run: their locks died with that run's member
        self._foreign: dict[int, LedgerEntry] = {e.epoch: e for e in live if e.status in UNSETTLED}
        # epochs an earlier run RELEASEd on stop: Spark may have committed them already (it says so
        # only when it builds the next batch), and then their records come back and must not be
        # emitted again
        self._released: dict[int, LedgerEntry] = {
            e.epoch: e for e in self.store.ledger.entries(self._query_id, statuses=("RELEASED",))}
        self._available_now: dict[tuple[str, int], int] | None = None
        # an AvailableNow run saw a record past its target: polling again would re-acquire the
        # records it gave back, spending a delivery attempt each time, so the run ends instead
        self._past_target = False
        self._decisions: dict[int, dict] = {}  # decisions of emitted epochs, for their redeliveries
        self._published: dict[str, int] = {}
        self._client = ShareClient(options.client_config, options.topics, options.max_poll_records,
                                   metadata_timeout_s=30)
        self._acks = Acknowledger(self._client, self.store, self._query_id, self.counters, options.lock_duration_ms)
        self._backlog = Backlog(options.lock_duration_ms)
        self._assigned = False  # true once the member surely has its partitions: after its first acquisition
        # Spark's calls and the commit watcher share the member: one at a time
        self._lock = threading.RLock()
        self._stopped = False
        self._watcher: CommitWatcher | None = None
        try:
            self._publish_counters()  # the member is in the group: a next run waits for it to leave
            self._commit_log = CommitLog(options.checkpoint_location) if options.checkpoint_location else None
            self._watcher = CommitWatcher(self._commit_log, self.commit) if self._commit_log else None
        except BaseException:  # SIGTERM included: a member nobody will stop must leave now
            if self._watcher is not None:
                self._watcher.stop()
            self._client.close()
            self._publish_counters(left=True)
            raise
        if self._watcher is None:
            log.info("group %s: an epoch is acknowledged when Spark builds the next batch; set the source option "
                     "checkpointLocation to the query's checkpoint to acknowledge as soon as Spark commits",
                     options.group_id)

    # -- Spark's calls ---------------------------------------------------------------
    def initial_offset(self) -> dict:
        """Always epoch 0: Spark asks again when it re-runs batch 0, so the answer must not move."""
        return {"epoch": 0}

    def latest_offset(self, start: Mapping, max_records: int | None) -> dict:
        with self._lock:
            try:
                return self._latest_offset(start, max_records)
            finally:
                self._publish_counters()

    def _latest_offset(self, start: Mapping, max_records: int | None) -> dict:
        start_epoch = int(start["epoch"])
        self._check_state_belongs(start)
        self.settle_through(start_epoch)
        next_epoch = start_epoch + 1
        ledgered = self.store.ledger.get(self._query_id, next_epoch)
        if ledgered is not None and ledgered.status in SETTLED:
            raise StateMismatchError(
                f"stateLocation={self._options.state_location_shown} already settled epoch {next_epoch}, which "
                f"this checkpoint has not started: each checkpoint needs its own stateLocation")
        if ledgered is not None and ledgered.status != "RELEASED":
            return self._offset(next_epoch)  # ledgered by an earlier run before Spark logged it: same epoch again
        # a RELEASED epoch Spark never logged gave its records back: the epoch is acquired anew
        fresh, acquired_at_ms = self._acquire(max_records)
        if not fresh:
            return dict(start)
        entry = self._ledger_entry(next_epoch, fresh, acquired_at_ms)
        try:
            kept = self.store.ledger.write_epoch(entry, replace_released=True)
            if kept.member_id != self._run_id:
                raise FencedError(f"query {self._query_id!r}: epoch {next_epoch} was ledgered by run "
                                  f"{kept.member_id} while this run ({self._run_id}) acquired it: two drivers use "
                                  f"stateLocation={self._options.state_location_shown}; this run gave its records "
                                  "back and stops")
        except BaseException:  # fenced, lost, the state unwritable, or SIGTERM: nothing holds these records
            self._acks.send(_releases(fresh))
            raise
        self._released.pop(next_epoch, None)
        self._held[next_epoch] = entry
        # headers are kept even when not emitted: a rejected record's dead letter needs them
        self._payload[next_epoch] = records_to_arrow(fresh, next_epoch, include_headers=True)
        self._emitted.add(entry)
        self.counters.acquired += len(fresh)
        self.counters.epochs += 1
        return self._offset(next_epoch)

    def _offset(self, epoch: int) -> dict:
        """An offset names the state it belongs to, so a checkpoint can never be paired with another state."""
        return {"epoch": epoch, "state": self._fence.state_id}

    def _check_state_belongs(self, start: Mapping) -> None:
        """Refuse a checkpoint whose offsets this state location cannot have produced."""
        epoch, state = int(start["epoch"]), start.get("state")
        where = f"stateLocation={self._options.state_location_shown}"
        if state is not None and state != self._fence.state_id:
            raise StateMismatchError(
                f"the checkpoint's offsets belong to state {state}, but {where} holds state {self._fence.state_id}: "
                "the state location was replaced, or another query's checkpoint is used; each checkpoint needs "
                "the stateLocation it started with")
        if epoch > 0 and self.store.ledger.get(self._query_id, epoch) is None:
            raise StateMismatchError(
                f"the checkpoint resumes after epoch {epoch}, which {where} does not hold: was the state "
                "location deleted or replaced? Restore it, or start a new checkpoint with a new stateLocation")
        newest = self.store.ledger.max_epoch(self._query_id)
        if epoch == 0 and newest is not None and newest > 1:
            raise StateMismatchError(
                f"a new checkpoint starts on {where}, which already holds epochs up to {newest} of group "
                f"{self._query_id!r}: each checkpoint needs its own stateLocation")

    def plan(self, start: Mapping, end: Mapping) -> list:
        with self._lock:
            return self._plan(start, end)

    def _plan(self, start: Mapping, end: Mapping) -> list:
        partitions: list = []
        emitted = []
        for epoch in range(int(start["epoch"]) + 1, int(end["epoch"]) + 1):
            if epoch in self._payload:
                partitions += self._payload_partitions(epoch, self._payload[epoch])
                emitted.append(epoch)
                continue
            entry = self.store.ledger.get(self._query_id, epoch)
            if entry is None:
                raise RuntimeError(
                    f"epoch {epoch} is in Spark's checkpoint but not in the ledger at stateLocation="
                    f"{self._options.state_location_shown}: was the state location changed or deleted?")
            partitions += self._replay_partitions(entry)
            self._released.pop(epoch, None)
            if entry.status == "RELEASED":
                emitted.append(epoch)
                self._emitted.add(entry)
            if entry.status in ("RELEASED", *UNSETTLED):
                self._foreign[epoch] = entry
        if emitted:
            self.store.ledger.set_status(self._query_id, emitted, "EMITTED")
        return partitions

    def commit(self, epoch: int) -> None:
        """Settle through ``epoch``: called by Spark at the next trigger, and by the commit watcher."""
        with self._lock:
            try:
                self.settle_through(epoch)
            finally:
                self._publish_counters()

    def settle_through(self, epoch: int) -> None:
        held = [self._held.pop(e) for e in sorted(self._held) if e <= epoch]
        payloads = {e.epoch: self._payload.pop(e.epoch) for e in held if e.epoch in self._payload}
        unacknowledged = self._acks.settle(held, payloads)
        if held and held[-1].epoch % MAINTAIN_EVERY_EPOCHS == 0:
            self.store.maintain()
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
            self.store.ledger.set_status(self._query_id, [e.epoch for e in foreign], "ACK_FAILED")
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
            if committed is not None:  # Spark committed it and will not call commit for it again
                try:
                    self.settle_through(committed)
                except FencedError as fenced:  # the ACCEPTs went out; what is held still goes back below
                    log.warning("%s", fenced)
            self._acks.send(_releases(self._backlog.give_back()))
            self._acks.release(self._held[e] for e in sorted(self._held))
            self._held.clear()
            self._payload.clear()
        finally:
            self._client.close()
            self._publish_counters(left=True)

    def prepare_available_now(self) -> None:
        """Only records already in the log now belong to this run; later ones wait for the next."""
        self._available_now = log_end_offsets(self._options.replay_config, self._client.partitions)

    # -- helpers -----------------------------------------------------------------------
    def _publish_counters(self, left: bool = False) -> None:
        snapshot = self.counters.snapshot()
        if snapshot != self._published or left:
            self.store.progress.append(self._query_id, self._run_id, snapshot, left=left)
            self._published = snapshot

    def _acquire(self, max_records: int | None) -> tuple[list[Message], int]:
        """The next epoch's records and when they were acquired: from the backlog, or polled.

        Poll until fresh records arrive or the queue stays idle long enough. Redeliveries are
        settled on the spot and do not end the wait. Under Trigger.AvailableNow an empty
        answer ends the run, and a new member's first polls return nothing until its
        assignment arrives, so emptiness must last a while; but once a poll brought records
        past the run's target, the run ends without polling again (each poll would acquire
        them anew, and the broker archives a record at its delivery-count limit).
        """
        if self._backlog:
            if self._backlog.fresh():
                taken = self._backlog.take(max_records, self._options.max_bytes_per_trigger)
                return taken, self._backlog.acquired_at_ms
            self._acks.send(_releases(self._backlog.give_back()))
        if self._past_target:
            return [], int(time.time() * 1000)
        poll_s = self._options.poll_timeout_ms / 1000
        idle_s = AVAILABLE_NOW_IDLE_S if self._available_now is not None else poll_s
        idle_until = time.monotonic() + (idle_s if self._assigned else max(idle_s, FIRST_ACQUISITION_WAIT_S))
        while True:
            remaining = idle_until - time.monotonic()
            acquired_at_ms = int(time.time() * 1000)
            fresh = self._admit(self._client.poll(max(min(poll_s, remaining), 0.01)), max_records, acquired_at_ms)
            if fresh or time.monotonic() >= idle_until:
                self._assigned = True
                return fresh, acquired_at_ms

    def _admit(self, records: Sequence[Message], max_records: int | None, acquired_at_ms: int) -> list[Message]:
        """Split a poll into fresh records, the backlog, and records settled on the spot.

        A redelivery of a record this query emitted gets the outcome decided for it then (ACCEPT
        unless recorded otherwise); one that was RELEASEd on purpose is emitted again. Records
        past ``maxDeliveries`` are rejected; records past the AvailableNow target are given
        back; records past the read limit wait in the backlog for the next epochs.
        """
        admitted: list[tuple[Message, int | None]] = []  # with the epoch that emitted it before, if any
        immediate: list[Ack] = []
        rejected: dict[tuple[str, int, int], str | None] = {}
        deduped: list[tuple[int, tuple[str, int, int]]] = []
        for record in records:
            key = (record.topic(), record.partition(), record.offset())
            epoch = self._emitted.epoch_of(*key)
            earlier = self._decision(epoch, key) if epoch is not None else None
            if earlier is not None and earlier[0] != "RELEASE":
                immediate.append(Ack(*key, AckType(earlier[0])))
                deduped.append((epoch, key))
                self.counters.redeliveries_deduped += 1
                if earlier[0] == "REJECT":
                    rejected[key] = earlier[1]
            elif self._options.max_deliveries and (record.delivery_count() or 1) > self._options.max_deliveries:
                immediate.append(Ack(*key, AckType.REJECT))
                rejected[key] = MAX_DELIVERIES_REASON
            elif self._beyond_target(key):
                immediate.append(Ack(*key, AckType.RELEASE))
                self._past_target = True
            else:
                admitted.append((record, epoch))
        cut = epoch_size([record for record, _ in admitted], max_records, self._options.max_bytes_per_trigger)
        fresh = [record for record, _ in admitted[:cut]]
        surplus = [record for record, _ in admitted[cut:]]
        # released on purpose before, emitted again now in a new epoch
        self._came_back([epoch for _, epoch in admitted[:cut] if epoch is not None])
        if rejected:
            dead = [r for r in records if (r.topic(), r.partition(), r.offset()) in rejected]
            self._acks.dead_letter(records_to_arrow(dead, 0, include_headers=True), rejected)
        failed = self._acks.send(immediate)
        self._came_back([epoch for epoch, key in deduped if key[:2] not in failed])
        if surplus:
            self._backlog.keep(surplus, acquired_at_ms)
        return fresh

    def _came_back(self, epochs: Sequence[int]) -> None:
        """Redeliveries settled: an epoch none of whose records can come back any more is done."""
        done = [epoch for epoch in epochs if self._emitted.came_back(epoch)]
        for epoch in done:
            self._decisions.pop(epoch, None)
        if done:  # every record of theirs was acknowledged in the end
            self.store.ledger.set_status(self._query_id, done, "ACKED")

    def _decision(self, epoch: int, key: tuple[str, int, int]) -> tuple[str, str | None]:
        if epoch not in self._decisions:
            self._decisions[epoch] = self.store.decisions.for_epochs(self._query_id, [epoch])
        return self._decisions[epoch].get(key, ("ACCEPT", None))

    def _beyond_target(self, key: tuple[str, int, int]) -> bool:
        if self._available_now is None:
            return False
        return key[2] >= self._available_now.get(key[:2], 0)

    def _ledger_entry(self, epoch: int, records: Sequence[Message], acquired_at_ms: int) -> LedgerEntry:
        by_partition: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for r in records:
            by_partition.setdefault((r.topic(), r.partition()), []).append((r.offset(), r.delivery_count() or 1))
        ranges = tuple(OffsetRange.of(topic, partition, sorted(pairs))
                       for (topic, partition), pairs in sorted(by_partition.items()))
        return LedgerEntry(self._query_id, epoch, ranges, self._run_id, acquired_at_ms,
                           acquired_at_ms + self._options.lock_duration_ms, "ACQUIRED")

    def _payload_partitions(self, epoch: int, table: pa.Table) -> list[PayloadPartition]:
        """Tasks of at most maxRecordsPerPartition records and maxBytesPerPartition bytes (a larger
        record alone): a task travels to its executor in one RPC message, which Spark caps."""
        table = table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
        if not self._options.include_headers:
            table = table.drop_columns(["headers"])
        cuts, count, size = [0], 0, 0
        for row, weight in enumerate(row_bytes(table)):
            if count and (count == self._options.max_records_per_partition or
                          size + weight > self._options.max_bytes_per_partition):
                cuts.append(row)
                count, size = 0, 0
            count, size = count + 1, size + weight
        cuts.append(table.num_rows)
        return [PayloadPartition(epoch, to_ipc(table.slice(a, b - a))) for a, b in itertools.pairwise(cuts) if b > a]

    def _replay_partitions(self, entry: LedgerEntry) -> list[ReplayPartition]:
        size = self._options.max_records_per_partition
        parts = []
        for r in entry.ranges:
            offsets, counts = r.offsets(), list(r.delivery_counts)
            for at in range(0, len(offsets), size):
                parts.append(ReplayPartition(entry.epoch, r.topic, r.partition, offsets[at:at + size],
                                             counts[at:at + size], self._options.include_headers,
                                             self._options.fail_on_data_loss, self._options.replay_config))
        return parts


def _releases(records: Sequence[Message]) -> list[Ack]:
    return [Ack(r.topic(), r.partition(), r.offset(), AckType.RELEASE) for r in records]
