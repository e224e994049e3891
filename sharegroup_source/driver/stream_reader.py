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

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
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

from sharegroup_source.arrow_pool import use_a_returning_pool
from sharegroup_source.driver.checkpoint_logs import OffsetLog
from sharegroup_source.driver.micro_batch import MicroBatchDriver
from sharegroup_source.error_report import reported
from sharegroup_source.errors import OptionError
from sharegroup_source.executor.partition_reader import read_partition
from sharegroup_source.offset import EpochOffset
from sharegroup_source.options import SourceOptions
from sharegroup_source.termination import building_driver, stopping

__all__ = ["ADMISSION_CONTROL", "CheckpointStartReader", "ShareGroupStreamReader", "reader_class"]


class _ReaderBase(DataSourceStreamReader):
    """What both readers share: the driver, partitions, reads, commits and the orderly stop."""

    def __init__(self, options: SourceOptions):
        self._options = options
        self._driver: MicroBatchDriver | None = None

    @property
    def driver(self) -> MicroBatchDriver:
        if self._driver is None:
            with building_driver():
                use_a_returning_pool()  # the process is the query's: its allocations are ours
                self._driver = MicroBatchDriver(self._options)
        return self._driver

    def __getstate__(self) -> dict:
        return {"_options": self._options, "_driver": None}

    @reported
    def initialOffset(self) -> dict:
        return self.driver.initial_offset()

    @reported
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self.driver.plan(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    @reported
    def commit(self, end: dict) -> None:
        self.driver.commit(EpochOffset.of(end).epoch)

    @reported
    def stop(self) -> None:
        if self._driver is not None:
            with stopping():
                try:
                    self._driver.stop()
                finally:
                    self._driver = None


if ADMISSION_CONTROL:

    class ShareGroupStreamReader(_ReaderBase, SupportsTriggerAvailableNow):
        """Spark 4.2+: Spark passes each batch's start and read limit, and runs AvailableNow through us."""

        def getDefaultReadLimit(self) -> ReadLimit:
            if self._options.max_records_per_trigger is not None:
                return ReadMaxRows(self._options.max_records_per_trigger)
            return ReadAllAvailable()

        @reported
        def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
            max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            return self.driver.latest_offset(start, max_records)

        @reported
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
        if options.checkpoint_location is None:  # ShareGroupDataSource refuses it at load() already
            raise OptionError(
                "option 'checkpointLocation' is required on Spark 4.0 and 4.1 (Spark 4.2 and newer need none): these "
                "Spark versions do not tell a Python source where a batch starts, so the source reads it from the "
                "query's checkpoint. Set it to the checkpointLocation the query writes with")
        self._offsets = OffsetLog(options.checkpoint_location)

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "_offsets": None}

    @reported
    def latestOffset(self) -> dict:  # type: ignore[override]  # Spark 4.0/4.1's signature
        newest, committed = self._offsets.newest()
        if newest is not None and not committed:
            return newest.json()  # Spark re-runs this batch first: settling it now would acknowledge unprocessed ones
        start = newest.json() if newest is not None else self.driver.initial_offset()
        # no batch taken ahead: this Spark's AvailableNow run, one batch, looks like any other here, and a batch
        # taken ahead would go back at its end with a delivery spent
        return self.driver.latest_offset(start, self._options.max_records_per_trigger, acquire_ahead=False)


def reader_class() -> type[_ReaderBase]:
    """The reader for the running Spark."""
    return ShareGroupStreamReader if ADMISSION_CONTROL else CheckpointStartReader
