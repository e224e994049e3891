"""One Delta table under the state root: lazy creation, schema check, cached reads, compare-and-swap writes.

Why cached reads: the driver reads the ledger every micro-batch, and a table that gains one small
data file per commit costs ~0.7 ms per file to scan from scratch. Data files are immutable, so
each is read once and kept until it leaves the snapshot (compaction); a read costs an incremental
log update plus the files added since the last read.

Why compare-and-swap: every write is planned against the version just read and committed with
``max_commit_retries=0``, so a concurrent commit makes it fail (CommitFailedError) instead of
landing on state it never saw. The plan is then recomputed on the new version. That single rule
makes read-modify-write updates (share-partition state), "first writer wins" (ledger epochs),
"skip what is already there" (dead letters) and whole-table rewrites (maintenance) safe with
any number of writers, in one process or many.

Why no post-commit hooks: delta-rs checkpoints a table after every 100th commit and then cleans
its log up, inside the commit call that landed. Building that checkpoint reads the log since the
last one, which another process's cleanup may be deleting at that moment: the commit then raises
FileNotFoundError although it landed, and its writer takes a landed acquisition or settle for a
failed one (reproduced with one writer and one maintaining process: a dozen errors a minute; none
with the hooks off). Every commit here turns them off, and maintenance, which runs anyway, is the
only one to checkpoint and clean up, in its own thread and never inside a commit.

Why a retention per table: internal state needs no past, so its tables vacuum replaced files at
once and keep one minute of log. Tables users read (dead letters) keep Delta's retention instead,
so a reader of an older version, a Delta stream among them, keeps working across maintenance.

Why a format version per table: a state outlives the release that wrote it. Every table is
created with its format version in the table property ``sharegroup.formatVersion`` (tables made
before versions have none: version 1), and one that another release made in a format this one
does not read is refused when opened, before its schema is even looked at. A table that gains
the columns of a newer format version says so with the write that adds them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Schema, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import AddAction

from state_store.errors import StateStoreError
from state_store.format_version import FormatVersion
from state_store.redaction import redact_location
from state_store.storage_errors import storage_problem

__all__ = ["FORMAT_PROPERTY", "ORPHAN_RETENTION_HOURS", "TABLE_FORMAT", "USER_DATA_RETENTION", "Footprint", "Piece",
           "Retention", "Snapshot", "StateTable", "Write", "local_path", "table_uri"]

#: Concurrent commits a write outlasts before giving up (each lost race costs one re-plan).
MAX_COMMIT_ATTEMPTS = 500
#: Files no commit references (a writer lost a race after writing them) are deleted after this long,
#: so a file a concurrent writer has written but not yet committed is never taken from under it.
ORPHAN_RETENTION_HOURS = 1

#: The table property a state table keeps its format version in (Delta readers ignore properties they do not know).
FORMAT_PROPERTY = "sharegroup.formatVersion"
#: The format of a state table: its schema and what its rows mean. A table whose format changes in a way earlier
#: releases cannot read takes a version of its own (``StateTable``'s ``table_format``).
TABLE_FORMAT = FormatVersion(current=1)

#: Every commit of a state table: no checkpoint, no log cleanup inside the commit (see the module's docstring).
_NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
#: How often a table is opened afresh when its log changed under the read (another process's cleanup).
_OPEN_ATTEMPTS = 5
_LOG_RETENTION = "delta.logRetentionDuration"
_FILE_RETENTION = "delta.deletedFileRetentionDuration"


@dataclass(frozen=True)
class Retention:
    """How long a table keeps what readers of its older versions need.

    ``log``: how long log entries outlive the checkpoint covering them (``delta.logRetentionDuration``).
    ``removed_files``: how long data files that compaction or a rewrite replaced stay on storage
    before vacuum deletes them (``delta.deletedFileRetentionDuration``); files no commit references
    go after ORPHAN_RETENTION_HOURS or this, whichever is longer.

    ``minimum`` False (internal state): exactly these, written when the table is created (a table
    an earlier version made gets ``removed_files`` before this process writes or maintains it);
    vacuum uses them whatever the table says. The table's own ``removed_files`` matters to its
    checkpoints, which keep a replaced file's tombstone that long: with Delta's default of a week,
    every vacuum of a table overwritten each batch listed, and deleted again, a week of files.
    ``minimum`` True (user data): these are floors kept in the
    table's own properties: a table that has shorter ones (made by an earlier version, or by hand)
    is raised to them before this process writes or maintains it, longer ones are kept, and vacuum
    and log cleanup follow the table's properties, as Spark's VACUUM does.

    ``compact_at_files``: maintenance compacts once the table has this many data files. Every
    compaction rewrites the small files, the last compaction's output among them, and the files
    it replaces stay for ``removed_files``: with days of retention, compacting at every run would
    keep a copy of the table per run.
    """

    log: timedelta
    removed_files: timedelta
    minimum: bool = False
    compact_at_files: int = 2

    @classmethod
    def state(cls, log: timedelta = timedelta(minutes=1)) -> Retention:
        """Internal state: no time travel; replaced files are vacuumed at once, the log kept ``log``."""
        return cls(log=log, removed_files=timedelta(0))

    def configuration(self) -> dict[str, str]:
        """The retention properties a new table is created with."""
        return {_LOG_RETENTION: _interval(self.log), _FILE_RETENTION: _interval(self.removed_files)}


#: Delta's defaults (30 days of log, 7 days of replaced files), for tables that hold users' data.
USER_DATA_RETENTION = Retention(log=timedelta(days=30), removed_files=timedelta(days=7), minimum=True,
                                compact_at_files=32)

_UNITS = {"nanosecond": timedelta(microseconds=0.001), "microsecond": timedelta(microseconds=1),
          "millisecond": timedelta(milliseconds=1), "second": timedelta(seconds=1), "minute": timedelta(minutes=1),
          "hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}


def _interval(span: timedelta) -> str:
    """A duration in Delta's table-property form: ``interval 30 days``, ``interval 60 seconds``."""
    if span and span % timedelta(days=1) == timedelta(0):
        return f"interval {span // timedelta(days=1)} days"
    return f"interval {int(span.total_seconds())} seconds"


