"""The limit a share-partition's in-flight window sets on any Spark source, measured in the run.

A share-partition holds at most ``group.share.partition.max.record.locks`` records in flight, so
a consumer gets no more records from it until it acknowledges the ones it holds. In Spark a
record is held for at least one ShareFetch plus Spark's own fixed cost per micro-batch (offset
log, planning, tasks, commit log), so whatever the source does, records/s cannot exceed

    limit = records per batch / (ShareFetch time + Spark's own batch time)

with records per batch = partitions x lock limit (every window full). Both terms are measured on the
bench's machine, in the same run as the consumers (``bench.story`` runs them at every partition count):

* Spark's own batch time: a trivial Python streaming source (``pyspark.sql.datasource``) that
  emits, per micro-batch, in-memory Arrow batches with the sharegroup source's schema and 64-byte
  values, in a given number of tasks, into the same ``noop`` sink with the same trigger. Its
  batches are built once per worker and cached, and its offsets are a counter, so what its
  micro-batches cost is Spark's (and Spark's Python data source path's), which the sharegroup
  source pays as well. The p50 of ``triggerExecution`` and of each phase. The story takes the
  better of one task and as many tasks as the machine has cores: what Spark itself allows here.
* ShareFetch time: records per batch / the plain ShareConsumer loop's steady rate, i.e. the time
  the loop takes to move one batch of that size (the ShareFetch, touching every value, and the
  acknowledgement's round trip in ``commit_sync``). It is taken from the loop's steady rate rather
  than from single polls, because on the Apache broker a poll's size follows producer batches and
  lock availability, not ``max.poll.records``, so few polls return exactly the batch size.

The same trivial source measures what the checkpoint setting of conf/spark-defaults.conf (and of the
bench's session) saves: the session as it is (the FileSystem-based checkpoint manager on
RawLocalFileSystem) against Spark's own default, the FileContext-based manager on the checksummed
local file system, which writes a .crc file beside every offset and commit file. The other settings
a user can set were measured on 2026-11-23 and changed nothing (conf/spark-defaults.conf says so).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from bench.cluster import record_value
from bench.spark_noop import _into_noop, _steady
from sharegroup_source.schema import arrow_schema, spark_schema

__all__ = ["SESSION", "SETTINGS", "InMemoryBatches", "limit_figures", "spark_batch_cost", "spark_settings"]

#: format() name of the trivial source on the bench's session
FORMAT = "sharegroup_bench_inmemory"
VALUE_BYTES = 64


@lru_cache(maxsize=64)
def _rows(rows: int, task: int) -> pa.RecordBatch:
    """One task's rows, built once per worker process: the source's own work is kept out of the figure."""
    now = datetime.now(timezone.utc)
    return pa.RecordBatch.from_pydict({
        "key": [str(n).encode() for n in range(rows)],
        "value": [record_value(n, VALUE_BYTES) for n in range(rows)],
        "topic": ["in-memory"] * rows, "partition": [task] * rows, "offset": list(range(rows)),
        "timestamp": [now] * rows, "timestampType": [0] * rows, "deliveryCount": [1] * rows, "epoch": [0] * rows,
    }, schema=arrow_schema(False))


@dataclass(frozen=True)
class _Task(InputPartition):
    rows: int
    task: int


class _Reader(DataSourceStreamReader):
    """Every trigger is a new batch of ``rows`` rows split over ``tasks`` tasks."""

    def __init__(self, rows: int, tasks: int):
        self.rows, self.tasks = rows, tasks
        self._latest = 0

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self) -> dict:
        self._latest += 1
        return {"batch": self._latest}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        share, extra = divmod(self.rows, self.tasks)
        return [_Task(share + (task < extra), task) for task in range(self.tasks)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Task)
        yield _rows(partition.rows, partition.task)

    def commit(self, end: dict) -> None:
        pass


class InMemoryBatches(DataSource):
    """``format("sharegroup_bench_inmemory")``: options ``rowsPerBatch`` and ``tasks``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return spark_schema(False)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _Reader(int(self.options["rowsPerBatch"]), int(self.options["tasks"]))


