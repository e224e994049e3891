"""Per-record acknowledgement decisions: which records of an epoch are not simply ACCEPTed.

User code or the connector decides that a record must be REJECTed (poison, goes to the dead
letters) or RELEASEd (try again later). Decisions are recorded before the epoch commits, so the
acknowledgement sent after the commit, possibly by a restarted driver, applies them. A record
without a decision is ACCEPTed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from state_store.delta_table import StateTable
from state_store.share_partition import AckType
from state_store.table_cache import Snapshot
from state_store.table_commit import Write

__all__ = ["DECISIONS_SCHEMA", "DecisionRow", "Decisions"]

#: (topic, partition, offset, decision, reason) as passed to ``Decisions.record``.
DecisionRow = tuple[str, int, int, str, str | None]

DECISIONS_SCHEMA = pa.schema([
    pa.field("query_id", pa.string(), nullable=False),
    pa.field("epoch", pa.int64(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("decision", pa.string(), nullable=False),  # ACCEPT, RELEASE or REJECT
    pa.field("reason", pa.string()),
    pa.field("decided_at_ms", pa.int64(), nullable=False),
    pa.field("commit_version", pa.int64(), nullable=False),  # later commits win
])

_DECISIONS = {a.value for a in AckType}


class Decisions:
    """Ack decisions per query, epoch and record in the ``decisions`` Delta table."""

    def __init__(self, table: StateTable):
        self.table = table

    def record(self, query_id: str, epoch: int, rows: Iterable[DecisionRow]) -> None:
        """Durably record decisions for records of ``epoch``; for the same record the last write wins."""
        latest: dict[tuple[str, int, int], tuple[str, str | None]] = {}
        for topic, partition, offset, decision, reason in rows:
            if decision not in _DECISIONS:
                raise ValueError(f"decision for {topic}[{partition}]@{offset} must be one of "
                                 f"{', '.join(sorted(_DECISIONS))}, got {decision!r}")
            latest[(topic, partition, offset)] = (decision, reason)
        if not latest:
            return
        now = int(time.time() * 1000)

        def plan(snapshot: Snapshot) -> Write:
            return Write(pa.Table.from_pylist(
                [{"query_id": query_id, "epoch": epoch, "topic": t, "partition": p, "offset": o,
                  "decision": d, "reason": r, "decided_at_ms": now, "commit_version": snapshot.next_version}
                 for (t, p, o), (d, r) in latest.items()], schema=DECISIONS_SCHEMA))

        self.table.commit(plan)

    def for_epochs(self, query_id: str,
                   epochs: Iterable[int]) -> dict[tuple[str, int, int], tuple[str, str | None]]:
        """Decisions for records of these epochs: (topic, partition, offset) -> (decision, reason)."""
        wanted = set(epochs)
        rows = [r for r in self.table.snapshot().rows() if r["query_id"] == query_id and r["epoch"] in wanted]
        return {(r["topic"], r["partition"], r["offset"]): (r["decision"], r["reason"])
                for r in sorted(rows, key=lambda r: r["commit_version"])}

    def maintain(self, horizons: Mapping[str, int]) -> None:
        """Keep only each record's latest decision, and none for epochs below the ledger's horizon."""
        def rewrite(snapshot: Snapshot) -> pa.Table | None:
            rows = snapshot.rows()
            latest: dict[tuple[Any, ...], dict[str, Any]] = {}
            for r in sorted(rows, key=lambda r: r["commit_version"]):
                if r["epoch"] >= horizons.get(r["query_id"], r["epoch"]):
                    latest[(r["query_id"], r["epoch"], r["topic"], r["partition"], r["offset"])] = r
            if len(latest) == len(rows):
                return None
            return pa.Table.from_pylist(list(latest.values()), schema=DECISIONS_SCHEMA)

        self.table.maintain(rewrite)
