"""Maintenance off the hot path: compaction, checkpoints and vacuum in a thread of their own.

A round takes seconds on a long-lived state, and run inside an acquisition it would hold a
micro-batch up for as long. Here it runs beside the caller, on table instances of its own (an
instance is one thread's): its rewrites are compare-and-swap commits like any other writer's,
so the caller's commits go on and neither loses a write, as with a second process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["BackgroundMaintenance"]

log = logging.getLogger(__name__)


class BackgroundMaintenance:
    """Runs ``maintain`` in a daemon thread when asked, one round at a time; ``what`` names it in logs."""

    def __init__(self, maintain: Callable[[], object], what: str):
        self._maintain = maintain
        self._what = what
        self._thread: threading.Thread | None = None
        #: rounds that finished, and how long the last one took (for the bench and the logs)
        self.rounds = 0
        self.last_s: float | None = None

    def request(self) -> bool:
        """Start a round unless one is still running (the next request starts the next); whether one started."""
        if self._thread is not None and self._thread.is_alive():
            return False
        self._thread = threading.Thread(target=self._run, name=f"maintain-{self._what}", daemon=True)
        self._thread.start()
        return True

    def join(self, timeout_s: float) -> None:
        """Wait for a running round, at most ``timeout_s``: a stop should not leave one half done if it can help it."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        began = time.monotonic()
        try:
            self._maintain()
        except Exception as error:  # the tables stay correct, only larger: the next round tries again
            log.warning("maintenance of %s failed, the next round tries again: %s", self._what, error)
            return
        self.rounds += 1
        self.last_s = time.monotonic() - began
        log.info("maintenance of %s took %.2f s", self._what, self.last_s)
