"""Maintenance off the hot path: compaction, checkpoints and vacuum in a thread of their own.

A round takes seconds on a long-lived state, and run inside an acquisition it would hold a
micro-batch up for as long. Here it runs beside the caller, on table instances of its own (an
instance is one thread's): its rewrites are compare-and-swap commits like any other writer's,
so the caller's commits go on and neither loses a write, as with a second process.

One thread serves every round of a run, on the same table instances, rather than a thread and
instances per round: each new thread's allocator arenas (glibc's, and Arrow's mimalloc heap the
round's reads fill) outlive it, and a new instance reads the whole table again. With a thread per
round the driver's process grew 22 MB of glibc arenas over 4,000 epochs where one thread kept 6.5 MB
(2026-11-29, the driver's ledger work alone).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["BackgroundMaintenance"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class BackgroundMaintenance(Generic[T]):
    """Runs ``maintain`` on the tables ``open_tables`` gives, in one daemon thread, a round when asked;
    ``what`` names it in logs. The tables are opened in the thread's first round and kept for the next ones
    (opened again after a round that failed)."""

    def __init__(self, open_tables: Callable[[], T], maintain: Callable[[T], object], what: str):
        self._open = open_tables
        self._maintain = maintain
        self._what = what
        self._changed = threading.Condition()
        self._asked = False  # a round is asked for and has not begun
        self._running = False
        self._closed = False
        self._thread: threading.Thread | None = None
        #: rounds that finished, and how long the last one took (for the bench and the logs)
        self.rounds = 0
        self.last_s: float | None = None

    def request(self) -> bool:
        """Ask for a round unless one is asked for or running (the next request asks for the next), or the
        maintenance is closed; whether one was asked for."""
        with self._changed:
            if self._closed or self._asked or self._running:
                return False
            self._asked = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=f"maintain-{self._what}", daemon=True)
                self._thread.start()
            self._changed.notify_all()
            return True

    def idle(self, timeout_s: float) -> bool:
        """Wait, at most ``timeout_s``, until no round is asked for or running; whether none is."""
        with self._changed:
            return self._changed.wait_for(lambda: not (self._asked or self._running), timeout_s)

    def close(self, timeout_s: float) -> None:
        """Let a round asked for or running finish, waiting at most ``timeout_s`` (a stop should not leave one
        half done if it can help it), and end the thread; later requests ask for nothing."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def _serve(self) -> None:
        tables: T | None = None
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._asked or self._closed)
                if not self._asked:
                    return
                self._asked, self._running = False, True
            try:
                tables = self._round(tables)
            finally:
                with self._changed:
                    self._running = False
                    self._changed.notify_all()

    def _round(self, tables: T | None) -> T | None:
        """One round; the tables for the next (None after a failure: they may be what failed)."""
        began = time.monotonic()
        try:
            if tables is None:
                tables = self._open()
            self._maintain(tables)
        except Exception as error:  # the tables stay correct, only larger: the next round tries again
            log.warning("maintenance of %s failed, the next round tries again: %s", self._what, error)
            return None
        self.rounds += 1
        self.last_s = time.monotonic() - began
        log.info("maintenance of %s took %.2f s", self._what, self.last_s)
        return tables
