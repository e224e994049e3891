"""The run's book of epochs: what it holds, what this query emitted, and how far each epoch got.

Every epoch a run acquires is written to the ledger before Spark sees its offset, and held
(with its payload, when the records passed through the driver) until Spark commits it; then
it is handed to the acknowledger, and once the coordinator settled it the book records ACKED
or ACK_FAILED, with the next ledger write (one commit per steady epoch). Epochs of earlier runs
count too: an unsettled one lost its locks with its member (unless the query's runs hand their locks
over, and then this run holds it as its own), one RELEASEd on stop may have been committed by Spark
after all; either way its records come back. The emitted index keeps every
epoch whose records may still come back, so a redelivery is settled as decided for it then
rather than emitted twice. The book is the only writer of epochs and their statuses, and the one
owner of the acknowledgement path: whatever settles a record (an epoch Spark committed, a
redelivery or a rejection on arrival, a give-back, a stop) goes through it to its acknowledger.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sharegroup_source.acks import AckRun, AckType, releases, runs_of
from sharegroup_source.driver.acknowledger import Acknowledger
from sharegroup_source.driver.admission import Verdict
from sharegroup_source.driver.emitted_index import EmittedIndex
from sharegroup_source.driver.run_context import RunContext
from sharegroup_source.errors import FencedError
from sharegroup_source.schema import by_partition, has_payload, spans
from state_store import UNSETTLED, EpochStatus, LedgerEntry, OffsetRange
from state_store.maintenance import BackgroundMaintenance

__all__ = ["EpochBook", "offset_ranges", "settled_statuses"]

log = logging.getLogger(__name__)


class EpochBook:
    """The epochs of run ``run`` and the ledger they are written to; the one owner of the acknowledgement path:
    whatever settles a record, an epoch Spark committed, a redelivery, a give-back, goes through the book to
    ``acks``.

    ``hand_over``: the query's next run takes over this run's locks (``Coordinator.next_run_takes_over``), so
    the epochs Spark runs again pass from run to run held, never through another member. ``maintenance`` is
    requested every ``maintain_every`` epochs settled, so the state tables stay small."""

    def __init__(self, run: RunContext, acks: Acknowledger, *, hand_over: bool,
                 maintenance: BackgroundMaintenance[Any], maintain_every: int):
        self._run = run
        self._store = run.store
        self._group_id = run.group_id
        self._acks = acks
        self._counters = run.counters
        self._hand_over = hand_over
        self._maintenance = maintenance
        self._maintain_every = maintain_every
        # nothing known of earlier runs: before the run started, and what an unstarted stop finds
        self._held: dict[int, LedgerEntry] = {}  # epochs this run's member acquired and has not settled
        self._payload: dict[int, pa.Table] = {}
        self._emitted = EmittedIndex()
        self._foreign: dict[int, LedgerEntry] = {}
        self._released: dict[int, LedgerEntry] = {}
        # statuses of settled epochs, recorded with the next ledger write: one commit per steady epoch
        self._settled: dict[int, EpochStatus] = {}
        self._decisions: dict[int, dict] = {}  # decisions of emitted epochs, for their redeliveries

    def read_ledger(self) -> None:
        """What earlier runs left: epochs to deduplicate redeliveries against, and epochs to settle.

        Read once this run fenced them: from then on nobody else changes it."""
        live = self._store.ledger.entries(self._group_id, statuses=(*UNSETTLED, EpochStatus.ACK_FAILED))
        self._emitted = EmittedIndex(live)
        for entry in live:
            if entry.status == EpochStatus.ACK_FAILED:  # how many failed is not kept: all of them, at most
                self._expect_back(entry.epoch, entry.record_count)
        # unsettled epochs of an earlier run: their locks died with that run's member
        self._foreign = {e.epoch: e for e in live if e.status in UNSETTLED}
        # epochs an earlier run RELEASEd on stop: Spark may have committed them already (it says so
        # only when it builds the next batch), and then their records come back and must not be
        # emitted again
        self._released = {
            e.epoch: e for e in self._store.ledger.entries(self._group_id, statuses=(EpochStatus.RELEASED,))}

    def take_over_unsettled(self) -> tuple[OffsetRange, ...]:
        """Where the query's runs hand over (``hand_over``), hold the earlier runs' unsettled epochs as this run's:
        Spark runs them again or has committed them, and this run settles them, unless the coordinator could
        not take their locks over (they lapsed), and then their acknowledgements fail and the records come back
        as those of any epoch whose acknowledgement failed. Returns their offset ranges, for the coordinator to
        take over; nothing where runs do not hand over: those epochs' locks died with their member."""
        if not self._hand_over:
            return ()
        taken, self._foreign = self._foreign, {}
        self._held.update(taken)
        return tuple(r for entry in taken.values() for r in entry.ranges)

    # -- acquired epochs ---------------------------------------------------------------
    def write(self, epoch: int, fresh: pa.Table, acquired_at_ms: int) -> None:
        """Ledger ``fresh`` (acquired at ``acquired_at_ms``) as ``epoch``, with the settled epochs' statuses, and
        hold it; if it cannot be ledgered as this run's, its records go back to the group."""
        lock_ms, run_id = self._run.lock_duration_ms, self._run.run_id
        entry = LedgerEntry(self._group_id, epoch, offset_ranges(fresh), run_id, acquired_at_ms,
                            None if lock_ms is None else acquired_at_ms + lock_ms, EpochStatus.ACQUIRED)
        settled, self._settled = self._settled, {}
        try:
            kept = self._store.ledger.write_epoch(entry, replace_released=True, settled=settled)
            if kept.member_id != run_id:
                raise FencedError(f"query {self._group_id!r}: epoch {epoch} was ledgered by run "
                                  f"{kept.member_id} while this run ({run_id}) acquired it: two drivers use "
                                  f"stateLocation={self._run.state_shown}; this run gave its records back and stops")
        except BaseException as error:  # fenced, lost, or the state unwritable: nothing holds these records
            self._settled = {**settled, **self._settled}  # not written, or written: writing them again is a no-op
            if not isinstance(error, FencedError):
                self._released_unheld(epoch)
            self._acks.send(releases(fresh))
            raise
        self._released.pop(epoch, None)
        self._held[epoch] = entry
        if has_payload(fresh):  # else the executors read the records themselves
            # headers are kept even when not emitted: a rejected record's dead letter needs them
            self._payload[epoch] = fresh.set_column(fresh.schema.get_field_index("epoch"), "epoch",
                                                    pa.array([epoch] * fresh.num_rows, pa.int64()))
        self._emitted.add(entry)
        self._counters.acquired += fresh.num_rows
        self._counters.epochs += 1

    def _released_unheld(self, epoch: int) -> None:
        """Say RELEASED for ``epoch`` if its ledger write landed before what cut ``write`` short (raising the
        table's format after the commit, reading back the entry that holds). Left ACQUIRED, the epoch would be
        nobody's: never held, so the stop would not release it, and the next run would count its records as
        failed acknowledgements although Spark never saw them. RELEASED, the next run writes its own epoch of
        that number in its place. Where the write did not land there is nothing to say. (Spark's SIGTERM does
        not cut it short: it waits for the Spark call, ``termination.uninterrupted``.)"""
        try:
            self._store.ledger.set_statuses(self._group_id, {epoch: EpochStatus.RELEASED})
        except Exception as error:  # not ledgered, not this run's, or the store is down: the releases go out anyway
            log.debug("epoch %d: not said RELEASED: %s", epoch, error)

    def payload(self, epoch: int) -> pa.Table | None:
        """The records of an epoch this run holds, where they passed through the driver."""
        return self._payload.get(epoch)

    def held(self, epoch: int) -> LedgerEntry | None:
        """The entry of an epoch this run acquired and has not settled."""
        return self._held.get(epoch)

    def held_through(self, epoch: int) -> list[LedgerEntry]:
        """The epochs this run holds through ``epoch``."""
        return [entry for e, entry in sorted(self._held.items()) if e <= epoch]

    def replaying(self, entries: Sequence[LedgerEntry]) -> None:
        """Earlier runs' epochs Spark runs again: their records are read back from the log, and a RELEASED one's are
        emitted again (EMITTED), so their redeliveries are deduplicated and they are settled once committed."""
        emitted = []
        for entry in entries:
            self._released.pop(entry.epoch, None)
            if entry.status == EpochStatus.RELEASED:
                emitted.append(entry.epoch)
                self._emitted.add(entry)
            if entry.status == EpochStatus.RELEASED or entry.status in UNSETTLED:
                self._foreign[entry.epoch] = entry
        if emitted:
            self._store.ledger.set_status(self._group_id, emitted, EpochStatus.EMITTED)

    # -- settling ----------------------------------------------------------------------
    def settle_through(self, epoch: int) -> None:
        """Acknowledge the epochs this run holds through ``epoch``; their outcome is applied once the coordinator
        settled them (``collect``), which a coordinator may do while Spark runs the next batch."""
        held = [self._held.pop(e) for e in sorted(self._held) if e <= epoch]
        if held:
            payloads = {e.epoch: self._payload.pop(e.epoch) for e in held if e.epoch in self._payload}
            self._acks.settle(held, payloads)
            if held[-1].epoch % self._maintain_every == 0:
                self._maintenance.request()
        self.collect()
        committed = [self._released.pop(e) for e in sorted(self._released) if e <= epoch]
        for entry in committed:  # released by an earlier run's stop, yet committed by Spark
            self._emitted.add(entry)
            self._foreign[entry.epoch] = entry
        foreign = [self._foreign.pop(e) for e in sorted(self._foreign) if e <= epoch]
        if foreign:
            self._settled.update({e.epoch: EpochStatus.ACK_FAILED for e in foreign})
            self._counters.ack_failures += sum(e.record_count for e in foreign)
            for entry in foreign:  # their locks died with their member: every record comes back
                self._expect_back(entry.epoch, entry.record_count)

    def collect(self, wait: bool = False) -> None:
        """Apply, in order, the outcome of settlements the coordinator finished; with ``wait``, of all of them.

        Before an acquisition is admitted, every settlement sent before it was acquired is applied: a
        coordinator settles in call order, so a record whose acknowledgement failed is expected back before
        it can come back."""
        for unacknowledged in self._acks.outcomes(wait):  # a failed commit raises here, and next time
            self._settled.update(settled_statuses(unacknowledged))
            for e, records in unacknowledged.items():
                if records:
                    self._expect_back(e, records)
                else:
                    self._emitted.remove_epoch(e)
                    self._decisions.pop(e, None)

    def settle_on_arrival(self, records: pa.Table, verdict: Verdict) -> None:
        """Settle what an acquisition's verdict settles on the spot: rejected records into the dead letters first,
        then the acknowledgements; a redelivery of an emitted record whose acknowledgement took is back."""
        if verdict.rejected:
            self._acks.dead_letter(records, verdict.rejected)
        failed = self._acks.send(runs_of(verdict.settle))
        self._counters.redeliveries_deduped += len(verdict.deduped)
        self.came_back([epoch for epoch, key in verdict.deduped if key[:2] not in failed])

    def give_back(self, runs: list[AckRun]) -> None:
        """RELEASE acquired records that no epoch holds (the backlog): they go back to the group at once."""
        self._acks.send(runs)

    def dead_letter_archived(self, replayed: Sequence[LedgerEntry] = ()) -> None:
        """Keep the records the group archived at its delivery-count limit in the dead letters, but for those of
        ``replayed``, epochs a stop gave back that Spark runs again (``Acknowledger.dead_letter_archived``)."""
        self._acks.dead_letter_archived(replayed)

    def record_settled(self) -> None:
        """Write the settled epochs' statuses now, when no ledger write of a new epoch will carry them."""
        settled, self._settled = self._settled, {}
        try:
            self._store.ledger.set_statuses(self._group_id, settled)
        except BaseException:
            self._settled = {**settled, **self._settled}
            raise

    def release_held(self) -> tuple[OffsetRange, ...]:
        """What a stop does with the epochs this run holds: Spark runs them again in the query's next run.

        Where runs hand over, they stay held, ACQUIRED in the ledger: returns their offset ranges, which the
        coordinator leaves locked for the next run to take over (if none comes within a lock duration, the locks
        run out and other members get the records). Elsewhere they go back to the group, so other members need
        not wait for expiry, and the ledger says RELEASED first: if the process dies before the acks leave, the
        locks expire anyway. The acks leave whatever that write met; where it failed, the epochs stay ACQUIRED in
        the ledger, and the next run counts their records as failed acknowledgements and deduplicates them when
        they come back."""
        entries = [self._held[e] for e in sorted(self._held)]
        self._held.clear()
        self._payload.clear()
        if self._hand_over:
            if entries:
                log.info("group %s: epochs %s stay locked for the query's next run, which runs them again",
                         self._group_id, [e.epoch for e in entries])
            return tuple(r for entry in entries for r in entry.ranges)
        acks = [AckRun(r.topic, r.partition, first, last, AckType.RELEASE)
                for e in entries for r in e.ranges for first, last in r.spans()]
        if not acks:
            return ()
        try:
            self._store.ledger.set_statuses(self._group_id, {e.epoch: EpochStatus.RELEASED for e in entries})
        except FencedError as fenced:  # the records go back all the same: no other run holds them
            log.warning("%s", fenced)
        except Exception as error:
            log.warning("group %s: the stop could not say RELEASED for epochs %s in the ledger (%s): they stay "
                        "ACQUIRED there, and the next run counts their %d records as failed acknowledgements; "
                        "the records go back to the group now all the same", self._group_id,
                        [e.epoch for e in entries], error, sum(e.record_count for e in entries))
            raise
        finally:
            self._acks.send(acks)
        return ()

    # -- redeliveries ------------------------------------------------------------------
    @property
    def emitted(self) -> EmittedIndex:
        """Which records this query emitted, in which epoch (read only: the book keeps it)."""
        return self._emitted

    def decision(self, epoch: int, key: tuple[str, int, int]) -> tuple[str, str | None]:
        """How a record ``epoch`` emitted was decided (type, reason): ACCEPT unless recorded otherwise."""
        if epoch not in self._decisions:
            self._decisions[epoch] = self._store.decisions.for_epochs(self._group_id, [epoch])
        return self._decisions[epoch].get(key, (AckType.ACCEPT, None))

    def came_back(self, epochs: Sequence[int]) -> None:
        """Redeliveries settled: an epoch none of whose records can come back any more is done."""
        self._done([epoch for epoch in epochs if self._emitted.came_back(epoch)])

    def _expect_back(self, epoch: int, records: int) -> None:
        """``records`` of ``epoch`` come back; done already if they all came back first (an earlier run's epoch)."""
        if self._emitted.expect_back(epoch, records):
            self._done([epoch])

    def _done(self, done: Sequence[int]) -> None:
        for epoch in done:
            self._decisions.pop(epoch, None)
        # every record of theirs was acknowledged in the end; in order with their earlier ACK_FAILED
        self._settled.update(dict.fromkeys(done, EpochStatus.ACKED))


def offset_ranges(records: pa.Table) -> tuple[OffsetRange, ...]:
    """An output table's records as the ledger keeps them: per topic-partition, offsets and delivery counts."""
    ranges = []
    for topic, partition, rows in by_partition(records):
        offsets, counts = rows.column("offset"), rows.column("deliveryCount").to_numpy()
        again = np.flatnonzero(counts != 1)
        redelivered = zip(offsets.to_numpy()[again].tolist(), counts[again].tolist(), strict=True)
        ranges.append(OffsetRange.of_spans(topic, partition, spans(offsets), tuple(redelivered)))
    return tuple(ranges)


def settled_statuses(unacknowledged: Mapping[int, int]) -> dict[int, EpochStatus]:
    """The ledger status of each settled epoch: ACKED, or ACK_FAILED where some acknowledgements failed."""
    return {epoch: EpochStatus.ACK_FAILED if failed else EpochStatus.ACKED for epoch, failed in unacknowledged.items()}
