"""The epoch ledger: which records each epoch of a query holds, written before Spark sees the epoch.

It is the source of truth for replaying an epoch after a restart and for recognising a
redelivered record this query already emitted. Rows are only appended: an epoch's entry once,
then one small row per status change, the latest commit winning. Appends never rewrite the file
that holds an epoch, so a status change costs one tiny commit; maintenance folds each epoch back
into one row and drops old settled epochs.

Each run of a query first appends a FENCE row with the next generation; from then on every write
this Ledger makes for the query checks, inside its compare-and-swap commit, that no newer run has
fenced it. The first run's id names the state for good: offsets carry it, so a checkpoint and a
state location that do not belong together are told apart.

An ENTRY row says how its offset ranges are encoded (``ranges_encoding``, RANGES_ENCODING): rows of
the first releases list every missing offset (null: encoding 1), later ones runs (2). A row in an
encoding this release does not know is refused when its epoch is read, never decoded as another.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from state_store.delta_table import StateTable
from state_store.errors import FencedError, StateStoreError
from state_store.format_version import FormatVersion
from state_store.str_enum import StrEnum
from state_store.table_cache import Piece, Snapshot
from state_store.table_commit import Write

__all__ = ["LEDGER_ADDED_COLUMNS", "LEDGER_SCHEMA", "RANGES_ENCODING", "SETTLED", "STATUSES", "UNSETTLED",
           "EpochStatus", "Fence", "Ledger", "LedgerEntry", "LedgerView", "OffsetRange", "entry_row", "epoch_status"]


class EpochStatus(StrEnum):
    """Where an epoch is in its life; the ledger's ``status`` column holds these values."""

    ACQUIRED = "ACQUIRED"  # ledgered and held by the run that acquired it (planned or not), not yet settled
    EMITTED = "EMITTED"  # a RELEASED epoch Spark had logged, planned again: its records are read back
    ACKED = "ACKED"  # every record acknowledged as decided
    ACK_FAILED = "ACK_FAILED"  # some acknowledgements failed: those records come back and are deduplicated
    RELEASED = "RELEASED"  # given back before Spark committed it

    @property
    def settled(self) -> bool:
        """The query holds none of the epoch's records any more."""
        return self in SETTLED


STATUSES = tuple(EpochStatus)


def epoch_status(value: str) -> EpochStatus:
    """``value`` as an EpochStatus; a ValueError names the statuses there are."""
    try:
        return EpochStatus(value)
    except ValueError:
        raise ValueError(f"ledger status must be one of {', '.join(STATUSES)}, got {value!r}") from None

#: Statuses after which the epoch's records are no longer held by this query.
SETTLED = frozenset({EpochStatus.ACKED, EpochStatus.ACK_FAILED, EpochStatus.RELEASED})
#: Statuses of an epoch whose records the query still holds (or held, when its run died).
UNSETTLED = frozenset({EpochStatus.ACQUIRED, EpochStatus.EMITTED})

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
    pa.field("epoch", pa.int64(), nullable=False),  # a FENCE row's generation
    pa.field("kind", pa.string(), nullable=False),  # ENTRY (carries the ranges), STATUS or FENCE
    pa.field("status", pa.string(), nullable=False),
    pa.field("commit_version", pa.int64(), nullable=False),  # the Delta version that added the row
    pa.field("updated_at_ms", pa.int64(), nullable=False),
    pa.field("member_id", pa.string()),
    pa.field("acquired_at_ms", pa.int64()),
    pa.field("lock_deadline_ms", pa.int64()),
    pa.field("ranges", pa.list_(_RANGE)),
    # null (encoding 1): gaps list every missing offset and delivery_counts has one count per record
    # (the first releases); 2: gaps are flattened inclusive runs [start, end, ...] and delivery_counts
    # flattened [position in the range, count, ...] pairs for counts other than 1
    pa.field("ranges_encoding", pa.int32()),
])
#: Columns later versions added: an older ledger table gains them with its next write.
LEDGER_ADDED_COLUMNS = ("ranges_encoding",)
#: The encodings of an ENTRY row's ranges this release reads (1: the first releases', stored as null) and writes (2).
RANGES_ENCODING = FormatVersion(current=2, name="ranges encoding")
#: what folding needs of every row (FENCE rows have no more): the offset ranges are decoded on demand
_FOLD_COLUMNS = ("query_id", "epoch", "kind", "status", "commit_version", "updated_at_ms", "member_id")


