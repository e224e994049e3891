"""Spark's SIGTERM on the driver-side Python worker: what it may unwind, and when.

Spark ends that worker with SIGTERM when a query stops or fails, without calling the reader's
``stop()``. The handler here turns the first signal into SystemExit, so the runner's
``finally: reader.stop()`` gives the run's records back at once; it holds a signal that lands
while the micro-batch driver is being built (its member may be joining) until ``stop()`` can find
it, and one that lands in a Spark call until the call is done (``uninterrupted``), unless the
thread is a run that has joined nothing yet (``not_joined_yet``: a coordinator waiting for the
previous run's member). It lives below the driver and the coordinators, which
both mark what a signal may interrupt.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["building_driver", "has_not_joined", "not_joined_yet", "on_sigterm", "stop_on_sigterm", "stopping",
           "uninterrupted"]


class _Termination:
    """What Spark's SIGTERM does right now, in plain attributes.

    No lock may be taken here: the handler runs on the main thread between two bytecodes of
    whatever it interrupts, including the handler of the previous SIGTERM (Spark sends two in a
    row), and a handler that waits for a lock the interrupted code holds (``threading.Event.set``
    takes one) hangs the worker for good: it never stops and its member never leaves.
    """

    #: a stop is under way: later SIGTERMs must not cut it short
    stopping = False
    #: the driver is being built, or a Spark call runs, on the main thread: a SIGTERM now waits until it is done
    deferring = False
    #: the signal that arrived while deferring
    pending: int | None = None


_TERM = _Termination()


def stop_on_sigterm() -> None:
    """Let a terminated query still release its records.

    Spark ends the driver-side Python worker with SIGTERM when a query stops or fails,
    without calling ``stop()``. As SystemExit, the signal unwinds into the runner's
    ``finally: reader.stop()``, which RELEASEs unsettled epochs at once instead of leaving
    them locked until the acquisition locks (and the member's session) expire.
    """
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, on_sigterm)


def on_sigterm(signum: int, _frame: object) -> None:
    """The first SIGTERM unwinds into ``stop()``; the next ones must not cut that stop short.

    Spark sends two in a row (it destroys the worker, then stops the worker factory, which
    destroys it again), so the stop is marked as under way here, before anything else runs.
    While the driver is being built the member may be joining: unwinding then would leave it in
    the group with nobody to stop it, so the signal is kept for when the driver exists; in a Spark
    call it is kept for when the call is done (``uninterrupted``). Unless the run is still waiting
    for the previous run's member: it has joined nothing yet.
    """
    if _TERM.stopping:
        return
    if _TERM.deferring and not has_not_joined(threading.get_ident()):
        _TERM.pending = signum
        return
    _TERM.stopping = True
    raise SystemExit(128 + signum)


def _stopped() -> None:
    """After a stop nothing is left to give back: a later SIGTERM ends the process at once.

    (Raised as SystemExit instead, it would land in the runner's exit path or the
    interpreter's shutdown, or in a stop that has finished.)
    """
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    else:
        _TERM.stopping = False  # the handler stays: the next SIGTERM stops whatever runs then

@contextmanager
def building_driver() -> Iterator[None]:
    """The micro-batch driver is built in here: a SIGTERM meanwhile waits until ``stop()`` can find it.

    On leaving, a signal held back unwinds into the runner's ``finally: reader.stop()``, which now
    finds the driver and makes the member leave.
    """
    stop_on_sigterm()
    if threading.current_thread() is threading.main_thread() and not _TERM.deferring:
        _TERM.stopping, _TERM.pending = False, None  # a new run (Spark does not reuse the worker; nothing relies on it)
    with uninterrupted():
        yield


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Run the block whole on the main thread: a SIGTERM meanwhile unwinds as it ends (other threads never see one).

    A Spark call moves epochs between owners (acquired, ledgered, held, being settled, settled), a step at a time;
    cut between two steps, an epoch would be ledgered but not held, or no longer held but not yet settled, and the
    stop would neither settle nor release it. Whole, a call leaves every epoch with an owner the stop knows. A stop
    waits for the call under way: an acquisition's poll, a ledger write.
    """
    if threading.current_thread() is not threading.main_thread() or _TERM.deferring:  # nothing to hold, or held
        yield
        return
    _TERM.deferring = True
    try:
        yield
    finally:
        _TERM.deferring = False
    if _TERM.pending is not None and not _TERM.stopping:
        _TERM.stopping = True
        raise SystemExit(128 + _TERM.pending)


@contextmanager
def stopping() -> Iterator[None]:
    """An orderly stop runs in here: later SIGTERMs do not cut it short, and after it one ends the process."""
    _TERM.stopping = True
    try:
        yield
    finally:
        _stopped()


_not_joined: set[int] = set()


@contextmanager
def not_joined_yet() -> Iterator[None]:
    """Mark the calling thread as a run that has not joined its group: a coordinator waits in here
    (for the previous run's member, say) before it holds anything a stop would have to give back."""
    thread_id = threading.get_ident()
    _not_joined.add(thread_id)
    try:
        yield
    finally:
        _not_joined.discard(thread_id)


def has_not_joined(thread_id: int) -> bool:
    """Whether that thread's run has joined nothing yet, so ending it now leaves nothing behind
    (the stream reader's SIGTERM handler asks)."""
    return thread_id in _not_joined
