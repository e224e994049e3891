"""One Delta table under the state root: the class that ties a table's jobs together.

Opening it and checking its format and schema is state_store/table_open.py's job, its cached reads
state_store/table_cache.py's, the landing of a write state_store/table_commit.py's, its retention
state_store/table_retention.py's, a maintenance round state_store/table_maintenance.py's, and its
location and files state_store/table_files.py's. Two rules hold for all of them:

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
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from state_store.errors import StateStoreError
from state_store.format_version import FormatVersion
from state_store.table_cache import ReadCache, Snapshot
from state_store.table_commit import MAX_COMMIT_ATTEMPTS, Write, land, record_format
from state_store.table_files import TableFiles
from state_store.table_maintenance import clean_up
from state_store.table_open import FORMAT_PROPERTY, TABLE_FORMAT, TableOpener, log_entry
from state_store.table_retention import Retention, keep_retention

__all__ = ["Footprint", "StateTable"]


@dataclass(frozen=True)
class Footprint:
    """Size of a table's current snapshot: live data files and their bytes."""

    version: int | None
    files: int
    bytes: int


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
        self._files = TableFiles(root, name, storage_options)
        self.uri = self._files.uri
        self.shown = self._files.shown  # for messages: no credentials, no signed query string
        self.schema = schema
        self.retention = retention or Retention.state()
        self._format = table_format
        self._opener = TableOpener(
            self._files, schema, added_columns=added_columns, table_format=table_format,
            configuration={**self.retention.configuration(), FORMAT_PROPERTY: str(table_format.current)})
        self._retention_kept = False  # the table's own properties are checked once
        self._cache = ReadCache(schema, self._files)
        #: commits this instance re-planned because another writer committed first (``make bench`` reports them)
        self.lost_races = 0

    # -- reading -----------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The latest committed rows (an empty snapshot while the table does not exist)."""
        return self._cache.sync(self._opener.open())

    def footprint(self) -> Footprint:
        dt = self._opener.open()
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
            dt = self._opener.open() or self._opener.create()
            try:
                self._keep_retention(dt)
            except CommitFailedError:
                self._lost_race(attempt)
                continue
            except (DeltaError, OSError) as exc:
                raise self._files.error("cannot raise the retention of", exc) from exc
            snapshot = self._cache.sync(dt)
            write = plan(snapshot)
            if write is None:
                return None
            data = write.data.select(self.schema.names).cast(self.schema)
            merge = bool(self._opener.missing_columns)
            try:
                land(dt, write, data, merge, self._files)
            except CommitFailedError:
                self._lost_race(attempt)
                continue
            except (DeltaError, OSError, pa.ArrowException) as exc:
                raise self._files.error("cannot write", exc) from exc
            if merge:
                self._opener.missing_columns = ()
            if merge or self._opener.stale_format:
                record_format(dt, self._format.current, self._files, self._lost_race)
                self._opener.stale_format = False
            if write.mode == "append":
                self._cache.appended(snapshot.next_version, data)
            return snapshot.next_version
        raise StateStoreError(f"gave up writing the {self.name} table at {self.shown}: "
                              f"{MAX_COMMIT_ATTEMPTS} concurrent commits won the race first")

    def maintain(self, rewrite: Callable[[Snapshot], pa.Table | None] | None = None) -> None:
        """Keep the table small: optional rewrite, compaction, vacuum, checkpoint, log cleanup.

        ``rewrite`` returns the rows the table should hold instead (or None to keep it as is);
        it is a compare-and-swap commit like any other, so no concurrent write is lost. A
        compaction that loses a commit race is left to the next run; vacuum and the checkpoint
        commit nothing, so concurrent writers cannot stop them (see state_store/table_maintenance.py).
        Log entries go after the log retention.
        """
        if self._opener.open() is None:
            return
        if rewrite is not None:
            self.commit(lambda s: None if (rows := rewrite(s)) is None else Write(rows, mode="overwrite"))
        dt = self._opener.open()
        assert dt is not None
        try:
            self._keep_retention(dt)  # before anything is cleaned up by a shorter setting
            clean_up(dt, self.retention, self._files)
        except CommitFailedError:
            return  # raising the retention lost a race; the next run raises it first
        except FileNotFoundError as exc:
            if not log_entry(exc):
                raise self._files.error("cannot maintain", exc) from exc
            return  # another member's maintenance cleaned the log up under this one's checkpoint: it did the work
        except (DeltaError, OSError) as exc:
            raise self._files.error("cannot maintain", exc) from exc

    # -- internals ---------------------------------------------------------------------------
    def _keep_retention(self, dt: DeltaTable) -> None:
        """The table's retention properties set as this process relies on them, once per process, before its first
        write or maintenance (``keep_retention``)."""
        if not self._retention_kept:
            keep_retention(dt, self.retention)
            self._retention_kept = True

    def _lost_race(self, attempt: int) -> None:
        """Count a commit race lost to another writer, and pause before the next attempt: a random moment, longer
        the more attempts were lost, spreads out the racers."""
        self.lost_races += 1
        time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