@dataclass(frozen=True)
class OffsetRange:
    """Records of one epoch in one topic-partition: ``first..last`` minus the ``gaps``.

    Sized by its holes, not its offsets: an epoch of a compacted topic (10,000 records over a
    million offsets) is 10,000 gap runs, and delivery counts are kept only where they are not 1.
    """

    topic: str
    partition: int
    first: int
    last: int
    gaps: tuple[tuple[int, int], ...] = ()  # inclusive runs of offsets inside (first, last) NOT in this epoch
    redelivered: tuple[tuple[int, int], ...] = ()  # (offset, delivery count) where the count is not 1

    def __post_init__(self) -> None:
        where = f"{self.topic}[{self.partition}] {self.first}-{self.last}"
        if self.first > self.last:
            raise ValueError(f"offset range {where} is empty")
        present = self.first  # an offset just before the next gap that must be in the range
        for start, end in self.gaps:
            if not present < start <= end < self.last:
                raise ValueError(f"gaps of {where} must be ascending, apart and strictly inside it: "
                                 f"{start}-{end} after {present}")
            present = end + 1
        if any(not self.contains(o) or c == 1 for o, c in self.redelivered) or \
                [o for o, _ in self.redelivered] != sorted({o for o, _ in self.redelivered}):
            raise ValueError(f"delivery counts of {where} must name its offsets once, ascending, "
                             f"with counts other than 1: {self.redelivered[:10]}")

    @classmethod
    def of(cls, topic: str, partition: int, records: Sequence[tuple[int, int]]) -> OffsetRange:
        """The range of ``records``: (offset, delivery count) pairs in ascending offset order."""
        gaps = tuple((a + 1, b - 1) for (a, _), (b, _) in itertools.pairwise(records) if b > a + 1)
        redelivered = tuple((o, c) for o, c in records if c != 1)
        return cls(topic, partition, records[0][0], records[-1][0], gaps, redelivered)

    @classmethod
    def of_spans(cls, topic: str, partition: int, spans: Sequence[tuple[int, int]],
                 redelivered: Sequence[tuple[int, int]] = ()) -> OffsetRange:
        """The range whose offsets are the inclusive, ascending, apart ``spans``."""
        gaps = tuple((end + 1, start - 1) for (_, end), (start, _) in itertools.pairwise(spans))
        return cls(topic, partition, spans[0][0], spans[-1][1], gaps, tuple(redelivered))

    def spans(self) -> list[tuple[int, int]]:
        """The offsets present as inclusive runs, ascending: what settling the range costs, not its record count."""
        out: list[tuple[int, int]] = []
        start = self.first
        for gap_start, gap_end in self.gaps:
            out.append((start, gap_start - 1))
            start = gap_end + 1
        out.append((start, self.last))
        return out

    def offsets(self) -> list[int]:
        """The offsets present, ascending."""
        return [offset for start, end in self.spans() for offset in range(start, end + 1)]

    def split(self, size: int) -> list[OffsetRange]:
        """This range in consecutive pieces of at most ``size`` records: an epoch's tasks."""
        pieces: list[list[tuple[int, int]]] = [[]]
        room = size
        for start, end in self.spans():
            while start <= end:
                if not room:
                    pieces.append([])
                    room = size
                taken = min(end - start + 1, room)
                pieces[-1].append((start, start + taken - 1))
                start, room = start + taken, room - taken
        return [OffsetRange.of_spans(self.topic, self.partition, piece,
                                     [(o, c) for o, c in self.redelivered if piece[0][0] <= o <= piece[-1][1]])
                for piece in pieces]

    def contains(self, offset: int) -> bool:
        if not self.first <= offset <= self.last:
            return False
        at = bisect.bisect_right(self.gaps, (offset, float("inf"))) - 1
        return at < 0 or offset > self.gaps[at][1]

    @property
    def delivery_counts(self) -> tuple[int, ...]:
        """One count per offset present, in ascending offset order."""
        counts = dict(self.redelivered)
        return tuple(counts.get(o, 1) for o in self.offsets())

    @property
    def record_count(self) -> int:
        return self.last - self.first + 1 - sum(end - start + 1 for start, end in self.gaps)


@dataclass(frozen=True)
class LedgerEntry:
    """One epoch of one query: its ranges, the member holding their locks, and its latest status."""

    query_id: str
    epoch: int
    ranges: tuple[OffsetRange, ...]
    member_id: str
    acquired_at_ms: int
    lock_deadline_ms: int | None  # None: the coordinator renews its locks while its member lives
    status: EpochStatus

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", epoch_status(self.status))

    @property
    def record_count(self) -> int:
        return sum(r.record_count for r in self.ranges)


