"""Opening one state table: its latest version, the format and schema checks, and its creation by the first write.

Why a format version per table: a state outlives the release that wrote it. Every table is
created with its format version in the table property ``sharegroup.formatVersion`` (tables made
before versions have none: version 1), and one that another release made in a format this one
does not read is refused when opened, before its schema is even looked at. A table that gains
the columns of a newer format version says so with the write that adds them.

Why an opener that stays: the table is read every micro-batch, so it is opened once and then only
brought to its latest version (a local one after two stats and a small read, see ``_local_log_state``),
and opened afresh when another process's log cleanup took what it relied on. Whatever is found instead of
a table (nothing yet, a file in the way, files without a Delta log, an unreadable log, a refused
credential, another schema) is told apart in the error, so that the user knows what to do.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from typing import Any, Literal

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Schema
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from state_store.errors import StateStoreError
from state_store.format_version import FormatVersion
from state_store.storage_errors import storage_problem
from state_store.table_files import TableFiles, file_in_the_way, reason

__all__ = ["FORMAT_PROPERTY", "TABLE_FORMAT", "TableOpener", "log_entry"]

#: The table property a state table keeps its format version in (Delta readers ignore properties they do not know).
FORMAT_PROPERTY = "sharegroup.formatVersion"
#: The format of a state table: its schema and what its rows mean. A table whose format changes in a way earlier
#: releases cannot read takes a version of its own (``StateTable``'s ``table_format``).
TABLE_FORMAT = FormatVersion(current=1)

#: How often a table is opened afresh when its log changed under the read (another process's cleanup).
_OPEN_ATTEMPTS = 5


class TableOpener:
    """One table of ``schema``, opened and kept open; created (with ``configuration`` as its properties) on demand.

    ``added_columns`` names columns of ``schema`` that later versions of the code added, last and nullable.
    ``missing_columns``: the added columns the table at hand does not have yet (the next write merges them in).
    ``stale_format``: the table at hand has the added columns but an earlier format version than
    ``table_format``'s current one (a writer stopped between the two commits).
    """

    def __init__(self, files: TableFiles, schema: pa.Schema, *, configuration: dict[str, str],
                 added_columns: Sequence[str], table_format: FormatVersion):
        tail = schema.names[len(schema.names) - len(added_columns):]
        if list(added_columns) != tail or any(not schema.field(c).nullable for c in added_columns):
            raise ValueError(f"added columns {list(added_columns)} must be the last, nullable, columns of "
                             f"{schema.names}")
        self._files = files
        self._schema = schema
        self._configuration = configuration
        self._added_columns = tuple(added_columns)
        self._format = table_format
        self.missing_columns: tuple[str, ...] = ()
        self.stale_format = False
        self._dt: DeltaTable | None = None
        self._existed = False  # opened once: from then on its absence is an error, not "not created yet"

    def open(self) -> DeltaTable | None:
        """The table at its latest version, None if it was never created; clear errors otherwise."""
        files = self._files
        if self._dt is not None:
            log = self._local_log_state(self._dt)
            if log == "latest":
                return self._dt
            if log != "gone":
                try:
                    self._dt.update_incremental()
                    return self._dt
                except (DeltaError, OSError):
                    pass  # log files it relied on were cleaned up, or worse: open afresh to tell
            self._dt = None
        if files.local is not None:
            self._check_local_path()
            if not self._has_files():
                self._check_not_deleted()
                return None
        try:
            dt = self._load()
        except TableNotFoundError as exc:
            if files.local is None:
                self._check_not_deleted()
                return None
            raise StateStoreError(
                f"the {files.name} table at {files.shown} is missing: the directory holds files but no Delta "
                f"commit in _delta_log ({reason(exc)}); move it away or use another stateLocation") from exc
        except (DeltaError, OSError, ValueError) as exc:
            problem = storage_problem(exc)  # a refused credential or a dead endpoint is no corruption
            if problem is not None:
                raise StateStoreError(f"cannot open the {files.name} table at {files.shown}: {problem} "
                                      f"({reason(exc)})") from exc
            raise StateStoreError(f"the {files.name} table at {files.shown} is corrupt: its Delta log cannot be "
                                  f"read ({reason(exc)})") from exc
        # first: a newer release's table may well have another schema, and the version says why
        found = self._format.read(dt.metadata().configuration.get(FORMAT_PROPERTY),
                                  f"the {files.name} table at {files.shown}", "start afresh on a new location")
        expected = Schema.from_arrow(self._schema)
        self.missing_columns = self._lacks(dt.schema())
        # added columns there, their version not recorded (a writer stopped between the two commits)
        self.stale_format = found < self._format.current and bool(self._added_columns) and not self.missing_columns
        if dt.schema() != expected and not self.missing_columns:
            raise StateStoreError(
                f"the {files.name} table at {files.shown} has another schema: found columns "
                f"({_describe(dt.schema())}), expected ({_describe(expected)}); point stateLocation at a new "
                "directory")
        self._dt = dt
        self._existed = True
        return dt

    def create(self) -> DeltaTable:
        """Create the table (or find the one another writer created a moment ago) and open it."""
        files = self._files
        created_dir = files.local is not None and not os.path.exists(files.local)
        try:
            DeltaTable.create(files.uri, self._schema, mode="ignore", configuration=self._configuration,
                              storage_options=files.storage_options, raise_if_key_not_exists=False,  # our property
                              commit_properties=CommitProperties(max_commit_retries=0))
        except CommitFailedError:
            pass  # another writer created it a moment ago
        except (DeltaError, OSError) as exc:
            if created_dir and files.local is not None:
                shutil.rmtree(files.local, ignore_errors=True)  # leave nothing half-made behind
            raise files.error("cannot create", exc) from exc
        dt = self.open()
        if dt is None:
            raise StateStoreError(f"created the {files.name} table at {files.shown} but cannot find it now")
        return dt

    def _load(self) -> DeltaTable:
        """The table at its latest version, read afresh. A log entry that vanished under the read is another
        process's cleanup (a checkpoint newer than the entry came first): read again, from that checkpoint."""
        attempt = 1
        while True:
            try:
                return DeltaTable(self._files.uri, storage_options=self._files.storage_options)
            except FileNotFoundError as exc:
                if attempt == _OPEN_ATTEMPTS or not log_entry(exc):
                    raise
                attempt += 1

    def _lacks(self, found: Schema) -> tuple[str, ...]:
        """The added columns a table of ``found`` schema lacks, if it is this table's schema without them."""
        names = {f.name for f in found.fields}
        missing = tuple(c for c in self._added_columns if c not in names)
        if not missing:
            return ()
        earlier = pa.schema([f for f in self._schema if f.name not in missing])
        return missing if found == Schema.from_arrow(earlier) else ()

    def _check_not_deleted(self) -> None:
        """No table: fine before its first write, an error once this process has seen it."""
        if self._existed:
            raise StateStoreError(f"the {self._files.name} table at {self._files.shown} is missing: it was deleted "
                                  "while in use")

    def _local_log_state(self, dt: DeltaTable) -> Literal["latest", "behind", "gone"] | None:
        """For a local table: is ``dt`` the latest version, is a commit newer, or is the log gone?

        Two stats and a small read instead of a log update: delta-rs rebuilds its state on
        update_incremental after a write (~3 ms) even when nothing changed. None for object stores:
        there, ask delta-rs.

        A missing next commit alone does not make ``dt`` the latest: other writers may have gone
        on, checkpointed and cleaned the log up to past it (internal state keeps one minute of
        log), so the next commit's file is gone because it is old, not because it is yet to come.
        Cleanup deletes only what a checkpoint covers, and writes the checkpoint first, so a
        checkpoint newer than ``dt`` read after the commit was found missing tells the two apart.
        """
        if self._files.local is None:
            return None
        log = os.path.join(self._files.local, "_delta_log")
        if not os.path.isdir(log):
            return "gone"
        if os.path.exists(os.path.join(log, f"{dt.version() + 1:020d}.json")):
            return "behind"
        return "behind" if _checkpointed_past(log, dt.version()) else "latest"

    def _check_local_path(self) -> None:
        assert self._files.local is not None
        blocker = file_in_the_way(self._files.local)
        if blocker is not None:
            raise StateStoreError(f"cannot use {self._files.shown} for the {self._files.name} table: {blocker} is a "
                                  "file, not a directory")

    def _has_files(self) -> bool:
        """Whether the local table directory holds any file (empty directories count as absent)."""
        assert self._files.local is not None
        return any(files for _, _, files in os.walk(self._files.local))


def log_entry(exc: BaseException) -> bool:
    """Whether ``exc`` is about a file of a ``_delta_log`` (a commit or a checkpoint), not a data file."""
    return "_delta_log/" in str(exc)


def _checkpointed_past(log: str, version: int) -> bool:
    """Whether a local log's latest checkpoint (its ``_last_checkpoint`` hint) is newer than ``version``.

    An unreadable hint counts as newer: the caller then asks delta-rs, which is never wrong, only slower.
    """
    try:
        with open(os.path.join(log, "_last_checkpoint"), encoding="utf-8") as hint:
            return int(json.load(hint)["version"]) > version
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError):
        return True


def _describe(schema: Schema) -> str:
    return ", ".join(f"{f.name} {_type_name(f.type)}" for f in schema.fields)


def _type_name(kind: Any) -> str:
    if hasattr(kind, "element_type"):
        return f"array<{_type_name(kind.element_type)}>"
    if hasattr(kind, "fields"):
        return "struct<" + ", ".join(f"{f.name} {_type_name(f.type)}" for f in kind.fields) + ">"
    return str(getattr(kind, "type", kind))
