"""Spark's DataSourceStreamReader for share groups: a thin adapter over MicroBatchDriver.

Spark also instantiates this class in planning workers only to ship ``read`` to executors,
so construction does no I/O: the driver-side member is created on the first driver call.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from sharegroup_source.coordinators.base import has_not_joined
from sharegroup_source.micro_batch import MicroBatchDriver
from sharegroup_source.offset import EpochOffset
from sharegroup_source.options import SourceOptions
from sharegroup_source.partition_reader import read_partition

__all__ = ["ShareGroupStreamReader"]


class _Termination:
    """What Spark's SIGTERM does right now, in plain attributes.

    No lock may be taken here: the handler runs on the main thread between two bytecodes of
    whatever it interrupts, including the handler of the previous SIGTERM (Spark sends two in a
    row), and a handler that waits for a lock the interrupted code holds (``threading.Event.set``
    takes one) hangs the worker for good: it never stops and its member never leaves.
    """

    #: a stop is under way: later SIGTERMs must not cut it short
    stopping = False
    #: the driver is being built on the main thread: a SIGTERM now waits until stop() can find it
    deferring = False
    #: the signal that arrived while deferring
    pending: int | None = None


_TERM = _Termination()


def _stop_on_sigterm() -> None:
    """Let a terminated query still release its records.

    Spark ends the driver-side Python worker with SIGTERM when a query stops or fails,
    without calling ``stop()``. As SystemExit, the signal unwinds into the runner's
    ``finally: reader.stop()``, which RELEASEs unsettled epochs at once instead of leaving
    them locked until the acquisition locks (and the member's session) expire.
    """
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit)


def _exit(signum: int, _frame: object) -> None:
    """The first SIGTERM unwinds into ``stop()``; the next ones must not cut that stop short.

    Spark sends two in a row (it destroys the worker, then stops the worker factory, which
    destroys it again), so the stop is marked as under way here, before anything else runs.
    While the driver is being built the member may be joining: unwinding then would leave it in
    the group with nobody to stop it, so the signal is kept for when the driver exists, unless
    the run is still waiting for the previous run's member (it has joined nothing yet).
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
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _exit:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    else:
        _TERM.stopping = False  # the handler stays: the next SIGTERM stops whatever runs then


class ShareGroupStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions):
        self._options = options
        self._driver: MicroBatchDriver | None = None

    @property
    def driver(self) -> MicroBatchDriver:
        if self._driver is None:
            _stop_on_sigterm()
            on_main = threading.current_thread() is threading.main_thread()
            if on_main:  # a new run (Spark does not reuse this worker, but nothing here relies on it)
                _TERM.stopping, _TERM.pending, _TERM.deferring = False, None, True
            try:
                self._driver = MicroBatchDriver(self._options)
            finally:
                if on_main:
                    _TERM.deferring = False
            if on_main and _TERM.pending is not None and not _TERM.stopping:
                # Spark ended the worker while the member joined: unwind into the runner's
                # ``finally: reader.stop()``, which now finds the driver and makes the member leave
                _TERM.stopping = True
                raise SystemExit(128 + _TERM.pending)
        return self._driver

    def __getstate__(self) -> dict:
        return {"_options": self._options, "_driver": None}

    def initialOffset(self) -> dict:
        return self.driver.initial_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_records_per_trigger is not None:
            return ReadMaxRows(self._options.max_records_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self.driver.latest_offset(start, max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self.driver.prepare_available_now()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self.driver.plan(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        self.driver.commit(EpochOffset.of(end).epoch)

    def stop(self) -> None:
        if self._driver is not None:
            _TERM.stopping = True
            try:
                self._driver.stop()
            finally:
                self._driver = None
                _stopped()

