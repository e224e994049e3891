"""One maintenance round of one state table: compaction, vacuum, checkpoint and log cleanup.

Why a module of its own: maintenance is the only place a state table is checkpointed and its log cleaned
up (its commits turn delta-rs's post-commit hooks off, state_store/delta_table.py says why), and its vacuum
is not delta-rs's: it lists the expired files and deletes them without a commit, which concurrent writers
would make lose. When and in which thread a round runs is state_store/maintenance.py's job.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from state_store.table_commit import NO_HOOKS
from state_store.table_files import TableFiles
from state_store.table_retention import ORPHAN_RETENTION_HOURS, Retention

__all__ = ["clean_up"]


def clean_up(dt: DeltaTable, retention: Retention, files: TableFiles) -> None:
    """Compact (from ``retention.compact_at_files`` data files on), vacuum, checkpoint and clean the log up
    (``StateTable.maintain`` says why no concurrent writer stops it)."""
    if len(dt.file_uris()) >= retention.compact_at_files:
        with contextlib.suppress(CommitFailedError):  # a concurrent writer won: the next run compacts
            dt.optimize.compact(post_commithook_properties=NO_HOOKS)
        dt.update_incremental()
    files.delete(_expired_files(dt, retention))
    dt.create_checkpoint()  # of the version vacuumed: later tombstones stay in the log for the next run
    dt.cleanup_metadata()


def _expired_files(dt: DeltaTable, retention: Retention) -> list[str]:
    """What vacuum would delete: replaced files after the table's retention (internal state: at once), files
    no commit references (written by losers of a commit race) after ORPHAN_RETENTION_HOURS or that
    retention, whichever is longer.

    Why a dry run: delta-rs's vacuum records itself in a commit, and that commit loses to any concurrent
    overwrite ("a concurrent transaction deleted data this operation read"). Under members that commit
    every batch it lost every time, and a table whose vacuum never lands was never checkpointed either:
    the third 2-hour soak's share_state log kept all of its 21,760 commits. Delta's protocol makes the
    vacuum commit optional (it is commitInfo only), so the files are listed here and deleted without one.
    """
    if retention.minimum:
        # the table's deletedFileRetentionDuration (at least the floor, above an hour) for replaced
        # files and unreferenced ones alike; a full vacuum keeps a replaced file its whole retention
        return dt.vacuum(dry_run=True, full=True)
    hours = _hours(retention.removed_files)
    replaced = dt.vacuum(retention_hours=hours, enforce_retention_duration=False, dry_run=True)
    unreferenced = dt.vacuum(retention_hours=max(ORPHAN_RETENTION_HOURS, hours),
                             enforce_retention_duration=False, dry_run=True, full=True)
    return sorted(set(replaced) | set(unreferenced))


def _hours(span: timedelta) -> int:
    """Whole hours, rounded up: vacuum takes hours, and must never keep a file for less than asked."""
    return -(-span // timedelta(hours=1))
