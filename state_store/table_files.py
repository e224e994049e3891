"""Where one state table lives: its URI, the same as messages show it, and its data files on a disk or an object store.

Why a module of its own: every part of a table needs the place. The read cache reads data files, a whole-table
rewrite writes one, a lost rewrite and vacuum delete them, and every error names the table. A local table's
files are read and written on the filesystem directly, an object store's through delta-rs's own store (so the
storage options that open the table reach its files too).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake.fs import DeltaStorageHandler

from state_store.errors import StateStoreError
from state_store.redaction import redact_location
from state_store.storage_errors import storage_problem

__all__ = ["TableFiles", "file_in_the_way", "local_path", "reason", "table_uri"]


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


def reason(exc: BaseException) -> str:
    """delta-rs messages carry a backtrace after the first line; the first line is the reason."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class TableFiles:
    """The table ``name`` under ``root``: ``uri``, ``shown`` for messages (no credentials, no signed query string),
    ``local`` (its filesystem path, None on an object store), and its data files by their paths in the table."""

    def __init__(self, root: str, name: str, storage_options: dict[str, str] | None):
        self.name = name
        self.uri = table_uri(root, name)
        self.shown = redact_location(self.uri)
        self.local = local_path(self.uri)
        self.storage_options = storage_options
        self._fs: pafs.FileSystem | None = None

    def read(self, path: str) -> pa.Table:
        """The rows of one data file."""
        if self.local is not None:
            return pq.read_table(os.path.join(self.local, unquote(path)))
        return pq.read_table(path, filesystem=self._filesystem())

    def write(self, name: str, data: pa.Table) -> int:
        """Write ``data`` as the data file ``name`` (snappy Parquet); its size in bytes."""
        if self.local is not None:
            pq.write_table(data, os.path.join(self.local, name), compression="snappy")
            return os.path.getsize(os.path.join(self.local, name))
        pq.write_table(data, name, filesystem=self._filesystem(), compression="snappy")
        return self._filesystem().get_file_info(name).size

    def delete(self, paths: Sequence[str]) -> None:
        """Delete data files; one another maintainer deleted first is gone already."""
        for path in paths:
            try:
                if self.local is not None:
                    os.remove(os.path.join(self.local, unquote(path)))
                else:
                    self._filesystem().delete_file(path)
            except FileNotFoundError:
                pass

    def error(self, what: str, exc: BaseException) -> StateStoreError:
        """``what`` the table failed at, the storage's problem in words, and the reason (the location as shown)."""
        problem = storage_problem(exc)
        cause = "" if problem is None else f"{problem}: "
        return StateStoreError(f"{what} the {self.name} table at {self.shown}: "
                               f"{cause}{reason(exc).replace(self.uri, self.shown)}")

    def _filesystem(self) -> pafs.FileSystem:
        """The table's store as a pyarrow filesystem rooted at the table (delta-rs's own object store)."""
        if self._fs is None:
            self._fs = pafs.PyFileSystem(DeltaStorageHandler(self.uri, self.storage_options))
        return self._fs