def spark_batch_cost(spark: SparkSession, rows_per_batch: int, tasks: int, batches: int, work: Path,
                     timeout_s: float = 120.0) -> dict[str, Any]:
    """Spark's own cost of ``batches`` micro-batches of ``rows_per_batch`` rows in ``tasks`` tasks into noop,
    with the sharegroup query's trigger (processingTime 0); p50 over batches 2..n-1."""
    spark.dataSource.register(InMemoryBatches)
    frame = (spark.readStream.format(FORMAT).option("rowsPerBatch", str(rows_per_batch))
             .option("tasks", str(tasks)).load())
    steady = _steady(_into_noop(frame, rows_per_batch * batches, work, timeout_s, processingTime="0 seconds"),
                     rows_per_batch * batches)
    phases = steady["batch_phases_p50_ms"]
    return {"rows_per_batch": rows_per_batch, "tasks": tasks, "batches": steady["batches"],
            "batch_ms_p50": phases.get("triggerExecution", 0.0), "phases_p50_ms": phases,
            "records_per_s": steady["throughput"]["records_per_s"]}


def limit_figures(records_per_batch: float, plain_records_per_s: float, spark_batch_ms: float) -> dict[str, Any]:
    """The limit for batches of ``records_per_batch``: records per batch / (ShareFetch + Spark's own batch)."""
    fetch_ms = records_per_batch / plain_records_per_s * 1000 if plain_records_per_s else 0.0
    held_ms = fetch_ms + spark_batch_ms
    limit = records_per_batch / held_ms * 1000 if held_ms else 0.0
    return {"records_per_batch": round(records_per_batch), "share_fetch_ms": round(fetch_ms, 1),
            "spark_batch_ms": round(spark_batch_ms, 1), "limit_records_per_s": round(limit)}


#: What the session is compared with, set on it before a query starts and unset after: Spark's own default
#: checkpoint manager (FileContext on the checksummed LocalFs, a .crc file beside every checkpoint file),
#: which the session's FileSystem-based manager on RawLocalFileSystem replaces.
SETTINGS: dict[str, dict[str, str]] = {
    "Spark's default: FileContext manager, .crc files": {
        "spark.sql.streaming.checkpointFileManagerClass":
            "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"},
}
#: the session as it is: the settings of conf/spark-defaults.conf
SESSION = "session: FileSystem manager, RawLocalFileSystem"


def _with_settings(spark: SparkSession, settings: Mapping[str, str], measure: Callable[[], dict[str, Any]]
                   ) -> dict[str, Any]:
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        return measure()
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _files(directory: Path) -> int:
    return sum(1 for path in directory.rglob("*") if path.is_file())


def spark_settings(spark: SparkSession, rows_per_batch: int, tasks: int, batches: int, rounds: int, work: Path,
                   say: Callable[[str], None]) -> dict[str, Any]:
    """Spark's own batch cost with the session as it is and with each of SETTINGS, in interleaved rounds
    (medians kept), and what the session saves per batch against each (``session_saves_ms``); the checkpoint's
    file count shows whether a file setting took."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in [SESSION, *SETTINGS]}
    for round_ in range(rounds):
        for name in runs:
            where = work / f"settings-{round_}-{len(runs[name])}-{abs(hash(name))}"
            cost = _with_settings(spark, SETTINGS.get(name, {}),
                                  lambda where=where: spark_batch_cost(spark, rows_per_batch, tasks, batches, where))
            cost["checkpoint_files"] = _files(where / "checkpoint")
            runs[name].append(cost)
    base = statistics.median([run["batch_ms_p50"] for run in runs[SESSION]])
    figures = {}
    for name, measured in runs.items():
        ms = statistics.median([run["batch_ms_p50"] for run in measured])
        phases = {phase: statistics.median([run["phases_p50_ms"].get(phase, 0.0) for run in measured])
                  for phase in measured[0]["phases_p50_ms"]}
        figures[name] = {"settings": SETTINGS.get(name, {}), "batch_ms_p50": ms,
                         "session_saves_ms": round(ms - base, 1), "phases_p50_ms": phases,
                         "checkpoint_files": measured[-1]["checkpoint_files"],
                         "runs_batch_ms": [run["batch_ms_p50"] for run in measured]}
        say(f"Spark settings, {rows_per_batch:,} rows in {tasks} tasks: {name}: {ms:,.0f} ms per batch "
            f"(the session saves {ms - base:+,.0f} ms; {figures[name]['checkpoint_files']} checkpoint files)")
    return {"rows_per_batch": rows_per_batch, "tasks": tasks, "batches": batches, "rounds": rounds,
            "measured_at": time.strftime("%Y-%m-%d"), "by_setting": figures}

