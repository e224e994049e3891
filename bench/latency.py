"""End-to-end latency at a steady rate well below the limit: from produce to the consumer's commit.

One producer thread (the peer's one producer: on the embedded broker a closing client connection
ends every share session) produces at a fixed rate into a fresh topic per consumer; each record's
Kafka timestamp (CreateTime, ms) is its produce time. The consumer reads them as they come:

* the plain ShareConsumer loop (``bench.baseline``): a record's latency ends when the
  ``commit_sync`` of the poll that returned it has returned (its acknowledgement is done);
* ``format("sharegroup")`` into a ``foreachBatch`` sink that collects the batch's timestamps: a
  record's latency ends when its batch's sink function returns (the sink's commit; Spark then
  writes its commit log and the source acknowledges).

The producer starts with the consumer and runs until the consumer is done; records produced before
the consumer's first commit plus a warm-up are left out: they waited for the share group to be
joined (and for Spark's first batch), which a running query pays once. The consumer stops once
records produced over ``seconds`` after that are counted.
The throughput beside them is the counted records over the time their commits spanned, i.e. the
offered rate when the consumer keeps up.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from bench.baseline import plain_share_consumer
from bench.cluster import record_value
from bench.spark_noop import sharegroup_frame
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for

__all__ = ["measure_latency"]

#: records produced this long after the consumer's first commit are counted: the backlog of its start (a few
#: seconds of records at a fifth of the consumer's rate) is drained within about a second
WARM_UP_S = 3.0
_TICK_S = 0.01


class _SteadyProducer(threading.Thread):
    """Records into ``topic`` at ``rate`` records/s, round-robin over ``partitions``, until stopped."""

    def __init__(self, kafka: KafkaUnderTest, topic: str, partitions: int, rate: float, value_bytes: int):
        super().__init__(daemon=True)
        self.kafka, self.topic, self.partitions = kafka, topic, partitions
        self.rate, self.value_bytes = rate, value_bytes
        self.failed: list[str] = []
        self._stopping = threading.Event()

    def run(self) -> None:
        producer = self.kafka.producer
        started, sent = time.monotonic(), 0

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                self.failed.append(str(error))

        # paced by the clock: the wait is the pacing itself, not a stand-in for a condition
        while not self._stopping.wait(_TICK_S):
            due = int((time.monotonic() - started) * self.rate)
            for n in range(sent, due):
                producer.produce(self.topic, key=str(n).encode(), value=record_value(n, self.value_bytes),
                                 partition=n % self.partitions, on_delivery=delivered)
            sent = due
            producer.poll(0)
        producer.flush(30)

    def stop(self) -> None:
        self._stopping.set()
        self.join()


class _Latencies:
    """(produce ms, committed s) pairs, gathered from the consumer's thread or Spark's callback thread."""

    def __init__(self, seconds: float) -> None:
        self.samples: list[tuple[int, float]] = []
        self.seconds = seconds
        self.first_commit: float | None = None
        self._lock = threading.Lock()

    def add(self, produced_ms: list[int], committed_s: float) -> None:
        with self._lock:
            self.samples += [(ms, committed_s) for ms in produced_ms]
            if self.first_commit is None and produced_ms:
                self.first_commit = committed_s

    def done(self) -> bool:
        """Whether the records produced over ``seconds`` after the warm-up are in (commits lag by the latency)."""
        with self._lock:
            if self.first_commit is None:
                return False
            counted_from = self.first_commit + WARM_UP_S
            return max(ms for ms, _ in self.samples) / 1000 >= counted_from + self.seconds

    def figures(self) -> dict[str, Any]:
        with self._lock:
            samples = list(self.samples)
        if not samples or self.first_commit is None:
            return {"records": 0}
        first = self.first_commit + WARM_UP_S
        counted = [(ms / 1000, at) for ms, at in samples if ms / 1000 >= first]
        latencies = sorted((at - produced) * 1000 for produced, at in counted)
        if not latencies:
            return {"records": 0}
        span = max(at for _, at in counted) - min(at for _, at in counted)
        return {"records": len(latencies), "p50_ms": round(statistics.median(latencies), 1),
                "p99_ms": round(latencies[math.ceil(0.99 * len(latencies)) - 1], 1),
                "max_ms": round(latencies[-1], 1),
                "records_per_s": round(len(latencies) / span) if span > 0 else None}


def _plain(kafka: KafkaUnderTest, topic: str, timeout_s: float, latencies: _Latencies) -> None:
    plain_share_consumer(kafka, topic, 2**62, timeout_s, committed=latencies.add, stop=latencies.done)


def _sharegroup(spark: SparkSession, kafka: KafkaUnderTest, topic: str, timeout_s: float,
                latencies: _Latencies, work: Path) -> None:
    def sink(batch: DataFrame, _batch_id: int) -> None:
        produced = [row[0] for row in batch.selectExpr("unix_millis(timestamp)").collect()]
        latencies.add(produced, time.time())

    query = (sharegroup_frame(spark, kafka, topic, work).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(work / "checkpoint")).trigger(processingTime="0 seconds").start())
    try:
        wait_for(lambda: latencies.done() or not query.isActive, timeout_s, "the latency query's records")
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the latency query failed: {query.exception()}")


def measure_latency(spark: SparkSession, kafka: KafkaUnderTest, partitions: int, rate: float, seconds: float,
                    value_bytes: int, work: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """p50 and p99 latency of the plain loop and of the sharegroup query, each on its own topic fed at ``rate``."""
    consumers: dict[str, Callable[[str, _Latencies], None]] = {
        "plain": lambda topic, got: _plain(kafka, topic, seconds + 60, got),
        "sharegroup": lambda topic, got: _sharegroup(spark, kafka, topic, seconds + 60, got, work / "latency"),
    }
    figures: dict[str, Any] = {"rate_records_per_s": round(rate), "seconds": seconds, "partitions": partitions,
                               "warm_up_s": WARM_UP_S}
    for name, consume in consumers.items():
        topic = kafka.new_topic(partitions, prefix=f"bench-latency-{name}")
        latencies = _Latencies(seconds)
        producer = _SteadyProducer(kafka, topic, partitions, rate, value_bytes)
        producer.start()
        try:
            consume(topic, latencies)
        except Exception as error:  # reported in the figures; the other consumer goes on
            figures[name] = {"error": f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}"}
            continue
        finally:
            producer.stop()
        figures[name] = latencies.figures()
        say(f"latency at {rate:,.0f} records/s, {name}: p50 {figures[name].get('p50_ms')} ms, "
            f"p99 {figures[name].get('p99_ms')} ms over {figures[name]['records']:,} records")
    return figures
