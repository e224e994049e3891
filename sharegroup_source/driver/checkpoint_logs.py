"""Spark's checkpoint, read by the driver: how far the query has committed, in epochs, and where it starts.

Spark tells a source that batch N is committed only when it builds batch N+1, one trigger
interval later; the checkpoint says it at once: Spark writes ``commits/N`` when batch N is
done, and ``offsets/N`` holds the batch's end offsets, ours among them. ``commit_watcher``
acknowledges on the first; Spark 4.0 and 4.1's start is read from the second.
"""

from __future__ import annotations

import json
import logging

from pyarrow import fs

from sharegroup_source.offset import EpochOffset

__all__ = ["CommitLog", "OffsetLog"]

log = logging.getLogger(__name__)


class CommitLog:
    """The ``commits/`` and ``offsets/`` folders of one checkpoint (a path or a URI)."""

    def __init__(self, checkpoint_location: str):
        location = checkpoint_location.rstrip("/")
        if location.startswith("dbfs:/"):  # Databricks mounts DBFS on the driver at /dbfs
            location = "/dbfs/" + location[len("dbfs:/"):].lstrip("/")
        self._fs: fs.FileSystem
        self._root: str
        self._fs, self._root = fs.FileSystem.from_uri(location) if "://" in location else (
            fs.LocalFileSystem(), location)
        self._batch = -1
        self._epoch: int | None = None

    def committed_epoch(self) -> int | None:
        """The epoch that ends the newest committed batch; None before the first commit.

        A batch Spark ran on no new data (it runs batch 0 even then) ends where the one before it did.
        """
        newest = self._newest_commit()
        if newest is not None and newest > self._batch:
            epoch = self._end_epoch(newest)
            self._batch = newest
            self._epoch = epoch if epoch is not None else self._epoch
        return self._epoch

    def _newest_commit(self) -> int | None:
        try:
            infos = self._fs.get_file_info(fs.FileSelector(f"{self._root}/commits", allow_not_found=True))
        except OSError as error:
            log.warning("cannot list the commit log at %s/commits: %s", self._root, error)
            return None
        batches = [int(i.base_name) for i in infos if i.type == fs.FileType.File and i.base_name.isdigit()]
        return max(batches, default=None)

    def _end_epoch(self, batch: int) -> int | None:
        """Our end offset in ``offsets/<batch>``: after the version and metadata lines, one per source."""
        with self._fs.open_input_stream(f"{self._root}/offsets/{batch}") as stream:
            lines = stream.read().decode().splitlines()[2:]
        ours = []
        for line in lines:
            try:
                offset = json.loads(line)
            except ValueError:
                continue  # another source's offset, or "-" for a source without one
            if EpochOffset.is_ours(offset):
                ours.append(EpochOffset.of(offset).epoch)
        if len(ours) > 1:
            raise ValueError(f"batch {batch} of the checkpoint has {len(ours)} sharegroup sources: "
                             "checkpointLocation cannot tell them apart; leave the option out")
        return ours[0] if ours else None


class OffsetLog(CommitLog):
    """The checkpoint's ``offsets/`` as this source wrote it: its offset in the newest batch."""

    def newest(self) -> tuple[EpochOffset | None, bool]:
        """(this source's offset in the newest ``offsets/N`` or None, whether ``commits/N`` exists).

        A batch without an offset of ours (a union whose other source had data first) counts as
        none: the first batch of ours starts at the initial offset. An offset of a format version
        this release does not read raises StateMismatchError.
        """
        batches = self._batches("offsets")
        if not batches:
            return None, False
        batch = max(batches)
        with self._fs.open_input_stream(f"{self._root}/offsets/{batch}") as stream:
            lines = stream.read().decode().splitlines()[2:]
        ours = [offset for offset in map(_parsed, lines) if isinstance(offset, dict) and EpochOffset.is_ours(offset)]
        if len(ours) > 1:
            raise ValueError(f"batch {batch} of the checkpoint has {len(ours)} sharegroup sources: on this Spark "
                             "a query reads one")
        return (EpochOffset.of(ours[0]) if ours else None), batch in self._batches("commits")

    def _batches(self, folder: str) -> set[int]:
        infos = self._fs.get_file_info(fs.FileSelector(f"{self._root}/{folder}", allow_not_found=True))
        return {int(i.base_name) for i in infos if i.type == fs.FileType.File and i.base_name.isdigit()}


def _parsed(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None  # "-": a source without an offset in this batch
