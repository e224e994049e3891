"""Share-partition state in Delta: KIP-932's durable form, and the lock table of the Delta coordinator.

One row per share-partition holds its SPSO, SPEO and in-flight state batches. In broker mode the
connector saves what it observes, in KIP-932's durable form (no locks). In the Delta coordinator
this table *is* the share-partition leader: acquiring, acknowledging and releasing are
compare-and-swap commits of the row (read version v, apply the state machine, commit onto v or
re-read and retry), so members in any number of processes never hold a record at the same time.
Everything below the SPSO is dropped from the row, so it stays as small as the in-flight window.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from state_store.delta_table import StateTable
from state_store.share_partition import (
    AckType,
    AcquiredRecords,
    PersistedState,
    RecordState,
    ShareConfig,
    SharePartition,
    StateBatch,
)
from state_store.table_cache import Snapshot
from state_store.table_commit import Write

__all__ = ["SHARE_STATE_SCHEMA", "Acquisition", "ShareStateTable"]

T = TypeVar("T")
#: A share-partition's key: (topic, partition).
Key = tuple[str, int]

_BATCH = pa.struct([
    pa.field("first_offset", pa.int64()),
    pa.field("last_offset", pa.int64()),
    pa.field("state", pa.string()),
    pa.field("delivery_count", pa.int32()),
    pa.field("member_id", pa.string()),
    pa.field("lock_deadline_ms", pa.int64()),
])

SHARE_STATE_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("spso", pa.int64(), nullable=False),
    pa.field("speo", pa.int64(), nullable=False),
    pa.field("batches", pa.list_(_BATCH)),
    pa.field("updated_at_ms", pa.int64(), nullable=False),
    pa.field("commit_version", pa.int64(), nullable=False),
])


@dataclass(frozen=True)
class Acquisition:
    """Records a member locked, and the table version whose commit took the locks."""

    records: tuple[AcquiredRecords, ...]
    version: int | None  # None: nothing changed, nothing committed

    @property
    def count(self) -> int:
        return sum(r.last - r.first + 1 for r in self.records)


class ShareStateTable:
    """Share-partition rows in the ``share_state`` Delta table."""

    def __init__(self, table: StateTable, config: ShareConfig):
        self.table = table
        self.config = config

    # -- broker mode: KIP-932's durable form -------------------------------------------------
    def load(self, topic: str, partition: int) -> PersistedState | None:
        found = self.partition(topic, partition)
        return None if found is None else found.persisted()

    def save(self, topic: str, partition: int, state: PersistedState) -> None:
        """Replace the share-partition's row with ``state`` (last write wins)."""
        sp = SharePartition.from_persisted(state, self.config)
        self.table.commit(lambda snapshot: _write_all(snapshot, {(topic, partition): sp}, _latest(snapshot)))

    # -- Delta coordinator: compare-and-swap transitions --------------------------------------
    def partition(self, topic: str, partition: int) -> SharePartition | None:
        """The full in-flight state, locks included, or None if the share-partition has no row yet."""
        row = _latest(self.table.snapshot()).get((topic, partition))
        return None if row is None else _from_row(row, self.config)

    def partitions(self) -> dict[Key, SharePartition]:
        """Every share-partition with a row, locks included: a read, changes to them are not saved."""
        return {key: _from_row(row, self.config) for key, row in _latest(self.table.snapshot()).items()}

    def acquire(self, topic: str, partition: int, member_id: str, max_records: int, now_ms: int,
                log_end_offset: int, gaps: Iterable[int] = (), log_start_offset: int = 0) -> Acquisition:
        """Lock up to ``max_records`` records for ``member_id`` (see SharePartition.acquire).

        A share-partition without a row starts at ``log_start_offset`` (auto.offset.reset=earliest).
        """
        gaps = tuple(gaps)
        records, version = self.update(
            topic, partition,
            lambda sp: sp.acquire(member_id, max_records, now_ms, log_end_offset, gaps, log_start_offset),
            initial_spso=log_start_offset)
        return Acquisition(tuple(records), version)

    def acknowledge(self, topic: str, partition: int, member_id: str,
                    acks: Sequence[tuple[int, int, AckType]], now_ms: int) -> int | None:
        """Settle ranges the member holds; returns the committed version. Raises InvalidRecordStateError
        (and commits nothing) if any record is not held by ``member_id``."""
        return self.update(topic, partition, lambda sp: sp.acknowledge(member_id, acks, now_ms))[1]

    def release(self, topic: str, partition: int, member_id: str, now_ms: int) -> int | None:
        """Give back every record ``member_id`` holds (a clean stop); returns the committed version."""
        return self.update(topic, partition, lambda sp: sp.release_member(member_id, now_ms))[1]

    def update(self, topic: str, partition: int, change: Callable[[SharePartition], T], *,
               initial_spso: int = 0) -> tuple[T, int | None]:
        """Apply ``change`` to the latest state and commit it onto exactly that version.

        Retried from a fresh read whenever another writer committed first, so ``change`` may run
        more than once and must only touch the SharePartition it is given. Returns ``change``'s
        result and the committed version (None when the state did not change).
        """
        outcome: list[T] = []

        def plan(snapshot: Snapshot) -> Write | None:
            outcome.clear()
            rows = _latest(snapshot)
            row = rows.get((topic, partition))
            sp = _from_row(row, self.config) if row is not None else SharePartition(initial_spso, self.config)
            before = (sp.spso, sp.batches)
            outcome.append(change(sp))
            if row is not None and (sp.spso, sp.batches) == before:
                return None
            return _write_all(snapshot, {(topic, partition): sp}, rows)

        version = self.table.commit(plan)
        return outcome[0], version

    def update_all(self, change: Callable[[dict[Key, SharePartition]], T],
                   initial_spso: Mapping[Key, int] | Callable[[Collection[Key]], Mapping[Key, int]],
                   ) -> tuple[T, int | None]:
        """Apply ``change`` to every share-partition of the group and commit them all in ONE commit.

        One commit per micro-batch instead of one per partition: a query subscribed to many
        partitions would otherwise pay a commit, and a chance to lose a race, per partition.
        ``change`` gets a SharePartition per row, plus one at ``initial_spso[key]`` for each key
        there that has no row yet (``initial_spso`` may be a function of the keys that have one: a topic's
        partition new to a group that reads the topic starts elsewhere than a topic new to it); adding or
        removing keys of the dict has no effect. Like
        ``update``, it runs again on a fresh read whenever another writer committed first.

        The commit holds the rows that changed, and the rows of new share-partitions even if
        unchanged, as a new share-partition's SPSO (auto.offset.reset=latest: the log end at
        first sight) must stay where it was first set. Returns ``change``'s result and the
        committed version, None when nothing was written.
        """
        outcome: list[T] = []

        def plan(snapshot: Snapshot) -> Write | None:
            outcome.clear()
            rows = _latest(snapshot)
            partitions = {key: _from_row(row, self.config) for key, row in rows.items()}
            before = {key: (sp.spso, sp.batches) for key, sp in partitions.items()}
            initial = initial_spso(partitions.keys()) if callable(initial_spso) else initial_spso
            for key, spso in initial.items():
                partitions.setdefault(key, SharePartition(spso, self.config))
            outcome.append(change(dict(partitions)))
            written = {key: sp for key, sp in partitions.items() if before.get(key) != (sp.spso, sp.batches)}
            return _write_all(snapshot, written, rows)

        version = self.table.commit(plan)
        return outcome[0], version

    def remove_topic(self, topic: str, check: Callable[[Mapping[Key, SharePartition]], None] | None = None,
                     ) -> tuple[list[int], int | None]:
        """Delete every share-partition row of ``topic`` in one compare-and-swap commit (KIP-932's
        deleteShareGroupOffsets): the group forgets where it was in the topic.

        ``check`` sees every share-partition of the group, locks included, on the version the
        delete is planned on, and raises to refuse it: a refusal that looked at an older read could
        let a member that acquired meanwhile lose its records' state. Returns the partitions
        removed and the committed version (None when the group had no state for ``topic``).
        """
        removed: list[int] = []

        def plan(snapshot: Snapshot) -> Write | None:
            rows = _latest(snapshot)
            if check is not None:
                check({key: _from_row(row, self.config) for key, row in rows.items()})
            removed[:] = sorted(partition for name, partition in rows if name == topic)
            if not removed:
                return None
            return Write(SHARE_STATE_SCHEMA.empty_table(), mode="overwrite", predicate=_topic_is(topic))

        version = self.table.commit(plan)
        return list(removed), version

    def maintain(self) -> None:
        self.table.maintain()


