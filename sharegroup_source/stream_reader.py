"""Spark's DataSourceStreamReader for share groups: a thin adapter over MicroBatchDriver.

Spark also instantiates this class in planning workers only to ship ``read`` to executors,
so construction does no I/O: the driver-side member is created on the first driver call.

Two readers, one per kind of Spark: from 4.2 Spark gives Python sources admission control
(``latestOffset(start, limit)``) and ``SupportsTriggerAvailableNow``
(``pyspark.sql.streaming.datasource``). Spark 4.0 and 4.1 call ``latestOffset()`` with nothing,
so :class:`CheckpointStartReader` learns where the next batch starts from the query's
checkpoint and bounds batches with its own options.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyarrow import fs
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
else:
    try:
        from pyspark.sql.streaming.datasource import (
            ReadAllAvailable,
            ReadLimit,
            ReadMaxRows,
            SupportsTriggerAvailableNow,
        )

        ADMISSION_CONTROL = True
    except ImportError:  # Spark 4.0 and 4.1: Python sources get neither admission control nor AvailableNow
        ADMISSION_CONTROL = False

from sharegroup_source.commit_log import CommitLog
from sharegroup_source.coordinators.base import has_not_joined
from sharegroup_source.micro_batch import MicroBatchDriver
from sharegroup_source.offset import EpochOffset
from sharegroup_source.options import SourceOptions
from sharegroup_source.partition_reader import read_partition

__all__ = ["ADMISSION_CONTROL", "CheckpointStartReader", "ShareGroupStreamReader", "reader_class"]


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


class _ReaderBase(DataSourceStreamReader):
    """What both readers share: the driver, partitions, reads, commits and the orderly stop."""

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


if ADMISSION_CONTROL:

    class ShareGroupStreamReader(_ReaderBase, SupportsTriggerAvailableNow):
        """Spark 4.2+: Spark passes each batch's start and read limit, and runs AvailableNow through us."""

        def getDefaultReadLimit(self) -> ReadLimit:
            if self._options.max_records_per_trigger is not None:
                return ReadMaxRows(self._options.max_records_per_trigger)
            return ReadAllAvailable()

        def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
            max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            return self.driver.latest_offset(start, max_records)

        def prepareForTriggerAvailableNow(self) -> None:
            self.driver.prepare_available_now()


class CheckpointStartReader(_ReaderBase):
    """Spark 4.0 and 4.1: ``latestOffset()`` is told neither where the batch starts nor how much to read.

    The start decides which epochs are acknowledged, so it cannot be guessed from the ledger
    (an epoch ledgered before a crash may or may not be in Spark's offset log). Spark calls
    ``latestOffset()`` only once every batch of its offset log is committed, so the start is
    this source's offset in the newest ``offsets/N`` of the query's checkpoint (the source
    option ``checkpointLocation``, required on these Spark versions). The one exception is
    Spark's AvailableNow wrapper, which asks once, before it re-runs an uncommitted batch: then
    that batch is the whole run, and nothing is settled or acquired. The batch's size comes
    from ``maxRecordsPerTrigger`` (else what the group's windows hold), and an AvailableNow run
    is one batch: the wrapper asks for one offset and runs up to it. Whatever that batch did
    not take stays in the queue for the next run.
    """

    def __init__(self, options: SourceOptions):
        super().__init__(options)
        if options.checkpoint_location is None:
            raise ValueError("checkpointLocation is required on this Spark")
        self._offsets = OffsetLog(options.checkpoint_location)

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "_offsets": None}

    def latestOffset(self) -> dict:  # type: ignore[override]  # Spark 4.0/4.1's signature
        newest, committed = self._offsets.newest()
        if newest is not None and not committed:
            return newest  # Spark re-runs this batch first; settling it now would acknowledge unprocessed records
        start = newest if newest is not None else self.driver.initial_offset()
        # no batch taken ahead: this Spark's AvailableNow run, one batch, looks like any other here, and a batch
        # taken ahead would go back at its end with a delivery spent
        return self.driver.latest_offset(start, self._options.max_records_per_trigger, acquire_ahead=False)


class OffsetLog(CommitLog):
    """The checkpoint's ``offsets/`` as this source wrote it: its offset in the newest batch."""

    def newest(self) -> tuple[dict | None, bool]:
        """(this source's offset in the newest ``offsets/N`` or None, whether ``commits/N`` exists).

        A batch without an offset of ours (a union whose other source had data first) counts as
        none: the first batch of ours starts at the initial offset.
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
        return (ours[0] if ours else None), batch in self._batches("commits")

    def _batches(self, folder: str) -> set[int]:
        infos = self._fs.get_file_info(fs.FileSelector(f"{self._root}/{folder}", allow_not_found=True))
        return {int(i.base_name) for i in infos if i.type == fs.FileType.File and i.base_name.isdigit()}


def _parsed(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None  # "-": a source without an offset in this batch


def reader_class() -> type[_ReaderBase]:
    """The reader for the running Spark."""
    return ShareGroupStreamReader if ADMISSION_CONTROL else CheckpointStartReader