def _parse_interval(text: str | None) -> timedelta | None:
    """A Delta duration property as a timedelta; None when absent or not in a form this reads."""
    match = re.fullmatch(r"\s*(?:interval\s+)?(\d+)\s*([a-z]+?)s?\s*", (text or "").lower())
    if match is None or match.group(2) not in _UNITS:
        return None
    return int(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True)
class Write:
    """What a planned commit writes: rows appended, or rows replacing those matching ``predicate``."""

    data: pa.Table
    mode: Literal["append", "overwrite"] = "append"
    predicate: str | None = None


@dataclass(frozen=True)
class Footprint:
    """Size of a table's current snapshot: live data files and their bytes."""

    version: int | None
    files: int
    bytes: int


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


def table_uri(root: str, name: str) -> str:
    """``root/name`` for a local path or a URI (s3://, abfss://, file://, ...)."""
    return f"{root.rstrip('/')}/{name}" if "://" in root else os.path.join(root, name)


def local_path(uri: str) -> str | None:
    """The filesystem path of a local table, or None for an object store."""
    if "://" not in uri:
        return os.path.abspath(uri)
    parsed = urlparse(uri)
    return parsed.path if parsed.scheme == "file" else None


def file_in_the_way(path: str) -> str | None:
    """The first part of ``path`` that exists as something other than a directory, if any."""
    probe = path
    while True:
        if os.path.lexists(probe):
            return None if os.path.isdir(probe) else probe
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent


