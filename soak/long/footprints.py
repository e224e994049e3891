"""The size of every Delta table a lane keeps, read from outside the processes that write them.

StateTable.footprint() gives a table's version, live files and bytes; the long soak needs rows
too (the ledger's rows are the state a restarting driver reads) and what the folder holds on disk
beyond the live snapshot: files compaction replaced and files a losing commit race left, which
vacuum deletes only after ORPHAN_RETENTION_HOURS, and the log. So the tables are opened here with
delta-rs directly, read-only: the log's add actions carry each file's size and row count, and no
data file is read. A table whose log is being cleaned up under the reader can fail to open for a
moment; it is tried again, and a table that still fails is reported with its error.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from soak.long.intervals import TableFigures

__all__ = ["footprints", "table_figures"]

#: Opening a table while a writer cleans its log up can fail; a few tries a moment apart see a settled log.
OPEN_ATTEMPTS = 3
OPEN_RETRY_S = 0.5


def _on_disk(folder: Path) -> tuple[int, int, int, int]:
    """Bytes and number of every file under ``folder``, and how many files and bytes its ``_delta_log`` holds."""
    total, count, log_bytes = 0, 0, 0
    log = folder / "_delta_log"
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                size = os.path.getsize(os.path.join(parent, name))
            except OSError:  # vacuumed or cleaned up while we walked
                continue
            total, count = total + size, count + 1
            if Path(parent) == log:
                log_bytes += size
    return total, count, len(os.listdir(log)) if log.is_dir() else 0, log_bytes


def table_figures(folder: Path) -> TableFigures:
    """One table's version, live files, bytes and rows, and its folder's bytes on disk."""
    error = None
    for attempt in range(OPEN_ATTEMPTS):
        try:
            table = DeltaTable(str(folder))
            actions = pa.table(table.get_add_actions(flatten=True))
            sizes = actions.column("size_bytes").to_pylist()
            rows = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else []
            disk, disk_files, log_files, log_bytes = _on_disk(folder)
            return TableFigures(table.version(), len(sizes), sum(sizes), sum(r or 0 for r in rows), disk, log_files,
                                disk_files=disk_files, log_bytes=log_bytes)
        except (DeltaError, OSError, pa.ArrowException) as exc:
            error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if attempt + 1 < OPEN_ATTEMPTS:
                time.sleep(OPEN_RETRY_S)
    disk, disk_files, log_files, log_bytes = _on_disk(folder)
    return TableFigures(disk_bytes=disk, log_files=log_files, error=error, disk_files=disk_files, log_bytes=log_bytes)


def footprints(roots: dict[str, Path]) -> dict[str, TableFigures]:
    """Every Delta table under each root (a folder holding ``_delta_log``), labelled ``<root label>/<table>``."""
    found: dict[str, TableFigures] = {}
    for label, root in roots.items():
        if not root.is_dir():
            continue
        for parent, folders, _ in os.walk(root):
            if "_delta_log" in folders:
                folders.clear()  # a table's folders are its own (partitions), not tables
                name = os.path.relpath(parent, root)
                found[f"{label}/{name}"] = table_figures(Path(parent))
    return found
