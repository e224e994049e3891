"""The ``progress`` table: the source's counters, one row per change, readable by any Delta reader.

The driver's Python worker has no SparkSession and Spark's progress events carry no
source-specific numbers, so the counters that tests, the demo and dashboards need
(acknowledged by type, failed acks, deduplicated redeliveries, lock headroom) live here.
Counters are cumulative per query run, so only each run's latest row matters; maintenance
drops the others.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from state_store.delta_table import Snapshot, StateTable, Write

__all__ = ["COUNTERS", "PROGRESS_SCHEMA", "ProgressTable"]

COUNTERS = ("acquired", "accepted", "released", "rejected", "ack_failures", "redeliveries_deduped",
            "dead_lettered", "epochs", "min_lock_headroom_ms")
PROGRESS_SCHEMA = pa.schema([("query_id", pa.string()), ("run_id", pa.string()),
                             ("written_at_ms", pa.int64()), *[(name, pa.int64()) for name in COUNTERS],
                             ("commit_version", pa.int64())])  # later commits win


class ProgressTable:
    """Counter rows per query run in the ``progress`` Delta table."""

    def __init__(self, table: StateTable):
        self.table = table

    def append(self, query_id: str, run_id: str, counters: Mapping[str, int]) -> None:
        row = {"query_id": query_id, "run_id": run_id, "written_at_ms": int(time.time() * 1000),
               **{name: None if counters[name] is None else int(counters[name]) for name in COUNTERS}}
        self.table.commit(lambda snapshot: Write(pa.Table.from_pylist(
            [{**row, "commit_version": snapshot.next_version}], schema=PROGRESS_SCHEMA)))

    def totals(self, query_id: str) -> dict[str, int]:
        """Counters summed over the query's runs (each run's latest row); empty before any row."""
        latest = _latest_per_run(r for r in self.table.snapshot().rows() if r["query_id"] == query_id)
        if not latest:
            return {}
        totals = {name: sum(r[name] or 0 for r in latest) for name in COUNTERS}
        headrooms = [r["min_lock_headroom_ms"] for r in latest if r["min_lock_headroom_ms"] is not None]
        totals["min_lock_headroom_ms"] = min(headrooms) if headrooms else None
        totals["runs"] = len(latest)
        return totals

    def maintain(self) -> None:
        """Keep each run's latest row only: earlier ones are superseded cumulative counters."""
        def rewrite(snapshot: Snapshot) -> pa.Table | None:
            rows = snapshot.rows()
            latest = _latest_per_run(rows)
            return None if len(latest) == len(rows) else pa.Table.from_pylist(latest, schema=PROGRESS_SCHEMA)

        self.table.maintain(rewrite)


def _latest_per_run(rows: Any) -> list[dict[str, Any]]:
    ordered = sorted(rows, key=lambda r: r["commit_version"])
    return list({(r["query_id"], r["run_id"]): r for r in ordered}.values())
