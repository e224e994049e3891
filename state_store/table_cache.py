"""The rows of one state table's latest version, each data file read once and kept while it is in the snapshot.

Why cached reads: the driver reads the ledger every micro-batch, and a table that gains one small
data file per commit costs ~0.7 ms per file to scan from scratch. Data files are immutable, so
each is read once and kept until it leaves the snapshot (compaction); a read costs an incremental
log update plus the files added since the last read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from state_store.table_files import TableFiles

__all__ = ["Piece", "ReadCache", "Snapshot"]


class Piece:
    """The rows of one immutable data file, with their Python form made on first use.

    Python rows cost far more memory than Arrow's: a reader that needs a few columns of every row
    (the ledger's statuses) asks for those, and for a whole row only where it needs one.
    """

    __slots__ = ("_rows", "table")

    def __init__(self, table: pa.Table):
        self.table = table
        self._rows: dict[tuple[str, ...] | None, list[dict[str, Any]]] = {}

    def rows(self, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        key = None if columns is None else tuple(columns)
        if key not in self._rows:
            self._rows[key] = (self.table if key is None else self.table.select(list(key))).to_pylist()
        return self._rows[key]

    def row(self, index: int) -> dict[str, Any]:
        """Every column of one row."""
        whole = self._rows.get(None)
        return whole[index] if whole is not None else self.table.slice(index, 1).to_pylist()[0]


class Snapshot:
    """The rows of one table version (``version`` None: the table does not exist yet)."""

    def __init__(self, version: int | None, pieces: tuple[Piece, ...], schema: pa.Schema):
        self.version = version
        self.pieces = pieces
        self._schema = schema

    @property
    def next_version(self) -> int:
        """The version a commit planned on this snapshot will have if it wins."""
        return 0 if self.version is None else self.version + 1

    def table(self) -> pa.Table:
        if not self.pieces:
            return self._schema.empty_table()
        return pa.concat_tables([p.table for p in self.pieces])

    def rows(self) -> list[dict[str, Any]]:
        return [row for piece in self.pieces for row in piece.rows()]

    def row_count(self) -> int:
        return sum(piece.table.num_rows for piece in self.pieces)


class ReadCache:
    """The data files of a table of ``schema`` read so far, by path, and the rows of this instance's last append."""

    def __init__(self, schema: pa.Schema, files: TableFiles):
        self._schema = schema
        self._files = files
        self._pieces: dict[str, Piece] = {}
        self._own_append: tuple[int, pa.Table] | None = None  # (version, rows) of our last append

    def appended(self, version: int, rows: pa.Table) -> None:
        """Our append of ``rows`` landed as ``version``: the next sync need not read them back."""
        self._own_append = (version, rows)

    def sync(self, dt: DeltaTable | None) -> Snapshot:
        """Read data files that joined the snapshot since the last sync; forget those that left it."""
        if dt is None:
            self._pieces = {}
            return Snapshot(None, (), self._schema)
        try:
            self._pieces = self._live_pieces(dt)
        except (OSError, pa.ArrowException):
            dt.update_incremental()  # a file was vacuumed after compaction: its replacement is newer
            try:
                self._pieces = self._live_pieces(dt)
            except (OSError, pa.ArrowException) as exc:
                raise self._files.error("cannot read", exc) from exc
        return Snapshot(dt.version(), tuple(self._pieces.values()), self._schema)

    def _live_pieces(self, dt: DeltaTable) -> dict[str, Piece]:
        paths = pa.table(dt.get_add_actions(flatten=False)).column("path").to_pylist()
        own, self._own_append = self._own_append, None
        added = [p for p in paths if p not in self._pieces]
        if own is not None and own[0] == dt.version() and len(added) == 1:
            # our append won a compare-and-swap on the cached version and nothing followed it:
            # the one new file holds exactly the rows we wrote, no need to read them back
            self._pieces[added[0]] = Piece(own[1])
        return {p: self._pieces.get(p) or Piece(self._conform(self._files.read(p))) for p in paths}

    def _conform(self, table: pa.Table) -> pa.Table:
        """A data file's rows in the table's schema; added columns a file written before them lacks are null."""
        if table.column_names != self._schema.names:
            table = pa.table([table.column(f.name) if f.name in table.column_names
                              else pa.nulls(table.num_rows, f.type) for f in self._schema], names=self._schema.names)
        return table.cast(self._schema)
