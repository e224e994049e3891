"""Where acknowledgements follow Spark's commit: a thread that settles each epoch as soon as Spark's commit log has it.

Spark tells a source that batch N is committed only when it builds batch N+1, one trigger interval later; an
acquisition lock shorter than that interval runs out first, and a query stopped in between never says it at all.
With the source option ``checkpointLocation`` the driver watches the checkpoint's ``commits/`` and settles each
epoch (``MicroBatchDriver.commit``, which hands it to the epoch book) within ``WATCH_INTERVAL_S`` of its commit.

The ledger records a settled epoch with the next epoch's entry (one Delta commit per steady epoch). Under a long
trigger that entry is a trigger interval away, so once a commit has been acknowledged and Spark has not come by for
``QUIET_S``, the watcher has the statuses written on their own: the state tables never show as held what the
broker has accepted for long.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sharegroup_source.driver.checkpoint_logs import CommitLog
from sharegroup_source.errors import StateMismatchError

__all__ = ["CommitWatcher"]

log = logging.getLogger(__name__)

#: How often the watcher looks for a new commit: acknowledgement follows a commit within this.
WATCH_INTERVAL_S = 0.2
#: How long after an acknowledgement the watcher lets Spark's next call carry the ledger's record of it.
QUIET_S = 1.0


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
