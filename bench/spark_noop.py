"""Figures (b) and (d): ``format("sharegroup")`` into ``format("noop")``, at steady state.

The noop sink reads every row and writes nothing, so the figure is the source plus Spark's
micro-batch machinery. Steady state starts with the second micro-batch; its rate is the records
of batches 2..n over the time from the start of batch 2 to the end of batch n, taken from
Spark's own progress reports. The same reports say where a batch's time goes inside Spark
(latestOffset, addBatch, walCommit, ...). The driver-side Python worker
(python_streaming_source_runner) is sampled for its resident memory while the query runs.
"""

from __future__ import annotations

import statistics
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
from pyspark.sql import SparkSession

from bench.measure import Throughput
from tests.kafka_under_test import KafkaUnderTest

__all__ = ["RUNNER_MARK", "source_into_noop"]

#: How the driver-side Python worker of a Python streaming source shows up in a command line.
RUNNER_MARK = "python_streaming_source_runner"
_PHASES = ("latestOffset", "queryPlanning", "getBatch", "walCommit", "addBatch", "commitOffsets", "triggerExecution")


class _RunnerMemory(threading.Thread):
    """Peak resident memory of the source's driver-side Python worker, sampled every 50 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_rss = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.05):
            for process in psutil.Process().children(recursive=True):
                try:
                    if RUNNER_MARK not in " ".join(process.cmdline()):
                        continue
                    rss = process.memory_info().rss
                except psutil.Error:
                    continue
                self.peak_rss = max(self.peak_rss, rss)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _at(progress: dict[str, Any]) -> float:
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def source_into_noop(spark: SparkSession, kafka: KafkaUnderTest, topic: str, records: int, work: Path,
                     timeout_s: float, **options: Any) -> dict[str, Any]:
    """Run the query until it read ``records`` rows; returns its steady-state figures."""
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
    frame = (spark.readStream.format("sharegroup")
             .option("kafka.bootstrap.servers", kafka.bootstrap_servers).option("kafka.group.id", kafka.new_group())
             .option("subscribe", topic).option("stateLocation", str(work / "state"))
             .options(**{k: str(v) for k, v in options.items()}).load())
    memory = _RunnerMemory()
    memory.start()
    started = time.monotonic()
    query = (frame.writeStream.format("noop").option("checkpointLocation", str(work / "checkpoint"))
             .trigger(processingTime="0 seconds").start())
    try:
        while sum(p["numInputRows"] for p in query.recentProgress) < records:
            if time.monotonic() - started > timeout_s or not query.isActive:
                break
            time.sleep(0.1)
    finally:
        query.stop()
        memory.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the bench query failed: {query.exception()}")
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    read = sum(p["numInputRows"] for p in batches)
    steady = batches[1:] if len(batches) > 2 else batches
    seconds = (_at(steady[-1]) + steady[-1]["durationMs"]["triggerExecution"] / 1000 - _at(steady[0])
               if steady else 0.0)
    phases = {name: statistics.median(p["durationMs"].get(name, 0) for p in steady) for name in _PHASES} \
        if steady else {}
    return {
        "throughput": Throughput(sum(p["numInputRows"] for p in steady), seconds, complete=read >= records).as_dict(),
        "options": {k: str(v) for k, v in options.items()},
        "batches": len(batches), "records_read": read,
        "records_per_batch_p50": statistics.median(p["numInputRows"] for p in steady) if steady else 0,
        "batch_phases_p50_ms": phases,
        "runner_rss_peak_mb": round(memory.peak_rss / 2**20, 1),
    }
