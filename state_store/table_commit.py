"""How one planned write lands: onto the version it was planned on or not at all, with no post-commit hooks.

Why a module of its own: a ``Write`` lands in one of three ways (an append, a whole-table replace from a data
file written here, an overwrite of the rows a predicate matches), each a compare-and-swap commit with the hooks
off, and recording a table's new format version is one more. ``StateTable.commit`` re-plans whatever loses
(state_store/delta_table.py says why both rules hold for every commit).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction

from state_store.table_files import TableFiles
from state_store.table_open import FORMAT_PROPERTY

__all__ = ["MAX_COMMIT_ATTEMPTS", "NO_HOOKS", "Write", "land", "record_format"]

#: Concurrent commits a write outlasts before giving up (each lost race costs one re-plan).
MAX_COMMIT_ATTEMPTS = 500
#: Every commit of a state table: no checkpoint, no log cleanup inside the commit (see state_store/delta_table.py).
NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


@dataclass(frozen=True)
class Write:
    """What a planned commit writes: rows appended, or rows replacing those matching ``predicate``."""

    data: pa.Table
    mode: Literal["append", "overwrite"] = "append"
    predicate: str | None = None


def land(dt: DeltaTable, write: Write, data: pa.Table, merge: bool, files: TableFiles) -> None:
    """Commit ``data`` (``write``'s rows in the table's schema) onto ``dt``'s version only: CommitFailedError when
    another commit came first. ``merge``: the table lacks columns of ``data``, which the commit adds."""
    schema_mode: Literal["merge"] | None = "merge" if merge else None
    cas = CommitProperties(max_commit_retries=0)
    if write.mode == "append":
        write_deltalake(dt, data, mode="append", schema_mode=schema_mode, commit_properties=cas,
                        post_commithook_properties=NO_HOOKS)
    elif write.predicate is None and not merge:
        _replace(dt, data, cas, files)
    else:
        write_deltalake(dt, data, mode="overwrite", predicate=write.predicate, schema_mode=schema_mode,
                        commit_properties=cas, post_commithook_properties=NO_HOOKS)


def _replace(dt: DeltaTable, data: pa.Table, cas: CommitProperties, files: TableFiles) -> None:
    """Replace every row with ``data`` in one commit onto ``dt``'s version, from a data file written here.

    Why not ``write_deltalake``: a whole-table rewrite (maintenance's fold of the ledger) takes long enough
    to lose its race to the batches' appends, and every lost attempt left a copy of the whole table that no
    commit references and vacuum may delete only after ORPHAN_RETENTION_HOURS: the sixth 2-hour soak's
    ledger held 943 B on disk beyond its snapshot per live row at its end, 663 B an hour earlier. Writing
    the file here names it, so a lost race deletes it at once (a commit that failed otherwise may have
    landed, and keeps it).
    """
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    size = files.write(name, data)
    add = AddAction(path=name, size=size, partition_values={}, modification_time=int(time.time() * 1000),
                    data_change=True, stats=json.dumps({"numRecords": data.num_rows}))
    try:
        dt.create_write_transaction([add], mode="overwrite", schema=dt.schema(), commit_properties=cas,
                                    post_commithook_properties=NO_HOOKS)
    except CommitFailedError:
        files.delete([name])
        raise


def record_format(dt: DeltaTable, version: int, files: TableFiles, lost_race: Callable[[int], None]) -> None:
    """Record format ``version`` in a table that holds its columns now (a schema merge added them), retried over
    concurrent commits (``lost_race`` is told each attempt lost): until it is recorded, a release that reads only
    the earlier version refuses the table as another schema instead of by its version."""
    for attempt in range(MAX_COMMIT_ATTEMPTS):
        try:
            dt.update_incremental()
            if dt.metadata().configuration.get(FORMAT_PROPERTY) == str(version):
                break
            dt.alter.set_table_properties({FORMAT_PROPERTY: str(version)},
                                          raise_if_not_exists=False,  # our property: Delta does not know it
                                          commit_properties=CommitProperties(max_commit_retries=0),
                                          post_commithook_properties=NO_HOOKS)
            break
        except CommitFailedError:
            lost_race(attempt)
        except (DeltaError, OSError) as exc:
            raise files.error("cannot record the format version of", exc) from exc
