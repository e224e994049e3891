"""The epoch ledger: which records each epoch of a query holds, written before Spark sees the epoch.

It is the source of truth for replaying an epoch after a restart and for recognising a
redelivered record this query already emitted. Rows are only appended: an epoch's entry once,
then one small row per status change, the latest commit winning. Appends never rewrite the file
that holds an epoch, so a status change costs one tiny commit; maintenance folds each epoch back
into one row and drops old settled epochs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from state_store.delta_table import Snapshot, StateTable, Write
from state_store.errors import StateStoreError

__all__ = ["LEDGER_SCHEMA", "SETTLED_STATUSES", "STATUSES", "Ledger", "LedgerEntry", "OffsetRange"]

STATUSES = ("ACQUIRED", "EMITTED", "ACKED", "ACK_FAILED", "RELEASED")
#: Statuses after which the epoch's records are no longer held by this query.
SETTLED_STATUSES = ("ACKED", "ACK_FAILED", "RELEASED")

_RANGE = pa.struct([
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("first_offset", pa.int64()),
    pa.field("last_offset", pa.int64()),
    pa.field("gaps", pa.list_(pa.int64())),
    pa.field("delivery_counts", pa.list_(pa.int32())),
])

LEDGER_SCHEMA = pa.schema([
    pa.field("query_id", pa.string(), nullable=False),
    pa.field("epoch", pa.int64(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),  # ENTRY (carries the ranges) or STATUS
    pa.field("status", pa.string(), nullable=False),
    pa.field("commit_version", pa.int64(), nullable=False),  # the Delta version that added the row
    pa.field("updated_at_ms", pa.int64(), nullable=False),
    pa.field("member_id", pa.string()),
    pa.field("acquired_at_ms", pa.int64()),
    pa.field("lock_deadline_ms", pa.int64()),
    pa.field("ranges", pa.list_(_RANGE)),
])


@dataclass(frozen=True)
class OffsetRange:
    """Records of one epoch in one topic-partition: ``first..last`` minus ``gaps``."""

    topic: str
    partition: int
    first: int
    last: int
    gaps: tuple[int, ...] = ()  # offsets in [first, last] NOT in this epoch
    delivery_counts: tuple[int, ...] = ()  # one per offset present, ascending offset order

    def __post_init__(self) -> None:
        if self.first > self.last:
            raise ValueError(f"offset range {self.topic}[{self.partition}] {self.first}-{self.last} is empty")
        where = f"{self.topic}[{self.partition}] {self.first}-{self.last}"
        inside = all(self.first < g < self.last for g in self.gaps)
        if list(self.gaps) != sorted(set(self.gaps)) or not inside:
            raise ValueError(f"gaps of {where} must be ascending, unique and strictly inside it: {self.gaps}")
        if self.delivery_counts and len(self.delivery_counts) != self.record_count:
            raise ValueError(f"{where} holds {self.record_count} records but has "
                             f"{len(self.delivery_counts)} delivery counts")

    def offsets(self) -> list[int]:
        """The offsets present, ascending."""
        missing = set(self.gaps)
        return [o for o in range(self.first, self.last + 1) if o not in missing]

    @property
    def record_count(self) -> int:
        return self.last - self.first + 1 - len(self.gaps)


@dataclass(frozen=True)
class LedgerEntry:
    """One epoch of one query: its ranges, the member holding their locks, and its latest status."""

    query_id: str
    epoch: int
    ranges: tuple[OffsetRange, ...]
    member_id: str
    acquired_at_ms: int
    lock_deadline_ms: int
    status: str  # one of STATUSES

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"ledger status must be one of {', '.join(STATUSES)}, got {self.status!r}")

    @property
    def record_count(self) -> int:
        return sum(r.record_count for r in self.ranges)


class Ledger:
    """Epochs per query in the ``ledger`` Delta table."""

    def __init__(self, table: StateTable):
        self.table = table
        self._folded: tuple[int | None, dict[str, dict[int, _Folded]]] | None = None

    def write_epoch(self, entry: LedgerEntry) -> LedgerEntry:
        """Record ``entry`` unless its (query, epoch) is already there; returns the entry that holds.

        Idempotent: a repeated or concurrent write of the same epoch keeps the first one.
        """
        def plan(snapshot: Snapshot) -> Write | None:
            if entry.epoch in self._fold(snapshot).get(entry.query_id, {}):
                return None
            row = _entry_row(entry, snapshot.next_version, _now_ms())
            return Write(pa.Table.from_pylist([row], schema=LEDGER_SCHEMA))

        if self.table.commit(plan) is not None:
            return entry
        kept = self.get(entry.query_id, entry.epoch)
        assert kept is not None, "an epoch found in the ledger cannot vanish between two reads"
        return kept

    def get(self, query_id: str, epoch: int) -> LedgerEntry | None:
        """The epoch with its latest status, or None if it was never ledgered (or was pruned)."""
        folded = self._fold(self.table.snapshot()).get(query_id, {}).get(epoch)
        return None if folded is None else folded.entry()

    def entries(self, query_id: str, statuses: Iterable[str] | None = None,
                after_epoch: int | None = None) -> list[LedgerEntry]:
        """The query's epochs in ascending order, optionally only those with a status in ``statuses``
        and an epoch above ``after_epoch``."""
        wanted = None if statuses is None else set(statuses)
        folded = self._fold(self.table.snapshot()).get(query_id, {})
        return [f.entry() for epoch, f in sorted(folded.items())
                if (wanted is None or f.status in wanted) and (after_epoch is None or epoch > after_epoch)]

    def set_status(self, query_id: str, epochs: Iterable[int], status: str) -> None:
        """Move the epochs to ``status`` in one commit (epochs already there are left alone)."""
        if status not in STATUSES:
            raise ValueError(f"ledger status must be one of {', '.join(STATUSES)}, got {status!r}")
        wanted = sorted(set(epochs))

        def plan(snapshot: Snapshot) -> Write | None:
            folded = self._fold(snapshot).get(query_id, {})
            unknown = [e for e in wanted if e not in folded]
            if unknown:
                raise StateStoreError(f"the ledger at {self.table.uri} has no epochs {unknown} of query "
                                      f"{query_id!r}: cannot set them to {status}")
            changed = [e for e in wanted if folded[e].status != status]
            if not changed:
                return None
            now = _now_ms()
            rows = [{"query_id": query_id, "epoch": e, "kind": "STATUS", "status": status,
                     "commit_version": snapshot.next_version, "updated_at_ms": now} for e in changed]
            return Write(pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA))

        if wanted:
            self.table.commit(plan)

    def max_epoch(self, query_id: str) -> int | None:
        folded = self._fold(self.table.snapshot()).get(query_id)
        return max(folded) if folded else None

    def maintain(self, keep_epochs: int) -> dict[str, int]:
        """Fold every epoch into one row; per query keep the newest ``keep_epochs`` epochs and every
        unsettled one. Returns, per query, the lowest epoch kept (older decisions can go too)."""
        if keep_epochs < 1:
            raise ValueError(f"keep_epochs must be at least 1, got {keep_epochs}")
        horizons: dict[str, int] = {}

        def rewrite(snapshot: Snapshot) -> pa.Table | None:
            horizons.clear()
            rows = []
            for query_id, folded in self._fold(snapshot).items():
                newest = sorted(folded)[-keep_epochs:]
                unsettled = {e for e, f in folded.items() if f.status not in SETTLED_STATUSES}
                kept = sorted(set(newest) | unsettled)
                horizons[query_id] = kept[0]
                rows += [folded[e].folded_row() for e in kept]
            if len(rows) == len(snapshot.rows()):
                return None  # already one row per kept epoch: nothing to fold or drop
            return pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA)

        self.table.maintain(rewrite)
        return dict(horizons)

    def _fold(self, snapshot: Snapshot) -> dict[str, dict[int, _Folded]]:
        """Per query and epoch: its entry row and latest status (cached per table version)."""
        if self._folded is not None and self._folded[0] == snapshot.version and snapshot.version is not None:
            return self._folded[1]
        out: dict[str, dict[int, _Folded]] = {}
        for row in snapshot.rows():
            epochs = out.setdefault(row["query_id"], {})
            folded = epochs.get(row["epoch"])
            if folded is None:
                epochs[row["epoch"]] = folded = _Folded()
            folded.add(row)
        out = {q: {e: f for e, f in epochs.items() if f.row is not None} for q, epochs in out.items()}
        self._folded = (snapshot.version, out)
        return out


class _Folded:
    """An epoch's first ENTRY row and the status of its latest row."""

    __slots__ = ("_entry", "row", "status", "version")

    def __init__(self) -> None:
        self.row: dict[str, Any] | None = None
        self.status = ""
        self.version = -1
        self._entry: LedgerEntry | None = None

    def add(self, row: dict[str, Any]) -> None:
        first = self.row is None or row["commit_version"] < self.row["commit_version"]
        if row["kind"] == "ENTRY" and first:
            self.row = row
        if row["commit_version"] >= self.version:
            self.version, self.status = row["commit_version"], row["status"]

    def entry(self) -> LedgerEntry:
        if self._entry is None:
            row = self.row
            assert row is not None
            ranges = tuple(OffsetRange(r["topic"], r["partition"], r["first_offset"], r["last_offset"],
                                       tuple(r["gaps"] or ()), tuple(r["delivery_counts"] or ()))
                           for r in row["ranges"] or ())
            self._entry = LedgerEntry(row["query_id"], row["epoch"], ranges, row["member_id"],
                                      row["acquired_at_ms"], row["lock_deadline_ms"], self.status)
        return self._entry

    def folded_row(self) -> dict[str, Any]:
        assert self.row is not None
        return {**self.row, "status": self.status, "commit_version": self.version}


def _entry_row(entry: LedgerEntry, version: int, now_ms: int) -> dict[str, Any]:
    return {
        "query_id": entry.query_id, "epoch": entry.epoch, "kind": "ENTRY", "status": entry.status,
        "commit_version": version, "updated_at_ms": now_ms, "member_id": entry.member_id,
        "acquired_at_ms": entry.acquired_at_ms, "lock_deadline_ms": entry.lock_deadline_ms,
        "ranges": [{"topic": r.topic, "partition": r.partition, "first_offset": r.first,
                    "last_offset": r.last, "gaps": list(r.gaps), "delivery_counts": list(r.delivery_counts)}
                   for r in entry.ranges],
    }


def _now_ms() -> int:
    return int(time.time() * 1000)