def _reason(exc: BaseException) -> str:
    """delta-rs messages carry a backtrace after the first line; the first line is the reason."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _describe(schema: Schema) -> str:
    return ", ".join(f"{f.name} {_type_name(f.type)}" for f in schema.fields)


def _type_name(kind: Any) -> str:
    if hasattr(kind, "element_type"):
        return f"array<{_type_name(kind.element_type)}>"
    if hasattr(kind, "fields"):
        return "struct<" + ", ".join(f"{f.name} {_type_name(f.type)}" for f in kind.fields) + ">"
    return str(getattr(kind, "type", kind))


class StateTable:
    """A Delta table holding one kind of state, created by its first write.

    ``retention`` is what the table keeps for readers of older versions (internal state: nothing).
    ``added_columns`` names columns of ``schema`` that later versions of the code added, last and
    nullable: a table written before them still opens, reads them as null, and gains them (a
    schema merge) with its next write, which also raises its format version to ``table_format``'s
    current one (a release that reads only the earlier one then refuses it by its version).
    """

    def __init__(self, root: str, name: str, schema: pa.Schema, *,
                 storage_options: dict[str, str] | None = None,
                 retention: Retention | None = None, added_columns: Sequence[str] = (),
                 table_format: FormatVersion = TABLE_FORMAT):
        self.name = name
        self.uri = table_uri(root, name)
        self.shown = redact_location(self.uri)  # for messages: no credentials, no signed query string
        self.schema = schema
        self._local = local_path(self.uri)
        self._storage_options = storage_options
        self.retention = retention or Retention.state()
        self._format = table_format
        self._configuration = {**self.retention.configuration(), FORMAT_PROPERTY: str(table_format.current)}
        tail = schema.names[len(schema.names) - len(added_columns):]
        if list(added_columns) != tail or any(not schema.field(c).nullable for c in added_columns):
            raise ValueError(f"added columns {list(added_columns)} must be the last, nullable, columns of "
                             f"{schema.names}")
        self._added_columns = tuple(added_columns)
        self._missing_columns: tuple[str, ...] = ()  # added columns the table at hand does not have yet
        self._stale_format = False  # the table at hand has the added columns but an earlier format version
        self._retention_kept = False  # the table's own properties are checked once
        self._dt: DeltaTable | None = None
        self._existed = False  # opened once: from then on its absence is an error, not "not created yet"
        self._fs: pafs.FileSystem | None = None
        self._pieces: dict[str, Piece] = {}
        self._own_append: tuple[int, pa.Table] | None = None  # (version, rows) of our last append
        #: commits this instance re-planned because another writer committed first (``make bench`` reports them)
        self.lost_races = 0

    # -- reading -----------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The latest committed rows (an empty snapshot while the table does not exist)."""
        return self._sync(self._open())

    def footprint(self) -> Footprint:
        dt = self._open()
        if dt is None:
            return Footprint(None, 0, 0)
        sizes = pa.table(dt.get_add_actions(flatten=False)).column("size_bytes").to_pylist()
        return Footprint(dt.version(), len(sizes), sum(sizes))

    # -- writing -----------------------------------------------------------------------------
    def commit(self, plan: Callable[[Snapshot], Write | None]) -> int | None:
        """Plan a write on the latest snapshot and commit it only onto that version; re-plan on a race.

        Returns the committed version, or None when ``plan`` found nothing to write.
        """
        for attempt in range(MAX_COMMIT_ATTEMPTS):
            dt = self._open() or self._create()
            try:
                self._keep_retention(dt)
            except CommitFailedError:
                self.lost_races += 1
                time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
                continue
            except (DeltaError, OSError) as exc:
                raise self._error("cannot raise the retention of", exc) from exc
            snapshot = self._sync(dt)
            write = plan(snapshot)
            if write is None:
                return None
            data = write.data.select(self.schema.names).cast(self.schema)
            merge = bool(self._missing_columns)
            schema_mode: Literal["merge"] | None = "merge" if merge else None
            cas = CommitProperties(max_commit_retries=0)
            try:
                if write.mode == "append":
                    write_deltalake(dt, data, mode="append", schema_mode=schema_mode, commit_properties=cas,
                                    post_commithook_properties=_NO_HOOKS)
                elif write.predicate is None and not merge:
                    self._replace(dt, data, cas)
                else:
                    write_deltalake(dt, data, mode="overwrite", predicate=write.predicate, schema_mode=schema_mode,
                                    commit_properties=cas, post_commithook_properties=_NO_HOOKS)
            except CommitFailedError:
                self.lost_races += 1
                time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))  # spread out the racers
                continue
            except (DeltaError, OSError, pa.ArrowException) as exc:
                raise self._error("cannot write", exc) from exc
            if merge:
                self._missing_columns = ()
            if merge or self._stale_format:
                self._raise_format(dt)
            if write.mode == "append":
                self._own_append = (snapshot.next_version, data)
            return snapshot.next_version
        raise StateStoreError(f"gave up writing the {self.name} table at {self.shown}: "
                              f"{MAX_COMMIT_ATTEMPTS} concurrent commits won the race first")

    def maintain(self, rewrite: Callable[[Snapshot], pa.Table | None] | None = None) -> None:
        """Keep the table small: optional rewrite, compaction, vacuum, checkpoint, log cleanup.

        ``rewrite`` returns the rows the table should hold instead (or None to keep it as is);
        it is a compare-and-swap commit like any other, so no concurrent write is lost. A
        compaction that loses a commit race is left to the next run; vacuum and the checkpoint
        commit nothing, so concurrent writers cannot stop them (see ``_expired_files``). Log
        entries go after the log retention.
        """
        if self._open() is None:
            return
        if rewrite is not None:
            self.commit(lambda s: None if (rows := rewrite(s)) is None else Write(rows, mode="overwrite"))
        dt = self._open()
        assert dt is not None
        try:
            self._keep_retention(dt)  # before anything is cleaned up by a shorter setting
            if len(dt.file_uris()) >= self.retention.compact_at_files:
                with contextlib.suppress(CommitFailedError):  # a concurrent writer won: the next run compacts
                    dt.optimize.compact(post_commithook_properties=_NO_HOOKS)
                dt.update_incremental()
            self._delete(self._expired_files(dt))
            dt.create_checkpoint()  # of the version vacuumed: later tombstones stay in the log for the next run
            dt.cleanup_metadata()
        except CommitFailedError:
            return  # raising the retention lost a race; the next run raises it first
        except FileNotFoundError as exc:
            if not _log_entry(exc):
                raise self._error("cannot maintain", exc) from exc
            return  # another member's maintenance cleaned the log up under this one's checkpoint: it did the work
        except (DeltaError, OSError) as exc:
            raise self._error("cannot maintain", exc) from exc

    def _replace(self, dt: DeltaTable, data: pa.Table, cas: CommitProperties) -> None:
        """Replace every row with ``data`` in one commit onto ``dt``'s version, from a data file written here.

        Why not ``write_deltalake``: a whole-table rewrite (maintenance's fold of the ledger) takes long enough
        to lose its race to the batches' appends, and every lost attempt left a copy of the whole table that no
        commit references and vacuum may delete only after ORPHAN_RETENTION_HOURS: the sixth 2-hour soak's
        ledger held 943 B on disk beyond its snapshot per live row at its end, 663 B an hour earlier. Writing
        the file here names it, so a lost race deletes it at once (a commit that failed otherwise may have
        landed, and keeps it).
        """
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        if self._local is not None:
            pq.write_table(data, os.path.join(self._local, name), compression="snappy")
            size = os.path.getsize(os.path.join(self._local, name))
        else:
            pq.write_table(data, name, filesystem=self._filesystem(), compression="snappy")
            size = self._filesystem().get_file_info(name).size
        add = AddAction(path=name, size=size, partition_values={}, modification_time=int(time.time() * 1000),
                        data_change=True, stats=json.dumps({"numRecords": data.num_rows}))
        try:
            dt.create_write_transaction([add], mode="overwrite", schema=dt.schema(), commit_properties=cas,
                                        post_commithook_properties=_NO_HOOKS)
        except CommitFailedError:
            self._delete([name])
            raise

    def _expired_files(self, dt: DeltaTable) -> list[str]:
        """What vacuum would delete: replaced files after the table's retention (internal state: at once), files
        no commit references (written by losers of a commit race) after ORPHAN_RETENTION_HOURS or that
        retention, whichever is longer.

        Why a dry run: delta-rs's vacuum records itself in a commit, and that commit loses to any concurrent
        overwrite ("a concurrent transaction deleted data this operation read"). Under members that commit
        every batch it lost every time, and a table whose vacuum never lands was never checkpointed either:
        the third 2-hour soak's share_state log kept all of its 21,760 commits. Delta's protocol makes the
        vacuum commit optional (it is commitInfo only), so the files are listed here and deleted without one.
        """
        if self.retention.minimum:
            # the table's deletedFileRetentionDuration (at least the floor, above an hour) for replaced
            # files and unreferenced ones alike; a full vacuum keeps a replaced file its whole retention
            return dt.vacuum(dry_run=True, full=True)
        hours = _hours(self.retention.removed_files)
        replaced = dt.vacuum(retention_hours=hours, enforce_retention_duration=False, dry_run=True)
        unreferenced = dt.vacuum(retention_hours=max(ORPHAN_RETENTION_HOURS, hours),
                                 enforce_retention_duration=False, dry_run=True, full=True)
        return sorted(set(replaced) | set(unreferenced))

    def _delete(self, paths: Sequence[str]) -> None:
        """Delete data files (paths relative to the table); one another maintainer deleted first is gone already."""
        for path in paths:
            try:
                if self._local is not None:
                    os.remove(os.path.join(self._local, unquote(path)))
                else:
                    self._filesystem().delete_file(path)
            except FileNotFoundError:
                pass

    # -- internals ---------------------------------------------------------------------------
    def _keep_retention(self, dt: DeltaTable) -> None:
        """Set the table's retention properties this process relies on, once per process, before its first
        write or maintenance.

        A ``minimum`` retention raises properties below its floors: an earlier version created dead letter
        tables with one minute of log, and its writers may still clean the log up after delta-rs's automatic
        checkpoints. Internal state gets its ``removed_files``: earlier versions left Delta's week of
        tombstones in its checkpoints. A lost commit race raises CommitFailedError; the caller tries again.
        """
        if self._retention_kept:
            return
        config = dt.metadata().configuration
        raise_to = {}
        for key, wanted in self.retention.configuration().items():
            have = _parse_interval(config.get(key))
            if self.retention.minimum:
                change = have is not None and have < _parse_interval(wanted)  # type: ignore[operator]
            else:
                change = key == _FILE_RETENTION and have != self.retention.removed_files
            if change:
                raise_to[key] = wanted
        if raise_to:
            dt.alter.set_table_properties(raise_to, commit_properties=CommitProperties(max_commit_retries=0),
                                          post_commithook_properties=_NO_HOOKS)
            dt.update_incremental()
        self._retention_kept = True

    def _raise_format(self, dt: DeltaTable) -> None:
        """Record the current format version in a table that holds its columns now (a schema merge added them),
        retried over concurrent commits: until it is recorded, a release that reads only the earlier version
        refuses the table as another schema instead of by its version."""
        for attempt in range(MAX_COMMIT_ATTEMPTS):
            try:
                dt.update_incremental()
                if dt.metadata().configuration.get(FORMAT_PROPERTY) == str(self._format.current):
                    break
                dt.alter.set_table_properties({FORMAT_PROPERTY: str(self._format.current)},
                                              raise_if_not_exists=False,  # our property: Delta does not know it
                                              commit_properties=CommitProperties(max_commit_retries=0),
                                              post_commithook_properties=_NO_HOOKS)
                break
            except CommitFailedError:
                self.lost_races += 1
                time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
            except (DeltaError, OSError) as exc:
                raise self._error("cannot record the format version of", exc) from exc
        self._stale_format = False

    def _open(self) -> DeltaTable | None:
        """The table at its latest version, None if it was never created; clear errors otherwise."""
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
        if self._local is not None:
            self._check_local_path()
            if not self._has_files():
                self._check_not_deleted()
                return None
        try:
            dt = self._load()
        except TableNotFoundError as exc:
            if self._local is None:
                self._check_not_deleted()
                return None
            raise StateStoreError(
                f"the {self.name} table at {self.shown} is missing: the directory holds files but no Delta "
                f"commit in _delta_log ({_reason(exc)}); move it away or use another stateLocation") from exc
        except (DeltaError, OSError, ValueError) as exc:
            problem = storage_problem(exc)  # a refused credential or a dead endpoint is no corruption
            if problem is not None:
                raise StateStoreError(f"cannot open the {self.name} table at {self.shown}: {problem} "
                                      f"({_reason(exc)})") from exc
            raise StateStoreError(f"the {self.name} table at {self.shown} is corrupt: its Delta log cannot be "
                                  f"read ({_reason(exc)})") from exc
        # first: a newer release's table may well have another schema, and the version says why
        found = self._format.read(dt.metadata().configuration.get(FORMAT_PROPERTY),
                                  f"the {self.name} table at {self.shown}", "start afresh on a new location")
        expected = Schema.from_arrow(self.schema)
        self._missing_columns = self._lacks(dt.schema())
        # added columns there, their version not recorded (a writer stopped between the two commits)
        self._stale_format = found < self._format.current and bool(self._added_columns) and not self._missing_columns
        if dt.schema() != expected and not self._missing_columns:
            raise StateStoreError(
                f"the {self.name} table at {self.shown} has another schema: found columns "
                f"({_describe(dt.schema())}), expected ({_describe(expected)}); point stateLocation at a new "
                "directory")
        self._dt = dt
        self._existed = True
        return dt

    def _load(self) -> DeltaTable:
        """The table at its latest version, read afresh. A log entry that vanished under the read is another
        process's cleanup (a checkpoint newer than the entry came first): read again, from that checkpoint."""
        attempt = 1
        while True:
            try:
                return DeltaTable(self.uri, storage_options=self._storage_options)
            except FileNotFoundError as exc:
                if attempt == _OPEN_ATTEMPTS or not _log_entry(exc):
                    raise
                attempt += 1

    def _lacks(self, found: Schema) -> tuple[str, ...]:
        """The added columns a table of ``found`` schema lacks, if it is this table's schema without them."""
        names = {f.name for f in found.fields}
        missing = tuple(c for c in self._added_columns if c not in names)
        if not missing:
            return ()
        earlier = pa.schema([f for f in self.schema if f.name not in missing])
        return missing if found == Schema.from_arrow(earlier) else ()

    def _check_not_deleted(self) -> None:
        """No table: fine before its first write, an error once this process has seen it."""
        if self._existed:
            raise StateStoreError(f"the {self.name} table at {self.shown} is missing: it was deleted while in "
                                  "use")

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
        if self._local is None:
            return None
        log = os.path.join(self._local, "_delta_log")
        if not os.path.isdir(log):
            return "gone"
        if os.path.exists(os.path.join(log, f"{dt.version() + 1:020d}.json")):
            return "behind"
        return "behind" if _checkpointed_past(log, dt.version()) else "latest"

    def _create(self) -> DeltaTable:
        created_dir = self._local is not None and not os.path.exists(self._local)
        try:
            DeltaTable.create(self.uri, self.schema, mode="ignore", configuration=self._configuration,
                              storage_options=self._storage_options, raise_if_key_not_exists=False,  # our property
                              commit_properties=CommitProperties(max_commit_retries=0))
        except CommitFailedError:
            pass  # another writer created it a moment ago
        except (DeltaError, OSError) as exc:
            if created_dir and self._local is not None:
                shutil.rmtree(self._local, ignore_errors=True)  # leave nothing half-made behind
            raise self._error("cannot create", exc) from exc
        dt = self._open()
        if dt is None:
            raise StateStoreError(f"created the {self.name} table at {self.shown} but cannot find it now")
        return dt

    def _check_local_path(self) -> None:
        assert self._local is not None
        blocker = file_in_the_way(self._local)
        if blocker is not None:
            raise StateStoreError(f"cannot use {self.shown} for the {self.name} table: {blocker} is a file, "
                                  "not a directory")

    def _has_files(self) -> bool:
        """Whether the local table directory holds any file (empty directories count as absent)."""
        assert self._local is not None
        return any(files for _, _, files in os.walk(self._local))

    def _sync(self, dt: DeltaTable | None) -> Snapshot:
        """Read data files that joined the snapshot since the last sync; forget those that left it."""
        if dt is None:
            self._pieces = {}
            return Snapshot(None, (), self.schema)
        try:
            self._pieces = self._live_pieces(dt)
        except (OSError, pa.ArrowException):
            dt.update_incremental()  # a file was vacuumed after compaction: its replacement is newer
            try:
                self._pieces = self._live_pieces(dt)
            except (OSError, pa.ArrowException) as exc:
                raise self._error("cannot read", exc) from exc
        return Snapshot(dt.version(), tuple(self._pieces.values()), self.schema)

    def _live_pieces(self, dt: DeltaTable) -> dict[str, Piece]:
        paths = pa.table(dt.get_add_actions(flatten=False)).column("path").to_pylist()
        own, self._own_append = self._own_append, None
        added = [p for p in paths if p not in self._pieces]
        if own is not None and own[0] == dt.version() and len(added) == 1:
            # our append won a compare-and-swap on the cached version and nothing followed it:
            # the one new file holds exactly the rows we wrote, no need to read them back
            self._pieces[added[0]] = Piece(own[1])
        return {p: self._pieces.get(p) or self._read_piece(p) for p in paths}

    def _error(self, what: str, exc: BaseException) -> StateStoreError:
        problem = storage_problem(exc)
        cause = "" if problem is None else f"{problem}: "
        return StateStoreError(f"{what} the {self.name} table at {self.shown}: "
                               f"{cause}{_reason(exc).replace(self.uri, self.shown)}")

    def _read_piece(self, path: str) -> Piece:
        if self._local is not None:
            return Piece(self._conform(pq.read_table(os.path.join(self._local, unquote(path)))))
        return Piece(self._conform(pq.read_table(path, filesystem=self._filesystem())))

    def _filesystem(self) -> pafs.FileSystem:
        """The table's store as a pyarrow filesystem rooted at the table (delta-rs's own object store)."""
        if self._fs is None:
            self._fs = pafs.PyFileSystem(DeltaStorageHandler(self.uri, self._storage_options))
        return self._fs

    def _conform(self, table: pa.Table) -> pa.Table:
        """A data file's rows in the table's schema; added columns a file written before them lacks are null."""
        if table.column_names != self.schema.names:
            table = pa.table([table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
                              for f in self.schema], names=self.schema.names)
        return table.cast(self.schema)


def _log_entry(exc: BaseException) -> bool:
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


def _hours(span: timedelta) -> int:
    """Whole hours, rounded up: vacuum takes hours, and must never keep a file for less than asked."""
    return -(-span // timedelta(hours=1))