@dataclass(frozen=True)
class Fence:
    """A run's claim on a query's state: its generation, and the id of the state itself."""

    generation: int
    run_id: str
    state_id: str  # the first run's id: constant for the life of the state


@dataclass(frozen=True)
class LedgerView:
    """What a run checks its checkpoint against before it fences: the state's id, which run holds the
    state now, and the query's epochs with their latest statuses (no offset ranges: cheap to build)."""

    state_id: str | None  # None: no run ever fenced this query's state (a new or emptied location)
    holder: str | None  # the run of the newest fence: the one that may write now
    statuses: Mapping[int, EpochStatus]

    @property
    def max_epoch(self) -> int | None:
        return max(self.statuses, default=None)


class Ledger:
    """Epochs per query in the ``ledger`` Delta table."""

    def __init__(self, table: StateTable):
        self.table = table
        self._folded: tuple[int | None, dict[str, dict[int, _Folded]], dict[str, list[dict]]] | None = None
        self._fences: dict[str, Fence] = {}  # the runs this Ledger writes for, per query

    def view(self, query_id: str) -> LedgerView:
        """The query's state as it is now, read only: what a run checks before it may fence anyone."""
        return self._view(self.table.snapshot(), query_id)

    def _view(self, snapshot: Snapshot, query_id: str) -> LedgerView:
        fences = self._fence_rows(snapshot).get(query_id, [])
        folded = self._fold(snapshot).get(query_id, {})
        return LedgerView(fences[0]["member_id"] if fences else None, fences[-1]["member_id"] if fences else None,
                          {epoch: epoch_status(f.status) for epoch, f in folded.items()})

    def fence(self, query_id: str, run_id: str, check: Callable[[LedgerView], None] | None = None) -> Fence:
        """Claim the query's state for ``run_id``: earlier runs' writes fail from now on.

        ``check`` sees the state the fence would be committed onto and may raise to refuse the
        run: it runs inside the compare-and-swap commit, so a run is checked against exactly the
        state it takes over, and a refused run fences nobody (a concurrent write re-runs both).
        """
        claimed: list[Fence] = []

        def plan(snapshot: Snapshot) -> Write:
            if check is not None:
                check(self._view(snapshot, query_id))
            fences = self._fence_rows(snapshot).get(query_id, [])
            generation = fences[-1]["epoch"] + 1 if fences else 1
            state_id = fences[0]["member_id"] if fences else run_id
            claimed[:] = [Fence(generation, run_id, state_id)]
            row = {"query_id": query_id, "epoch": generation, "kind": "FENCE", "status": "ACQUIRED",
                   "commit_version": snapshot.next_version, "updated_at_ms": _now_ms(), "member_id": run_id}
            return Write(pa.Table.from_pylist([row], schema=LEDGER_SCHEMA))

        self.table.commit(plan)
        self._fences[query_id] = claimed[0]
        return claimed[0]

    def _check_fence(self, snapshot: Snapshot, query_id: str) -> None:
        mine = self._fences.get(query_id)
        if mine is None:
            return
        latest = self._fence_rows(snapshot).get(query_id, [])[-1]
        if latest["epoch"] != mine.generation:
            raise FencedError(
                f"query {query_id!r}: run {mine.run_id} was fenced by run {latest['member_id']} (generation "
                f"{latest['epoch']}), which took over the ledger at {self.table.shown}: two drivers ran one query "
                "state at once; this one stops writing")

    def write_epoch(self, entry: LedgerEntry, *, replace_released: bool = False,
                    settled: Mapping[int, EpochStatus] | None = None) -> LedgerEntry:
        """Record ``entry`` unless its (query, epoch) is already there; returns the entry that holds.

        Idempotent: a repeated or concurrent write of the same epoch keeps the first one. With
        ``replace_released`` an epoch whose records were RELEASED is written anew: Spark never
        logged it, and its records went back to the group. ``settled``: statuses of the query's
        earlier epochs, moved in the same commit, so a steady query writes the ledger once per epoch.
        """
        written = [False]  # whether the plan that committed wrote the entry

        def plan(snapshot: Snapshot) -> Write | None:
            self._check_fence(snapshot, entry.query_id)
            folded = self._fold(snapshot).get(entry.query_id, {})
            rows = self._status_rows(snapshot, entry.query_id, folded, settled or {})
            held = folded.get(entry.epoch)
            written[0] = held is None or (replace_released and held.status == "RELEASED")
            if written[0]:
                rows.append(entry_row(entry, snapshot.next_version, _now_ms()))
            return Write(pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA)) if rows else None

        self.table.commit(plan)
        if written[0]:
            return entry
        kept = self.get(entry.query_id, entry.epoch)
        assert kept is not None, "an epoch found in the ledger cannot vanish between two reads"
        return kept

    def get(self, query_id: str, epoch: int) -> LedgerEntry | None:
        """The epoch with its latest status, or None if it was never ledgered (or was pruned)."""
        folded = self._fold(self.table.snapshot()).get(query_id, {}).get(epoch)
        return None if folded is None else folded.entry(self.table.shown)

    def entries(self, query_id: str, statuses: Iterable[str] | None = None,
                after_epoch: int | None = None) -> list[LedgerEntry]:
        """The query's epochs in ascending order, optionally only those with a status in ``statuses``
        and an epoch above ``after_epoch``."""
        wanted = None if statuses is None else set(statuses)
        folded = self._fold(self.table.snapshot()).get(query_id, {})
        return [f.entry(self.table.shown) for epoch, f in sorted(folded.items())
                if (wanted is None or f.status in wanted) and (after_epoch is None or epoch > after_epoch)]

    def set_status(self, query_id: str, epochs: Iterable[int], status: EpochStatus) -> None:
        """Move the epochs to ``status`` in one commit (epochs already there are left alone)."""
        self.set_statuses(query_id, dict.fromkeys(epochs, epoch_status(status)))

    def set_statuses(self, query_id: str, statuses: Mapping[int, EpochStatus]) -> None:
        """Move each epoch to its status in one commit (epochs already there are left alone)."""
        def plan(snapshot: Snapshot) -> Write | None:
            self._check_fence(snapshot, query_id)
            rows = self._status_rows(snapshot, query_id, self._fold(snapshot).get(query_id, {}), statuses)
            return Write(pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA)) if rows else None

        if statuses:
            self.table.commit(plan)

    def _status_rows(self, snapshot: Snapshot, query_id: str, folded: Mapping[int, Any],
                     statuses: Mapping[int, EpochStatus]) -> list[dict[str, Any]]:
        unknown = sorted(e for e in statuses if e not in folded)
        if unknown:
            raise StateStoreError(f"the ledger at {self.table.shown} has no epochs {unknown} of query "
                                  f"{query_id!r}: cannot set their statuses")
        now = _now_ms()
        return [{"query_id": query_id, "epoch": e, "kind": "STATUS", "status": epoch_status(status),
                 "commit_version": snapshot.next_version, "updated_at_ms": now}
                for e, status in sorted(statuses.items()) if folded[e].status != status]

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
                unsettled = {e for e, f in folded.items() if f.status not in SETTLED}
                kept = sorted(set(newest) | unsettled)
                horizons[query_id] = kept[0]
                rows += [folded[e].folded_row() for e in kept]
            for fences in self._fence_rows(snapshot).values():  # the state's id and the current run
                rows += [fences[0]] if len(fences) == 1 else [fences[0], fences[-1]]
            if len(rows) == snapshot.row_count():
                return None  # already one row per kept epoch: nothing to fold or drop
            return pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA)

        self.table.maintain(rewrite)
        return dict(horizons)

    def _fold(self, snapshot: Snapshot) -> dict[str, dict[int, _Folded]]:
        """Per query and epoch: its entry row and latest status (cached per table version)."""
        return self._read(snapshot)[1]

    def _fence_rows(self, snapshot: Snapshot) -> dict[str, list[dict[str, Any]]]:
        """Per query, its FENCE rows by generation."""
        return self._read(snapshot)[2]

    def _read(self, snapshot: Snapshot) -> tuple[int | None, dict[str, dict[int, _Folded]], dict[str, list[dict]]]:
        if self._folded is not None and self._folded[0] == snapshot.version and snapshot.version is not None:
            return self._folded
        out: dict[str, dict[int, _Folded]] = {}
        fences: dict[str, list[dict[str, Any]]] = {}
        for piece in snapshot.pieces:
            for index, row in enumerate(piece.rows(_FOLD_COLUMNS)):
                if row["kind"] == "FENCE":
                    fences.setdefault(row["query_id"], []).append(row)
                    continue
                epochs = out.setdefault(row["query_id"], {})
                folded = epochs.get(row["epoch"])
                if folded is None:
                    epochs[row["epoch"]] = folded = _Folded()
                folded.add(row, piece, index)
        out = {q: {e: f for e, f in epochs.items() if f.has_entry} for q, epochs in out.items()}
        for rows in fences.values():
            rows.sort(key=lambda r: r["epoch"])
        self._folded = (snapshot.version, out, fences)
        return self._folded


