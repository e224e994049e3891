"""KIP-932 share-partition state machine: plain data, no I/O, no clock.

A share-partition is a topic-partition seen by one share group. Records from the share-partition
start offset (SPSO) up to, not including, the share-partition end offset (SPEO) are *in flight*;
everything below the SPSO is Archived, everything from the SPEO on is Available and was never
delivered. In-flight records are kept as *state batches* (ranges of offsets sharing a state, a
delivery count and, when Acquired, a member and a lock deadline) because KIP-932 persists them
that way and because consumers fetch and acknowledge in ranges: per-record objects would make a
share-partition with a few thousand in-flight records needlessly large to store and compare.

Time is an argument (``now_ms``) of every operation that can see a lock expire, so the Delta
coordinator, the tests and a replay of KIP-932's examples all drive the same code.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from state_store.str_enum import StrEnum

__all__ = [
    "AckType",
    "AcquiredRecords",
    "InvalidRecordStateError",
    "PersistedBatch",
    "PersistedState",
    "RecordState",
    "ShareConfig",
    "SharePartition",
    "StateBatch",
]


class RecordState(str, Enum):
    """KIP-932 delivery states; the durable form holds only AVAILABLE, ACKNOWLEDGED and ARCHIVED."""

    AVAILABLE = "AVAILABLE"
    ACQUIRED = "ACQUIRED"
    ACKNOWLEDGED = "ACKNOWLEDGED"
    ARCHIVED = "ARCHIVED"


class AckType(StrEnum):
    """How a member settles a record it holds (ShareAcknowledge's AcknowledgeType).

    The one definition: the state machine, the ack decisions, the coordinators and user
    outcomes all use it, and its values are what the state tables hold."""

    ACCEPT = "ACCEPT"
    RELEASE = "RELEASE"
    REJECT = "REJECT"


class InvalidRecordStateError(ValueError):
    """An acknowledgement names a record the member does not hold (KIP-932's INVALID_RECORD_STATE)."""


@dataclass(frozen=True)
class ShareConfig:
    """The group settings the state machine obeys (defaults are Apache Kafka's)."""

    delivery_attempt_limit: int = 5  # group.share.delivery.count.limit
    max_record_locks: int = 2000  # group.share.partition.max.record.locks: the in-flight window
    lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms

    def __post_init__(self) -> None:
        for name in ("delivery_attempt_limit", "max_record_locks", "lock_duration_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"ShareConfig.{name} must be at least 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class StateBatch:
    """Offsets ``first..last`` (inclusive) sharing one state; member and deadline only when Acquired."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: int | None = None

    def same_state(self, other: StateBatch) -> bool:
        return (self.state, self.delivery_count, self.member_id, self.lock_deadline_ms) == (
            other.state, other.delivery_count, other.member_id, other.lock_deadline_ms)

    @property
    def is_gap(self) -> bool:
        """Offsets the log does not hold (compaction): archived without ever being delivered."""
        return self.state is RecordState.ARCHIVED and self.delivery_count == 0


@dataclass(frozen=True)
class PersistedBatch:
    """One entry of KIP-932's durable StateBatches: no member, no lock."""

    first: int
    last: int
    state: RecordState
    delivery_count: int


@dataclass(frozen=True)
class PersistedState:
    """KIP-932's durable share-partition state: the SPSO and the in-flight state batches."""

    spso: int
    batches: tuple[PersistedBatch, ...] = ()


@dataclass(frozen=True)
class AcquiredRecords:
    """A run of records handed to a member, as ShareFetch reports them."""

    first: int
    last: int
    delivery_count: int


class SharePartition:
    """In-flight state of one share-partition and the KIP-932 transitions on it."""

    def __init__(self, spso: int = 0, config: ShareConfig | None = None, batches: Iterable[StateBatch] = ()):
        self.config = config or ShareConfig()
        self._spso = spso
        self._batches: list[StateBatch] = []
        self._archived_at_limit: list[StateBatch] = []
        self._lost_unread: list[tuple[int, int]] = []
        expected = spso
        for batch in sorted(batches, key=lambda b: b.first):
            if batch.first < expected or batch.last < batch.first:
                raise ValueError(f"state batch {batch.first}-{batch.last} is empty, or overlaps or precedes "
                                 f"offset {expected}")
            if batch.first > expected:  # never fetched yet: Available, no delivery so far
                self._batches.append(StateBatch(expected, batch.first - 1, RecordState.AVAILABLE, 0))
            self._batches.append(batch)
            expected = batch.last + 1
        self._normalize()

    @classmethod
    def from_persisted(cls, state: PersistedState, config: ShareConfig | None = None) -> SharePartition:
        """Rebuild from the durable form; batches below the SPSO are already archived and dropped."""
        batches = []
        for b in state.batches:
            if b.state is RecordState.ACQUIRED:
                raise ValueError(f"persisted batch {b.first}-{b.last} is ACQUIRED; the durable form has no "
                                 "locks")
            if b.last >= state.spso:
                batches.append(StateBatch(max(b.first, state.spso), b.last, b.state, b.delivery_count))
        return cls(state.spso, config, batches)

    # -- what the share-partition looks like -------------------------------------------------
    @property
    def spso(self) -> int:
        return self._spso

    @property
    def speo(self) -> int:
        return self._batches[-1].last + 1 if self._batches else self._spso

    @property
    def batches(self) -> tuple[StateBatch, ...]:
        return tuple(self._batches)

    def state_of(self, offset: int) -> StateBatch:
        """The one-record batch for ``offset``; below the SPSO it is Archived, from the SPEO on Available."""
        if offset < self._spso:
            return StateBatch(offset, offset, RecordState.ARCHIVED, 0)
        if offset >= self.speo:
            return StateBatch(offset, offset, RecordState.AVAILABLE, 0)
        return replace(self._batches[self._index_of(offset)], first=offset, last=offset)

    def count(self, *states: RecordState, start: int | None = None) -> int:
        """In-flight records in any of ``states`` at offsets from ``start`` (default the SPSO) to the SPEO.

        What describing a group reports: the four counts sum to SPEO - SPSO. ``start`` leaves out
        offsets the log no longer holds (retention moved the log start past the SPSO).
        """
        low = self._spso if start is None else start
        return sum(b.last - max(b.first, low) + 1 for b in self._batches if b.state in states and b.last >= low)

    def holders(self) -> dict[str, int]:
        """Records each member holds Acquired, by member id; call ``expire_locks`` first for the live locks only."""
        held: dict[str, int] = {}
        for b in self._batches:
            if b.state is RecordState.ACQUIRED and b.member_id is not None:
                held[b.member_id] = held.get(b.member_id, 0) + b.last - b.first + 1
        return held

    def archived_at_limit(self) -> list[AcquiredRecords]:
        """Ranges this instance archived because their delivery count reached the limit.

        The group, not a member, archives these, so nobody else would dead-letter them; REJECTs
        are left out because the member that rejected already did. The list covers this
        instance's life only: a compare-and-swap retry rebuilds the instance from the row it
        re-read, so what it reports is exactly what the winning commit archived.
        """
        return _runs(self._archived_at_limit)

    def lost_unread(self) -> list[tuple[int, int]]:
        """Ranges (first, last) the log start passed while nobody had processed them: Available records (never
        delivered, or given back) and records from the SPEO on, which retention or DeleteRecords removed before
        the group read them. Acquired, acknowledged and archived records are not among them: someone holds or
        finished those. Like ``archived_at_limit``, for this instance's life only."""
        return list(self._lost_unread)

    def persisted(self) -> PersistedState:
        """KIP-932's durable form: Acquired is transient, so it persists as Available with its count."""
        out: list[PersistedBatch] = []
        for b in self._batches:
            state = RecordState.AVAILABLE if b.state is RecordState.ACQUIRED else b.state
            if out and out[-1].state is state and out[-1].delivery_count == b.delivery_count:
                out[-1] = replace(out[-1], last=b.last)
            else:
                out.append(PersistedBatch(b.first, b.last, state, b.delivery_count))
        return PersistedState(self._spso, tuple(out))

    # -- transitions -------------------------------------------------------------------------
    def acquire(self, member_id: str, max_records: int, now_ms: int, log_end_offset: int,
                gaps: Iterable[int] = (), log_start_offset: int | None = None) -> list[AcquiredRecords]:
        """Lock up to ``max_records`` Available records for ``member_id``, lowest offsets first.

        Candidates are Available in-flight records, then records from the SPEO up to
        ``log_end_offset`` while the in-flight window (SPEO - SPSO) stays within
        ``max_record_locks``. ``gaps`` are offsets the log does not hold (compaction): they are
        archived, never handed out. A record whose delivery count already reached the limit is
        archived instead of being delivered once more. ``log_start_offset`` moves the SPSO past
        records the log no longer has (retention).
        """
        if max_records < 1:
            raise ValueError(f"max_records must be at least 1, got {max_records}")
        self.expire_locks(now_ms)
        if log_start_offset is not None and log_start_offset > self._spso:
            self._drop_below(log_start_offset)
        missing = sorted(set(gaps))
        deadline = now_ms + self.config.lock_duration_ms
        taken: list[StateBatch] = []
        budget = max_records
        for batch in list(self._batches):
            if budget == 0:
                break
            if batch.state is not RecordState.AVAILABLE:
                continue
            if batch.delivery_count >= self.config.delivery_attempt_limit:
                self._put(self._archive_at_limit(batch))
                continue
            budget = self._take(batch.first, batch.last, batch.delivery_count, missing, member_id, deadline,
                                budget, taken)
        window_end = min(log_end_offset, self._spso + self.config.max_record_locks)
        if budget and self.speo < window_end:
            self._take(self.speo, window_end - 1, 0, missing, member_id, deadline, budget, taken)
        self._normalize()
        return _runs(taken)

    def acknowledge(self, member_id: str, acks: Sequence[tuple[int, int, AckType]], now_ms: int) -> None:
        """Settle ranges ``(first, last, type)`` the member holds; all or nothing.

        Gaps inside a range are skipped, as KIP-932's gap acknowledgements are. Anything else that
        is not Acquired by ``member_id`` with a live lock raises InvalidRecordStateError and
        leaves the state untouched.
        """
        self.expire_locks(now_ms)
        ranges = sorted((first, last) for first, last, _ in acks)
        for (_, end), (start, _) in itertools.pairwise(ranges):
            if start <= end:
                raise ValueError(f"acknowledgement ranges overlap at offset {start}: settle each record once")
        for first, last in ranges:
            self._check_held(member_id, first, last)
        for first, last, ack in acks:
            self._map(first, last, functools.partial(self._settle_held, ack=ack))
        self._normalize()

    def release_member(self, member_id: str, now_ms: int, keep: Sequence[tuple[int, int]] = ()) -> int:
        """Give back everything ``member_id`` holds (its share session closed) but the records within ``keep``
        (first, last): a stopping query's run keeps the epochs Spark runs again locked for its next run. Returns
        the record count given back."""
        self.expire_locks(now_ms)
        for first, last in keep:  # a batch then lies wholly inside a kept range or wholly outside every one
            self._split(first)
            self._split(last + 1)
        held = [b for b in self._batches if b.state is RecordState.ACQUIRED and b.member_id == member_id
                and not any(first <= b.first and b.last <= last for first, last in keep)]
        for b in held:
            self._put(self._settle(b, AckType.RELEASE))
        self._normalize()
        return sum(b.last - b.first + 1 for b in held)

    def renew_member(self, member_id: str, ranges: Sequence[tuple[int, int]], now_ms: int) -> int:
        """Extend the live locks ``member_id`` holds within ``ranges`` (first, last) to a full lock duration from
        ``now_ms`` (KIP-1222 RENEW names the records it renews); returns the record count renewed.

        Locks that already ended are released first, as everywhere else: a renewal cannot bring back
        a lock another member may since have taken over. Records of the member outside ``ranges`` are
        left to expire: an acquisition whose answer the member never got is not renewed forever.
        """
        return self._relock(member_id, member_id, ranges, now_ms)

    def hand_over(self, member_id: str, to_member_id: str, ranges: Sequence[tuple[int, int]], now_ms: int) -> int:
        """Make ``to_member_id`` the holder of the live locks ``member_id`` holds within ``ranges`` (first, last),
        for a full lock duration from ``now_ms``: a restarted query's run takes over what its earlier run held of
        the epochs Spark runs again, so no other member gets them in between. Returns the record count."""
        return self._relock(member_id, to_member_id, ranges, now_ms)

    def reset(self, offset: int) -> int:
        """Start the share-partition afresh at ``offset`` (KIP-932's alterShareGroupOffsets); returns the
        in-flight record count whose state and delivery counts were discarded.

        SPSO and SPEO become ``offset``: records from there on are Available, never delivered, and
        everything below is Archived. Refused with InvalidRecordStateError while any record is
        Acquired (call ``expire_locks`` first): a member holding records would settle them against
        state that no longer exists, which is why KIP-932 resets only an empty group.
        """
        if offset < 0:
            raise ValueError(f"a share-partition cannot start at a negative offset, got {offset}")
        held = self.holders()
        if held:
            raise InvalidRecordStateError(f"cannot reset to offset {offset}: records are Acquired by "
                                          f"{', '.join(sorted(held))}")
        discarded = self.speo - self._spso
        self._spso, self._batches = offset, []
        return discarded

    def expire_locks(self, now_ms: int) -> int:
        """Release every record whose lock deadline is at or before ``now_ms``; returns the record count."""
        expired = [b for b in self._batches
                   if b.state is RecordState.ACQUIRED and b.lock_deadline_ms is not None
                   and b.lock_deadline_ms <= now_ms]
        for b in expired:
            self._put(self._settle(b, AckType.RELEASE))
        self._normalize()
        return sum(b.last - b.first + 1 for b in expired)

    # -- internals ---------------------------------------------------------------------------
    def _relock(self, member_id: str, to_member_id: str, ranges: Sequence[tuple[int, int]], now_ms: int) -> int:
        """Lock ``member_id``'s live records within ``ranges`` for ``to_member_id`` a full duration from ``now_ms``."""
        self.expire_locks(now_ms)
        deadline = now_ms + self.config.lock_duration_ms
        relocked = 0

        def relock(batch: StateBatch) -> StateBatch:
            nonlocal relocked
            if batch.state is not RecordState.ACQUIRED or batch.member_id != member_id:
                return batch
            relocked += batch.last - batch.first + 1
            return replace(batch, member_id=to_member_id, lock_deadline_ms=deadline)

        for first, last in ranges:
            if first < self.speo and last >= self._spso:
                self._map(max(first, self._spso), min(last, self.speo - 1), relock)
        self._normalize()
        return relocked

    def _settle_held(self, batch: StateBatch, ack: AckType) -> StateBatch:
        return batch if batch.is_gap else self._settle(batch, ack)

    def _settle(self, batch: StateBatch, ack: AckType) -> StateBatch:
        if ack is AckType.ACCEPT:
            state = RecordState.ACKNOWLEDGED
        elif ack is AckType.REJECT:
            state = RecordState.ARCHIVED
        elif batch.delivery_count >= self.config.delivery_attempt_limit:
            return self._archive_at_limit(batch)
        else:
            state = RecordState.AVAILABLE
        return StateBatch(batch.first, batch.last, state, batch.delivery_count)

    def _archive_at_limit(self, batch: StateBatch) -> StateBatch:
        """Archive ``batch`` for having reached the delivery-count limit, and remember it for the report."""
        archived = StateBatch(batch.first, batch.last, RecordState.ARCHIVED, batch.delivery_count)
        self._archived_at_limit.append(archived)
        return archived

    def _take(self, first: int, last: int, delivery_count: int, missing: list[int], member_id: str,
              deadline: int, budget: int, taken: list[StateBatch]) -> int:
        """Acquire present offsets of ``first..last`` (archiving gaps) until ``budget`` runs out."""
        at = first
        while at <= last and budget:
            gap_end = _gap_run_end(missing, at, last)
            if gap_end is not None:
                self._put(StateBatch(at, gap_end, RecordState.ARCHIVED, 0))
                at = gap_end + 1
                continue
            nxt = bisect.bisect_left(missing, at)
            run_last = min(last, missing[nxt] - 1 if nxt < len(missing) else last, at + budget - 1)
            got = StateBatch(at, run_last, RecordState.ACQUIRED, delivery_count + 1, member_id, deadline)
            self._put(got)
            taken.append(got)
            budget -= run_last - at + 1
            at = run_last + 1
        return budget

    def _check_held(self, member_id: str, first: int, last: int) -> None:
        if first > last:
            raise ValueError(f"acknowledgement range {first}-{last} is empty")
        if first < self._spso or last >= self.speo:
            where = "below the SPSO (archived)" if first < self._spso else "beyond the SPEO (never acquired)"
            raise InvalidRecordStateError(
                f"member {member_id} cannot acknowledge {first}-{last}: part of it is {where}; "
                f"in flight are {self._spso}-{self.speo - 1}")
        for b in self._batches[self._index_of(first):self._index_of(last) + 1]:
            if b.is_gap or (b.state is RecordState.ACQUIRED and b.member_id == member_id):
                continue
            holder = f" by member {b.member_id}" if b.state is RecordState.ACQUIRED else ""
            lo, hi = max(b.first, first), min(b.last, last)
            raise InvalidRecordStateError(
                f"member {member_id} cannot acknowledge offsets {lo}-{hi}: they are {b.state.value}{holder} "
                f"(delivery count {b.delivery_count}), not acquired by {member_id}")

    def _index_of(self, offset: int) -> int:
        return bisect.bisect_right([b.first for b in self._batches], offset) - 1

    def _split(self, offset: int) -> None:
        """Make ``offset`` the first offset of a batch if it falls inside one."""
        if not self._spso < offset < self.speo:
            return
        i = self._index_of(offset)
        b = self._batches[i]
        if b.first < offset:
            self._batches[i:i + 1] = [replace(b, last=offset - 1), replace(b, first=offset)]

    def _map(self, first: int, last: int, change: Callable[[StateBatch], StateBatch]) -> None:
        self._split(first)
        self._split(last + 1)
        lo, hi = self._index_of(first), self._index_of(last)
        self._batches[lo:hi + 1] = [change(b) for b in self._batches[lo:hi + 1]]

    def _put(self, batch: StateBatch) -> None:
        """Write ``batch`` over its offsets, extending the SPEO if it starts there."""
        if batch.first == self.speo:
            self._batches.append(batch)
        else:
            self._map(batch.first, batch.last, lambda b: replace(batch, first=b.first, last=b.last))

    def _drop_below(self, offset: int) -> None:
        self._split(offset)
        lost = [(b.first, b.last) for b in self._batches if b.last < offset and b.state is RecordState.AVAILABLE]
        if self.speo < offset:
            lost.append((self.speo, offset - 1))
        for first, last in lost:  # neighbours merged: Available runs apart only where something else lies between
            if self._lost_unread and self._lost_unread[-1][1] + 1 == first:
                self._lost_unread[-1] = (self._lost_unread[-1][0], last)
            else:
                self._lost_unread.append((first, last))
        self._batches = [b for b in self._batches if b.first >= offset]
        self._spso = offset

    def _normalize(self) -> None:
        """Merge equal neighbours and move the SPSO over the settled prefix (KIP-932's SPSO rule)."""
        merged: list[StateBatch] = []
        for b in self._batches:
            if merged and merged[-1].same_state(b):
                merged[-1] = replace(merged[-1], last=b.last)
            else:
                merged.append(b)
        while merged and merged[0].state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
            self._spso = merged.pop(0).last + 1
        self._batches = merged


def _gap_run_end(missing: list[int], at: int, last: int) -> int | None:
    """If ``at`` is missing from the log, the last offset of the missing run starting there."""
    i = bisect.bisect_left(missing, at)
    if i == len(missing) or missing[i] != at:
        return None
    end = at
    while i + 1 < len(missing) and missing[i + 1] == end + 1 and end + 1 <= last:
        i += 1
        end += 1
    return end


def _runs(taken: list[StateBatch]) -> list[AcquiredRecords]:
    out: list[AcquiredRecords] = []
    for b in sorted(taken, key=lambda b: b.first):
        if out and out[-1].last + 1 == b.first and out[-1].delivery_count == b.delivery_count:
            out[-1] = replace(out[-1], last=b.last)
        else:
            out.append(AcquiredRecords(b.first, b.last, b.delivery_count))
    return out