def _latest(snapshot: Snapshot) -> dict[Key, dict[str, Any]]:
    """Each share-partition's row (the latest, should a table hold more than one)."""
    rows: dict[Key, dict[str, Any]] = {}
    for row in sorted(snapshot.rows(), key=lambda r: r["commit_version"]):
        rows[(row["topic"], row["partition"])] = row
    return rows


def _write_all(snapshot: Snapshot, written: Mapping[Key, SharePartition], existing: Container[Key]) -> Write | None:
    """Rows of ``written`` in one write: appended when none is in ``existing``, else replacing exactly
    their old rows.

    The overwrite's predicate names every written share-partition, new ones included, because
    delta-rs requires the rows an overwrite writes to match its predicate.
    """
    if not written:
        return None
    keys = sorted(written)
    data = pa.Table.from_pylist([_to_row(topic, partition, written[topic, partition], snapshot.next_version)
                                 for topic, partition in keys], schema=SHARE_STATE_SCHEMA)
    if not any(key in existing for key in written):
        return Write(data)
    predicate = " OR ".join(f"({_matches(topic, partition)})" for topic, partition in keys)
    return Write(data, mode="overwrite", predicate=predicate)


def _matches(topic: str, partition: int) -> str:
    """The predicate selecting one share-partition's row."""
    return f"{_topic_is(topic)} AND partition = {int(partition)}"


def _topic_is(topic: str) -> str:
    """The predicate selecting a topic's rows; the topic quoted as a SQL string."""
    quoted = topic.replace("'", "''")
    return f"topic = '{quoted}'"


def _from_row(row: dict[str, Any], config: ShareConfig) -> SharePartition:
    batches = [StateBatch(b["first_offset"], b["last_offset"], RecordState(b["state"]), b["delivery_count"],
                          b["member_id"], b["lock_deadline_ms"]) for b in row["batches"] or ()]
    return SharePartition(row["spso"], config, batches)


def _to_row(topic: str, partition: int, sp: SharePartition, version: int) -> dict[str, Any]:
    return {
        "topic": topic, "partition": partition, "spso": sp.spso, "speo": sp.speo,
        "batches": [{"first_offset": b.first, "last_offset": b.last, "state": b.state.value,
                     "delivery_count": b.delivery_count, "member_id": b.member_id,
                     "lock_deadline_ms": b.lock_deadline_ms} for b in sp.batches],
        "updated_at_ms": int(time.time() * 1000), "commit_version": version,
    }
