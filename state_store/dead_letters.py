"""Dead letters: rejected records, kept with their payload and why they were rejected.

A REJECTed record is archived by the share group and never delivered again, so this table is
the only place it survives. Appends are idempotent on (topic, partition, offset): the driver may
reject the same epoch again after a restart, and the record must still appear once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from state_store.delta_table import Snapshot, StateTable, Write

__all__ = ["DEAD_LETTERS_SCHEMA", "DeadLetters"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_TIME = pa.timestamp("us", tz="UTC")

DEAD_LETTERS_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("delivery_count", pa.int32()),
    pa.field("reason", pa.string()),
    pa.field("time", _TIME),
])


class DeadLetters:
    """Rejected records in the ``dead_letters`` Delta table."""

    def __init__(self, table: StateTable):
        self.table = table

    def append(self, rows: pa.Table | Sequence[dict[str, Any]]) -> None:
        """Add records not yet dead-lettered; ``time`` may be a datetime or epoch milliseconds.

        ``headers`` is a list of (key, value) pairs. Rows for a (topic, partition, offset) that is
        already in the table, or earlier in ``rows``, are skipped.
        """
        table = _normalize(rows)
        if table.num_rows == 0:
            return

        def plan(snapshot: Snapshot) -> Write | None:
            seen = set(_keys(snapshot.table()))
            keep = []
            for i, key in enumerate(_keys(table)):
                if key not in seen:
                    seen.add(key)
                    keep.append(i)
            return Write(table.take(keep)) if keep else None

        self.table.commit(plan)

    def read(self) -> pa.Table:
        return self.table.snapshot().table()

    def maintain(self) -> None:
        self.table.maintain()


def _keys(table: pa.Table) -> list[tuple[str, int, int]]:
    return list(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(),
                    table.column("offset").to_pylist(), strict=True))


def _normalize(rows: pa.Table | Sequence[dict[str, Any]]) -> pa.Table:
    if isinstance(rows, pa.Table):
        return _normalize_table(rows)
    return pa.Table.from_pylist([_normalize_row(r) for r in rows], schema=DEAD_LETTERS_SCHEMA)


def _normalize_row(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    if isinstance(out.get("time"), int):
        out["time"] = _EPOCH + timedelta(milliseconds=out["time"])
    out["headers"] = [h if isinstance(h, dict) else {"key": h[0], "value": h[1]}
                      for h in out.get("headers") or ()]
    return out


def _normalize_table(table: pa.Table) -> pa.Table:
    columns = []
    for field in DEAD_LETTERS_SCHEMA:
        if field.name not in table.column_names:
            if not field.nullable:
                raise ValueError(f"dead letter rows need a {field.name!r} column; got {table.column_names}")
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        if field.name == "time" and pa.types.is_integer(column.type):
            column = pc.multiply(column.cast(pa.int64()), 1000)  # epoch milliseconds -> microseconds
        columns.append(column.cast(field.type))
    return pa.Table.from_arrays(columns, schema=DEAD_LETTERS_SCHEMA)
