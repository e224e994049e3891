"""How long a state table keeps what readers of its older versions need: its log, and the data files it replaced.

Why a retention per table: internal state needs no past, so its tables vacuum replaced files at
once and keep one minute of log. Tables users read (dead letters) keep Delta's retention instead,
so a reader of an older version, a Delta stream among them, keeps working across maintenance.

Why a module of its own: a retention is written into a new table's properties, brought into an older
table's before this process writes or maintains it, and followed by vacuum (state_store/table_maintenance.py);
Delta keeps it as duration properties, which this module writes and reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from deltalake import CommitProperties, DeltaTable

from state_store.table_commit import NO_HOOKS

__all__ = ["ORPHAN_RETENTION_HOURS", "USER_DATA_RETENTION", "Retention", "keep_retention"]

#: Files no commit references (a writer lost a race after writing them) are deleted after this long,
#: so a file a concurrent writer has written but not yet committed is never taken from under it.
ORPHAN_RETENTION_HOURS = 1

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


def keep_retention(dt: DeltaTable, retention: Retention) -> None:
    """Set the table's retention properties this process relies on (the caller does once per process, before its
    first write or maintenance).

    A ``minimum`` retention raises properties below its floors: an earlier version created dead letter
    tables with one minute of log, and its writers may still clean the log up after delta-rs's automatic
    checkpoints. Internal state gets its ``removed_files``: earlier versions left Delta's week of
    tombstones in its checkpoints. A lost commit race raises CommitFailedError; the caller tries again.
    """
    config = dt.metadata().configuration
    raise_to = {}
    for key, wanted in retention.configuration().items():
        have = _parse_interval(config.get(key))
        if retention.minimum:
            change = have is not None and have < _parse_interval(wanted)  # type: ignore[operator]
        else:
            change = key == _FILE_RETENTION and have != retention.removed_files
        if change:
            raise_to[key] = wanted
    if raise_to:
        dt.alter.set_table_properties(raise_to, commit_properties=CommitProperties(max_commit_retries=0),
                                      post_commithook_properties=NO_HOOKS)
        dt.update_incremental()


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