class _Folded:
    """An epoch's latest ENTRY row and the status of its latest row.

    Holds the ENTRY row's place, not the row: a restart folds every kept epoch's status but
    decodes the offset ranges only of the epochs it asks for (the unsettled ones).
    """

    __slots__ = ("_entry", "_index", "_piece", "entry_version", "status", "version")

    def __init__(self) -> None:
        self._piece: Piece | None = None
        self._index = -1
        self.entry_version = -1
        self.status = ""
        self.version = -1
        self._entry: LedgerEntry | None = None

    @property
    def has_entry(self) -> bool:
        return self._piece is not None

    def add(self, row: dict[str, Any], piece: Piece, index: int) -> None:
        # the latest entry holds: an epoch is written again only after its records were released
        if row["kind"] == "ENTRY" and row["commit_version"] > self.entry_version:
            self._piece, self._index, self.entry_version = piece, index, row["commit_version"]
            self._entry = None
        if row["commit_version"] >= self.version:
            self.version, self.status = row["commit_version"], row["status"]

    def entry(self, table_shown: str) -> LedgerEntry:
        """The epoch, its ranges decoded; ``table_shown`` names the ledger in a refusal of the row's encoding."""
        if self._entry is None:
            row = self.row()
            encoding = RANGES_ENCODING.read(
                row["ranges_encoding"], f"epoch {row['epoch']} of query {row['query_id']!r} in the ledger table at "
                f"{table_shown}", "start afresh on a new location")
            ranges = tuple(_DECODERS[encoding](r) for r in row["ranges"] or ())
            self._entry = LedgerEntry(row["query_id"], row["epoch"], ranges, row["member_id"],
                                      row["acquired_at_ms"], row["lock_deadline_ms"], epoch_status(self.status))
        return self._entry

    def row(self) -> dict[str, Any]:
        assert self._piece is not None
        return self._piece.row(self._index)

    def folded_row(self) -> dict[str, Any]:
        return {**self.row(), "status": self.status, "commit_version": self.version}


