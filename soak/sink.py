"""The soak's idempotent sink, with hooks the faults arm: fail a batch once, pause one, slow one.

One parquet folder per batch id, written with overwrite: Spark re-runs a batch that never reached
its commit log with the same offsets, so a re-run replaces its folder and never adds rows. Rows are
read back with pyarrow, not Spark, so checking the sink during the soak costs no Spark job.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from sharegroup_source.batch_interruption import short_on_stop
from soak.producer import record_number

__all__ = ["INJECTED_MARK", "BatchSink", "InjectedSinkFailure", "SinkRows"]

#: In the message of every failure the sink raises on purpose, and so in the failed query's.
INJECTED_MARK = "injected sink failure"


class InjectedSinkFailure(RuntimeError):
    """Raised once by the sink when a task-failure fault is armed."""


@dataclass(frozen=True)
class SinkRows:
    """What the sink holds: the batch ids holding each (partition, offset), and the record numbers seen."""

    batches_by_position: dict[tuple[int, int], list[int]]
    numbers: frozenset[int]
    #: rows the group delivered more than once before this query emitted them (a lock expired elsewhere)
    redelivered: int = 0

    @property
    def duplicated(self) -> int:
        """Records (by partition and offset) that appear in more than one row."""
        return sum(1 for batches in self.batches_by_position.values() if len(batches) > 1)

    @property
    def batches_with_duplicates(self) -> list[tuple[int, ...]]:
        """The distinct sets of batch ids that hold the same records: where to look first."""
        return sorted({tuple(sorted(b)) for b in self.batches_by_position.values() if len(b) > 1})


@dataclass
class _Armed:
    done: threading.Event
    seconds: float = 0.0
    after_write: bool = False
    from_batch: int = 0


class BatchSink:
    """``writeStream.foreachBatch(sink)``; faults arm it and wait on the event an arming returns."""

    def __init__(self, path: Path):
        self.path = path
        self.last_batch = -1
        self._lock = threading.Lock()
        self._failure: _Armed | None = None
        self._pause: _Armed | None = None
        self._slow: _Armed | None = None

    # -- arming (called by faults) ----------------------------------------------------------
    def arm_failure(self, after_write: bool) -> threading.Event:
        """The next batch raises once, before or after its rows are written (set when it raised)."""
        with self._lock:
            self._failure = _Armed(threading.Event(), after_write=after_write)
            return self._failure.done

    def arm_pause(self, seconds: float) -> threading.Event:
        """The next batch waits ``seconds`` before writing (set when it starts waiting): a mid-batch window."""
        with self._lock:
            self._pause = _Armed(threading.Event(), seconds=seconds)
            return self._pause.done

    def arm_slow(self, from_batch: int, seconds: float) -> threading.Event:
        """The first batch with id >= ``from_batch`` takes ``seconds`` longer (set when it finished)."""
        with self._lock:
            self._slow = _Armed(threading.Event(), seconds=seconds, from_batch=from_batch)
            return self._slow.done

    def disarm(self) -> None:
        with self._lock:
            self._failure = self._pause = self._slow = None

    # -- the foreachBatch function ------------------------------------------------------------
    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        with self._lock:
            failure, self._failure = self._failure, None
            pause, self._pause = self._pause, None
            slow = self._slow if self._slow is not None and batch_id >= self._slow.from_batch else None
            if slow is not None:
                self._slow = None
        if pause is not None:
            pause.done.set()
            time.sleep(pause.seconds)
        if slow is not None:
            time.sleep(slow.seconds)
        if failure is not None and not failure.after_write:
            failure.done.set()
            raise InjectedSinkFailure(f"{INJECTED_MARK} before writing batch {batch_id}")
        with short_on_stop():  # a stop mid-write: one line Spark takes for a stop, not a stack-overflowing trace
            frame.select("partition", "offset", "value", "deliveryCount").write.mode("overwrite").parquet(
                str(self._folder(batch_id)))
        self.last_batch = max(self.last_batch, batch_id)
        if slow is not None:
            slow.done.set()
        if failure is not None:
            failure.done.set()
            raise InjectedSinkFailure(f"{INJECTED_MARK} after writing batch {batch_id}")

    # -- reading back ---------------------------------------------------------------------------
    def _folder(self, batch_id: int) -> Path:
        return self.path / f"batch={batch_id}"

    def batch_numbers(self, batch_id: int) -> list[int]:
        """The record numbers in one batch's folder (none if it has no folder). Only a batch in Spark's commit
        log is final: one that is not may be running, or be run again, and its folder rewritten."""
        folder = self._folder(batch_id)
        if not folder.is_dir():
            return []
        return [record_number(value) for value in pq.read_table(folder, columns=["value"]).column("value").to_pylist()]

    def rows(self) -> SinkRows:
        """Every row in the sink; a folder being rewritten at this moment is retried."""
        for attempt in range(5):
            try:
                return self._read()
            except (FileNotFoundError, OSError):
                if attempt == 4:
                    raise
                time.sleep(0.2)
        raise AssertionError("unreachable")

    def _read(self) -> SinkRows:
        if not self.path.exists():
            return SinkRows({}, frozenset())
        table = ds.dataset(self.path, format="parquet", partitioning="hive").to_table(
            columns=["partition", "offset", "value", "deliveryCount", "batch"])
        batches: dict[tuple[int, int], list[int]] = defaultdict(list)
        for partition, offset, batch in zip(*(table.column(c).to_pylist() for c in ("partition", "offset", "batch")),
                                            strict=True):
            batches[(partition, offset)].append(batch)
        numbers = frozenset(record_number(v) for v in table.column("value").to_pylist())
        redelivered = sum(1 for count in table.column("deliveryCount").to_pylist() if count and count > 1)
        return SinkRows(dict(batches), numbers, redelivered)
