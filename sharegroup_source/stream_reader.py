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

from sharegroup_source.micro_batch import MicroBatchDriver
from sharegroup_source.options import SourceOptions
from sharegroup_source.partition_reader import read_partition

__all__ = ["ShareGroupStreamReader"]


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
    """
    if _STOPPING.is_set():
        return
    _STOPPING.set()
    raise SystemExit(128 + signum)


_STOPPING = threading.Event()


class ShareGroupStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions):
        self._options = options
        self._driver: MicroBatchDriver | None = None

    @property
    def driver(self) -> MicroBatchDriver:
        if self._driver is None:
            _stop_on_sigterm()
            self._driver = MicroBatchDriver(self._options)
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
        self.driver.commit(int(end["epoch"]))

    def stop(self) -> None:
        if self._driver is not None:
            _STOPPING.set()
            try:
                self._driver.stop()
            finally:
                self._driver = None
                _STOPPING.clear()
