"""Dead letters: rejected records, kept with their payload, their group and why they were rejected.

A REJECTed record is archived by the share group and never delivered again, so this table is
the only place it survives. Appends are idempotent on (group_id, topic, partition, offset): the
driver may reject the same epoch again after a restart, and the record must still appear once;
two groups (queries) that share one ``deadLetterLocation`` and both reject a record each keep
their row.

The table is the user's data, not internal state, so it keeps Delta's retention
(USER_DATA_RETENTION): 30 days of log and 7 days for data files that compaction replaced.
Users read it with Spark or delta-rs, often as a stream (``spark.readStream.format("delta")``),
and such a reader needs the commits and files after the version it last read: a 0-hour vacuum
or a one-minute log would break it at the next maintenance. Compaction stays (each append is a
small file, and a cold start reads them all to skip what is already there), but only once the
table has 32 files: its commits change no data, so streams skip them, and the files it replaces
are kept the 7 days Delta promises readers, so compacting at every run would keep a copy of the
table per run. Never vacuuming is no option with compaction: every compaction would leave a
copy behind for good. Longer retention set on a user's table is kept; shorter (tables made by
earlier versions had one minute of log) is raised on the first write or maintenance.

Tables made before ``group_id`` existed gain the column (a Delta schema merge, metadata only)
with their next append; their rows read as group null. Such a row was written by some group,
not known: it stands for every group, so a record it holds is not appended again (after an
upgrade a query re-rejecting an epoch it rejected before must not keep the record twice). A
Delta stream running while the column is added may stop at it, as Delta streams do on a schema
change; started again from its checkpoint it reads on, the new rows with their group.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from state_store.delta_table import StateTable
from state_store.errors import StateStoreError
from state_store.redaction import redact_location
from state_store.table_cache import Snapshot
from state_store.table_commit import Write
from state_store.table_retention import USER_DATA_RETENTION

__all__ = ["ADDED_COLUMNS", "DEAD_LETTERS_SCHEMA", "DELIVERY_LIMIT_REASON", "DeadLetters"]

#: The reason a dead letter gives for a record the group archived at its delivery-count limit,
#: written alike by a query and by a worker that saw the archive.
DELIVERY_LIMIT_REASON = "the group's delivery count limit reached"

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
    # added after the first release, so last and nullable (tables from then gain it); new rows always have it
    pa.field("group_id", pa.string()),
])
#: Columns of DEAD_LETTERS_SCHEMA added after the first release: a table without them still opens.
ADDED_COLUMNS = ("group_id",)
#: Tables a groupLocation or a query's stateLocation holds beside its dead letters, one of which any has.
_STATE_TABLES = ("dead_letters", "ledger", "progress", "settings", "share_state")


class DeadLetters:
    """Rejected records in the ``dead_letters`` Delta table (or the user's ``deadLetterLocation``)."""

    def __init__(self, table: StateTable):
        self.table = table

    @classmethod
    def open(cls, root: str, name: str, *, storage_options: dict[str, str] | None = None) -> DeadLetters:
        """The dead letters table ``root/name``: user-data retention, and tables from earlier versions accepted."""
        return cls(StateTable(root, name, DEAD_LETTERS_SCHEMA, storage_options=storage_options,
                              retention=USER_DATA_RETENTION, added_columns=ADDED_COLUMNS))

    @classmethod
    def at(cls, location: str, *, storage_options: dict[str, str] | None = None) -> DeadLetters:
        """The dead letters table whose own location (a path or URI) is ``location``: a ``deadLetterLocation``."""
        trimmed = location.rstrip("/")
        if "://" in trimmed:
            root, _, name = trimmed.rpartition("/")
        else:
            root, name = os.path.split(os.path.abspath(trimmed))
        return cls.open(root, name, storage_options=storage_options)

    @classmethod
    def kept_at(cls, location: str, *, storage_options: dict[str, str] | None = None) -> DeadLetters:
        """The dead letters a location keeps: the table itself (a ``deadLetterLocation``), or the ``dead_letters``
        table beside a ``groupLocation``'s or a query's ``stateLocation``'s own. StateStoreError for a location that
        holds neither dead letters nor share-group state (a mistyped path would otherwise read as no dead letters)."""
        base = location.rstrip("/")
        if DeltaTable.is_deltatable(base, storage_options):
            return cls.at(location, storage_options=storage_options)
        if not any(DeltaTable.is_deltatable(f"{base}/{name}", storage_options) for name in _STATE_TABLES):
            raise StateStoreError(f"{redact_location(location)}: no dead letters and no share-group state here "
                                  "(give a groupLocation, a query's stateLocation or its deadLetterLocation)")
        return cls.open(base, "dead_letters", storage_options=storage_options)

    def append(self, rows: pa.Table | Sequence[dict[str, Any]]) -> int:
        """Add records not yet dead-lettered; ``time`` may be a datetime or epoch milliseconds. Returns how many
        rows were added (a record rejected again after its REJECT failed is kept once, and counted once).

        Every row needs ``group_id``, the share group (query) that rejected it. ``headers`` is a
        list of (key, value) pairs. Rows for a (group_id, topic, partition, offset) that is already
        in the table, or earlier in ``rows``, are skipped, and so are records the table holds in a
        row without a group (written before the column existed).
        """
        table = _normalize(rows)
        if table.num_rows == 0:
            return 0
        if table.column("group_id").null_count:
            raise ValueError("every dead letter row needs a group_id (the share group that rejected it)")

        added = 0

        def plan(snapshot: Snapshot) -> Write | None:
            nonlocal added
            seen = set(_keys(snapshot.table()))
            any_group = {key[1:] for key in seen if key[0] is None}
            keep = []
            for i, key in enumerate(_keys(table)):
                if key not in seen and key[1:] not in any_group:
                    seen.add(key)
                    keep.append(i)
            added = len(keep)  # as the attempt that lands planned it
            return Write(table.take(keep)) if keep else None

        self.table.commit(plan)
        return added

    def read(self) -> pa.Table:
        return self.table.snapshot().table()

    def maintain(self) -> None:
        self.table.maintain()


def _keys(table: pa.Table) -> list[tuple[str | None, str, int, int]]:
    return list(zip(table.column("group_id").to_pylist(), table.column("topic").to_pylist(),
                    table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))


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
