"""Where acknowledgements are sent: committed epochs become ShareAcknowledge requests.

An epoch's records are ACCEPTed only once Spark committed the epoch; a recorded decision
(RELEASE, REJECT) replaces ACCEPT for its record. Locks are member-bound, so only epochs
this run acquired can be acknowledged; the rest come back on lock expiry and are
deduplicated against the ledger.

The epoch book is its only caller. A settlement is this class's from the moment it is sent to the
moment its outcome is read (``settle``, then ``outcomes``): the book hands over committed epochs
and learns, in order, how many of each one's records did not take; it never sees a settlement in
between.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from sharegroup_source.acks import Ack, AckRun, AckType, record_keys, runs_of
from sharegroup_source.coordinators import Coordinator, Failures
from sharegroup_source.coordinators.base import Outcome, Settled
from sharegroup_source.driver.pacing import longer_lock
from sharegroup_source.driver.run_context import RunContext
from sharegroup_source.schema import POSITIONS, has_payload
from state_store import LedgerEntry, OffsetRange
from state_store.dead_letters import DELIVERY_LIMIT_REASON

__all__ = ["Acknowledger"]

log = logging.getLogger(__name__)

#: A batch that used more than this share of its lock duration earns a warning.
LOCK_WARNING_SHARE = 0.8


class Acknowledger:
    """Turns committed epochs and recorded decisions into acknowledgements, and counts what took."""

    def __init__(self, coordinator: Coordinator, run: RunContext, read_back: Callable[[pa.Table], pa.Table]):
        """``read_back`` reads the records at some positions from the log, for dead letters of records the driver
        never held. A run whose locks are renewed (no lock duration) earns no slow-batch warning."""
        self._coordinator = coordinator
        self._store = run.store
        self._group_id = run.group_id
        self._counters = run.counters
        self._lock_duration_ms = run.lock_duration_ms
        self._read_back = read_back
        self._bootstrap_servers = run.bootstrap_servers
        self._settling: deque[_Settlement] = deque()  # sent, outcome not read yet: in the order they were sent

    def settle(self, entries: Iterable[LedgerEntry], payloads: Mapping[int, pa.Table]) -> None:
        """Acknowledge committed epochs this run holds; ``outcomes`` tells what took, once the coordinator
        settled them (it may settle them while Spark runs the next batch).

        Rejected records go to the dead letters first, from the payload the driver still holds,
        so a REJECT never leaves a record nowhere.
        """
        entries = list(entries)
        if not entries:
            return
        decisions = self._store.decisions.for_epochs(self._group_id, [e.epoch for e in entries])
        acks = [run for entry in entries for r in entry.ranges for run in _decided(r, decisions)]
        rejected = {key: reason for key, (decision, reason) in decisions.items() if decision == AckType.REJECT}
        if rejected:
            for entry in entries:
                self.dead_letter(payloads[entry.epoch] if entry.epoch in payloads else _positions(entry, rejected),
                                 rejected)
        self._settling.append(_Settlement(entries, acks, self._coordinator.acknowledge(acks) if acks else Settled({})))

    def outcomes(self, wait: bool = False) -> Iterator[dict[int, int]]:
        """Per settlement the coordinator finished (with ``wait``, per settlement sent), in the order they were
        sent: how many of each of its epochs' records' acknowledgements failed (they come back from the broker).

        Each is counted once, when it is read; a failed commit raises here, and again at the next call."""
        while self._settling and (wait or self._settling[0].settling.done()):
            settlement = self._settling[0]
            failed = self._count(settlement.acks, settlement.settling.result())
            for entry in settlement.entries:
                self._warn_on_lock_headroom(entry)
            self._settling.popleft()
            yield {entry.epoch: sum(r.record_count for r in entry.ranges if (r.topic, r.partition) in failed)
                   for entry in settlement.entries}

    def dead_letter(self, records: pa.Table, reasons: Mapping[tuple[str, int, int], str | None]) -> None:
        """Keep the rows of ``records`` (output schema with headers, or positions only) that ``reasons``
        names, under this group; positions are read back from the log (a gap there has no record to keep).

        The group id is part of the dead letter's key: queries sharing a ``deadLetterLocation``
        each keep their row for a record both rejected.
        """
        rows = records.filter(pa.array([key in reasons for key in record_keys(records)], pa.bool_()))
        if rows.num_rows and not has_payload(rows):
            rows = self._read_back(rows)
        if rows.num_rows == 0:
            return
        keys = record_keys(rows)
        now_ms = int(time.time() * 1000)
        self._counters.dead_lettered += self._store.dead_letters.append(pa.table({
            "key": rows.column("key"), "value": rows.column("value"), "headers": rows.column("headers"),
            "topic": rows.column("topic"), "partition": rows.column("partition"), "offset": rows.column("offset"),
            "delivery_count": rows.column("deliveryCount"),
            "reason": [reasons[key] for key in keys],
            "time": pa.array([now_ms] * rows.num_rows, pa.int64()),
            "group_id": pa.array([self._group_id] * rows.num_rows, pa.string()),
        }))

    def dead_letter_archived(self, replayed: Sequence[LedgerEntry] = ()) -> None:
        """Records the group archived at its delivery-count limit: nobody gets them again, so they are kept; but
        for those of ``replayed``, epochs a stop gave back that Spark runs again in the query's next run, which
        reads them from the log."""
        archived = self._coordinator.archived()
        if not archived.num_rows:
            return
        spared = {(r.topic, r.partition, offset) for entry in replayed for r in entry.ranges for offset in r.offsets()}
        keys = [key for key in record_keys(archived) if key not in spared]
        if len(keys) < archived.num_rows:
            log.info("group %s: %d records on their last delivery attempt went back to the group with the stop, "
                     "which archived them; Spark runs their epochs again in the query's next run, from the log",
                     self._group_id, archived.num_rows - len(keys))
        if keys:
            self.dead_letter(archived, dict.fromkeys(keys, DELIVERY_LIMIT_REASON))

    def send(self, acks: list[AckRun]) -> set[tuple[str, int]]:
        """Have the coordinator settle ``acks`` now; returns the share-partitions whose acknowledgement failed."""
        if not acks:
            return set()
        return self._count(acks, self._coordinator.acknowledge(acks).result())

    def _count(self, acks: Sequence[AckRun], failures: Failures) -> set[tuple[str, int]]:
        """Count what took and warn of what did not; returns the share-partitions whose acknowledgement failed."""
        by_type: Counter[AckType] = Counter()
        for run in acks:
            if (run.topic, run.partition) not in failures:
                by_type[run.type] += run.size
        self._counters.accepted += by_type[AckType.ACCEPT]
        self._counters.released += by_type[AckType.RELEASE]
        self._counters.rejected += by_type[AckType.REJECT]
        self._counters.ack_failures += sum(run.size for run in acks if (run.topic, run.partition) in failures)
        for (topic, partition), reason in sorted(failures.items()):
            log.warning("acknowledgement of %s[%d] failed (%s); its records will be redelivered and "
                        "deduplicated", topic, partition, reason)
        return set(failures)

    def _warn_on_lock_headroom(self, entry: LedgerEntry) -> None:
        if self._lock_duration_ms is None:
            return
        used_ms = time.time() * 1000 - entry.acquired_at_ms
        headroom = int(self._lock_duration_ms - used_ms)
        previous = self._counters.min_lock_headroom_ms
        self._counters.min_lock_headroom_ms = headroom if previous is None else min(previous, headroom)
        if used_ms > LOCK_WARNING_SHARE * self._lock_duration_ms:
            log.warning("epoch %d took %.1fs of its %.1fs acquisition lock before acknowledgement, and records whose "
                        "lock runs out go to another member; %s, lower maxRecordsPerTrigger, or set the source option "
                        "checkpointLocation so that acknowledgements do not wait for the next trigger", entry.epoch,
                        used_ms / 1000, self._lock_duration_ms / 1000,
                        longer_lock(self._group_id, used_ms, self._lock_duration_ms, self._bootstrap_servers))


@dataclass(frozen=True)
class _Settlement:
    """Committed epochs whose acknowledgements the coordinator may still be settling."""

    entries: list[LedgerEntry]
    acks: list[AckRun]
    settling: Outcome


def _decided(held: OffsetRange, decisions: Mapping[tuple[str, int, int], tuple[str, str | None]]) -> list[AckRun]:
    """How ``held``'s records are settled, as runs: ACCEPT, unless a decision recorded for a record says otherwise."""
    if not any(key[:2] == (held.topic, held.partition) for key in decisions):
        return [AckRun(held.topic, held.partition, first, last) for first, last in held.spans()]
    return runs_of(Ack(held.topic, held.partition, offset,
                       AckType(decisions.get((held.topic, held.partition, offset), (AckType.ACCEPT, None))[0]))
                   for offset in held.offsets())


def _positions(entry: LedgerEntry, wanted: Mapping[tuple[str, int, int], object]) -> pa.Table:
    """The positions of ``entry``'s records that ``wanted`` names, with their delivery counts."""
    rows = [{"topic": r.topic, "partition": r.partition, "offset": offset, "deliveryCount": count}
            for r in entry.ranges if any(k[:2] == (r.topic, r.partition) for k in wanted)
            for offset, count in zip(r.offsets(), r.delivery_counts, strict=True)
            if (r.topic, r.partition, offset) in wanted]
    return pa.Table.from_pylist(rows, schema=POSITIONS)
