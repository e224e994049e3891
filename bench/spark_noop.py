"""Spark queries into ``format("noop")`` at steady state: ``format("sharegroup")`` (figures (b) and
(d)) and, for comparison, Spark's own ``format("kafka")`` over the same topic.

The noop sink reads every row and writes nothing, so the figure is the source plus Spark's
micro-batch machinery. Steady state is the second micro-batch to the last but one (see ``_steady``); its
rate is the records of those batches over the time from the start of the first to the end of the last, taken from
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
from pyspark.sql import DataFrame, SparkSession

from bench.measure import Throughput
from sharegroup_testing.kafka_peers import KafkaUnderTest
from sharegroup_testing.workers import source_workers

__all__ = ["kafka_into_noop", "sharegroup_frame", "source_into_noop"]

_PHASES = ("latestOffset", "queryPlanning", "getBatch", "walCommit", "addBatch", "commitOffsets", "triggerExecution")


class _RunnerMemory(threading.Thread):
    """Peak resident memory of the source's driver-side Python worker, sampled every 50 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_rss = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.05):
            for process in source_workers():
                try:
                    rss = process.memory_info().rss
                except psutil.Error:
                    continue
                self.peak_rss = max(self.peak_rss, rss)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _at(progress: dict[str, Any]) -> float:
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def sharegroup_frame(spark: SparkSession, kafka: KafkaUnderTest, topic: str, work: Path, group: str | None = None,
                     **options: Any) -> DataFrame:
    """``format("sharegroup")`` on ``topic`` through ``group`` (a fresh share group by default)."""
    return (spark.readStream.format("sharegroup")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("kafka.group.id", group or kafka.new_group())
            .option("subscribe", topic).option("stateLocation", str(work / "state"))
            .options(**{k: str(v) for k, v in options.items()}).load())


def source_into_noop(spark: SparkSession, kafka: KafkaUnderTest, topic: str, records: int, work: Path,
                     timeout_s: float, group: str | None = None, **options: Any) -> dict[str, Any]:
    """``format("sharegroup")`` until it read ``records`` rows; returns its steady-state figures."""
    frame = sharegroup_frame(spark, kafka, topic, work, group, **options)
    memory = _RunnerMemory()
    memory.start()
    try:
        batches = _into_noop(frame, records, work, timeout_s, processingTime="0 seconds")
    finally:
        memory.stop()
    return {**_steady(batches, records), "options": {k: str(v) for k, v in options.items()},
            "runner_rss_peak_mb": round(memory.peak_rss / 2**20, 1)}


def kafka_into_noop(spark: SparkSession, kafka: KafkaUnderTest, topic: str, records: int, work: Path,
                    timeout_s: float, max_offsets_per_trigger: int) -> dict[str, Any]:
    """Spark's own ``format("kafka")`` over the same topic from the earliest offsets, AvailableNow.

    ``maxOffsetsPerTrigger`` splits the topic into micro-batches of the size the sharegroup query
    gets (the lock limit times the partitions), so both queries pay Spark's per-batch cost as often.
    """
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic,
               "startingOffsets": "earliest", "maxOffsetsPerTrigger": str(max_offsets_per_trigger),
               # a broker its Java client cannot talk to fails the query in seconds, not after a minute
               "kafka.request.timeout.ms": "10000", "kafka.default.api.timeout.ms": "10000",
               "fetchOffset.numRetries": "1"}
    frame = spark.readStream.format("kafka").options(**options).load()
    batches = _into_noop(frame, records, work, timeout_s, availableNow=True)
    return {**_steady(batches, records), "options": options}


def _into_noop(frame: DataFrame, records: int, work: Path, timeout_s: float, **trigger: Any) -> list[dict[str, Any]]:
    """Run ``frame`` into noop until it read ``records`` rows or ended; the progress of batches with rows."""
    frame.sparkSession.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
    started = time.monotonic()
    query = (frame.writeStream.format("noop").option("checkpointLocation", str(work / "checkpoint"))
             .trigger(**trigger).start())
    try:
        while sum(p["numInputRows"] for p in query.recentProgress) < records:
            if time.monotonic() - started > timeout_s or not query.isActive:
                break
            time.sleep(0.1)
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the bench query failed: {query.exception()}")
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def _steady(batches: list[dict[str, Any]], records: int) -> dict[str, Any]:
    """Throughput over batches 2..n-1, and where a batch's time goes. The first pays for starting; the last
    reads up to the log's end, where a reader may wait for records that never come (format("kafka"), 16
    partitions on Apache Kafka, 2026-11-24: 4,264 ms in its last addBatch against 286-516 ms in the others), and
    its share of a partial batch says nothing of a steady one."""
    read = sum(p["numInputRows"] for p in batches)
    steady = batches[1:-1] if len(batches) > 3 else batches[1:] if len(batches) > 2 else batches
    seconds = (_at(steady[-1]) + steady[-1]["durationMs"]["triggerExecution"] / 1000 - _at(steady[0])
               if steady else 0.0)
    phases = {name: statistics.median(p["durationMs"].get(name, 0) for p in steady) for name in _PHASES} \
        if steady else {}
    return {
        "throughput": Throughput(sum(p["numInputRows"] for p in steady), seconds, complete=read >= records).as_dict(),
        "batches": len(batches), "records_read": read,
        "records_per_batch_p50": statistics.median(p["numInputRows"] for p in steady) if steady else 0,
        "batch_phases_p50_ms": phases,
    }
