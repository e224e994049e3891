"""Spark's commit log, read by the driver: how far the query has committed, in epochs.

Spark tells a source that batch N is committed only when it builds batch N+1, one trigger
interval later; an acquisition lock shorter than that interval runs out first, and a query
stopped in between never says it at all. The checkpoint says it at once: Spark writes
``commits/N`` when batch N is done, and ``offsets/N`` holds the batch's end offsets, ours
among them. With the source option ``checkpointLocation`` the driver watches ``commits/`` and
acknowledges each epoch as its batch's commit appears.

The ledger records a settled epoch with the next epoch's entry (one Delta commit per steady
epoch). Under a long trigger that entry is a trigger interval away, so once a commit has been
acknowledged and Spark has not come by for ``QUIET_S``, the watcher has the statuses written
on their own: the state tables never show as held what the broker has accepted for long.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from pyarrow import fs

from sharegroup_source.errors import StateMismatchError
from sharegroup_source.offset import EpochOffset

__all__ = ["CommitLog", "CommitWatcher", "OffsetLog"]

log = logging.getLogger(__name__)

#: How often the watcher looks for a new commit: acknowledgement follows a commit within this.
WATCH_INTERVAL_S = 0.2
#: How long after an acknowledgement the watcher lets Spark's next call carry the ledger's record of it.
QUIET_S = 1.0


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


class CommitWatcher:
    """A daemon thread that calls ``on_commit(epoch)`` whenever a newer epoch is committed, and
    ``on_quiet()`` once ``QUIET_S`` after each such call if no newer commit came in between."""

    def __init__(self, commit_log: CommitLog, on_commit: Callable[[int], None], on_quiet: Callable[[], None]):
        self._log = commit_log
        self._on_commit = on_commit
        self._on_quiet = on_quiet
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sharegroup-commit-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seen: int | None = None
        quiet_at: float | None = None  # when on_quiet is due
        while not self._stopped.wait(WATCH_INTERVAL_S):
            try:
                epoch = self._log.committed_epoch()
            except (ValueError, StateMismatchError) as error:  # the run's start, or Spark's next call, refuses too
                log.warning("%s; acknowledgements wait for the next trigger", error)
                return
            if epoch is not None and epoch != seen:
                seen = epoch  # tried once: after a failure, Spark's next trigger settles it again
                quiet_at = time.monotonic() + QUIET_S
                self._call(f"acknowledging epoch {epoch} after Spark's commit", self._on_commit, epoch)
            elif quiet_at is not None and time.monotonic() >= quiet_at:
                quiet_at = None
                self._call("recording the settled epochs in the ledger", self._on_quiet)

    @staticmethod
    def _call(what: str, callback: Callable[..., None], *args: int) -> None:
        try:
            callback(*args)
        except Exception:  # logged, not raised: Spark's next trigger settles and records the epoch anyway
            log.exception("%s failed", what)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


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