def entry_row(entry: LedgerEntry, version: int, now_ms: int) -> dict[str, Any]:
    """The ENTRY row ``Ledger.write_epoch`` commits at ``version``, in the current encoding."""
    return {
        "query_id": entry.query_id, "epoch": entry.epoch, "kind": "ENTRY", "status": entry.status,
        "commit_version": version, "updated_at_ms": now_ms, "member_id": entry.member_id,
        "acquired_at_ms": entry.acquired_at_ms, "lock_deadline_ms": entry.lock_deadline_ms,
        "ranges": [{"topic": r.topic, "partition": r.partition, "first_offset": r.first, "last_offset": r.last,
                    "gaps": [o for run in r.gaps for o in run],
                    "delivery_counts": [n for o, c in r.redelivered for n in (o - r.first, c)]}
                   for r in entry.ranges],
        "ranges_encoding": RANGES_ENCODING.current,
    }


def _decode_runs(r: dict[str, Any]) -> OffsetRange:
    gaps, counts, first = r["gaps"] or [], r["delivery_counts"] or [], r["first_offset"]
    return OffsetRange(r["topic"], r["partition"], first, r["last_offset"],
                       tuple(zip(gaps[::2], gaps[1::2], strict=True)),
                       tuple((first + at, c) for at, c in zip(counts[::2], counts[1::2], strict=True)))


def _decode_offsets(r: dict[str, Any]) -> OffsetRange:
    """A range as the first versions wrote it: every missing offset, every record's count."""
    missing = set(r["gaps"] or ())
    present = [o for o in range(r["first_offset"], r["last_offset"] + 1) if o not in missing]
    counts = r["delivery_counts"] or [1] * len(present)
    return OffsetRange.of(r["topic"], r["partition"], list(zip(present, counts, strict=True)))


#: Each encoding RANGES_ENCODING reads, and how.
_DECODERS: dict[int, Callable[[dict[str, Any]], OffsetRange]] = {1: _decode_offsets, 2: _decode_runs}


def _now_ms() -> int:
    return int(time.time() * 1000)
