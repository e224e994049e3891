"""The throughput story: five consumers of the same records over 2, 4, 8 and 16 partitions, against the
per-partition limit, on Apache Kafka.

The consumers, each on a fresh share group (or Delta group, or checkpoint) over the same topic of
64-byte records, one topic per partition count:

* ``plain``: the plain confluent-kafka ShareConsumer loop (``bench.baseline``) with a
  ``max.poll.records`` of partitions x 10,000, so only the share-partitions' windows bound a poll;
* ``broker``: ``format("sharegroup")`` into noop with its default options (coordinator=broker: a batch
  is one poll, sized by the share-partitions' in-flight windows);
* ``broker_tuned``: the broker coordinator with the options the README recommends (``tuned_options``):
  ``checkpointLocation``, so acknowledgements follow Spark's commit log instead of the next trigger,
  and one task per batch whatever the lock limit (one task is Spark's cheapest batch on two cores);
* ``delta``: ``coordinator=delta`` into noop in batches of ``trigger`` records and tasks of ``task``;
* ``spark_kafka``: Spark's own ``format("kafka")`` into noop, ``maxOffsetsPerTrigger`` = ``trigger``;
* ``kafka_perf_tool``: Kafka's own share consumer perf tool (the Java client, ``bench.perf_tool``), a
  second plain-consumer yardstick beside ``plain``.

The per-partition limit is physical (DESIGN.md, "Performance model"): a share-partition holds at most
the lock limit's records in flight, each held at least for a ShareFetch plus Spark's own batch at
that batch size, so

    limit = partitions x lock limit / (ShareFetch time + Spark's own batch time)

both measured in the same run at every partition count: ShareFetch time = partitions x lock limit /
the plain loop's records/s at that count; Spark's own batch time = the trivial in-memory source of
``bench.spark_limit`` at partitions x lock limit rows per batch, the better of one task and as many
tasks as the machine has cores (what Spark itself allows on this machine, whatever our task split).

Runs go in interleaved rounds (``bench.rounds.measure_rounds``): round r runs every consumer, and
both of the limit's Spark terms, at every partition count before round r+1, so load from outside the
bench falls on all of them alike; the median run of each is kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench.baseline import plain_share_consumer
from bench.cluster import produce_dataset
from bench.delta_coordinator import delta_into_noop
from bench.perf_tool import kafka_perf_tool
from bench.rounds import measure_rounds
from bench.sizes import StorySizes
from bench.spark_limit import limit_figures, spark_batch_cost
from bench.spark_noop import kafka_into_noop, source_into_noop
from sharegroup_testing.kafka_peers import KafkaUnderTest

__all__ = ["CHECKS", "STORY_CONSUMERS", "measure_story", "tuned_options"]

#: The five consumers, in the order every output lists them.
STORY_CONSUMERS = {
    "plain": "plain ShareConsumer loop",
    "broker": 'sharegroup, defaults (broker)',
    "broker_tuned": "sharegroup, broker, tuned",
    "delta": "sharegroup, coordinator=delta",
    "spark_kafka": 'Spark format("kafka")',
    "kafka_perf_tool": "Kafka's share consumer perf tool (Java)",
}
#: The trivial in-memory Python source (``bench.spark_limit``) at delta's batch size and task count, at the most
#: partitions: what any Python streaming source reaches there when reading costs nothing, beside format("kafka").
FLOOR = "python_floor"
#: The records/s of plain's max.poll.records per partition: more than a window, so it never bounds a poll.
PLAIN_POLL_RECORDS_PER_PARTITION = 10_000
#: The done-when checks: (label, numerator, denominator, at least); a term is (consumer or "limit", "most" or
#: "fewest" partitions).
CHECKS = (
    ("broker scales: broker(most) / broker(fewest)", ("broker", "most"), ("broker", "fewest"), 3.0),
    ("broker near the limit: broker(most) / limit(most)", ("broker", "most"), ("limit", "most"), 0.8),
    ("delta near Spark: delta(most) / spark_kafka(most)", ("delta", "most"), ("spark_kafka", "most"), 0.8),
)


def tuned_options(partitions: int, checkpoint: Path | None = None) -> dict[str, str]:
    """``broker_tuned``'s options: the query's checkpoint (acknowledgements at Spark's commit) and one task per
    batch however many records the windows hold (at most 10,000 per partition)."""
    return {"maxRecordsPerPartition": str(partitions * 10_000),
            **({"checkpointLocation": str(checkpoint)} if checkpoint is not None else {})}


def _tuned(spark: SparkSession, kafka: KafkaUnderTest, topic: str, records: int, work: Path, timeout_s: float,
           partitions: int) -> dict[str, Any]:
    """``broker_tuned`` into noop: its checkpointLocation option is the query's own checkpoint."""
    return source_into_noop(spark, kafka, topic, records, work, timeout_s,
                            **tuned_options(partitions, work / "checkpoint"))


def _spark_own(spark: SparkSession, rows: int, tasks: int, batches: int, work: Path) -> dict[str, Any]:
    """Spark's own batch at ``rows`` rows in ``tasks`` tasks, with a throughput for ``measure_rounds``."""
    cost = spark_batch_cost(spark, rows, tasks, batches, work)
    return {**cost, "throughput": {"records_per_s": cost["records_per_s"], "complete": True}}


def measure_story(kafka: KafkaUnderTest, spark: SparkSession, sizes: StorySizes, lock_limit: int, value_bytes: int,
                  scratch: Path, timeout_s: float, say: Callable[[str], None]) -> dict[str, Any]:
    """The five consumers and the limit at every partition count of ``sizes``; see the module."""
    cores = os.cpu_count() or 1
    topics = {p: produce_dataset(kafka, p, sizes.records, value_bytes) for p in sizes.partition_counts}
    say(f"story: produced {sizes.records:,} records of {value_bytes} B into "
        + ", ".join(str(p) for p in topics) + " partitions")
    runs = count()

    def work(name: str) -> Path:
        return scratch / f"story-{name}-{next(runs)}"

    def broker_records(partitions: int) -> int:
        return min(sizes.records, max(partitions * lock_limit * sizes.broker_windows, sizes.broker_records_min))

    task_counts = sorted({1, cores})
    jobs: dict[str, Callable[[], dict[str, Any]]] = {}
    labels: dict[str, str] = {}
    for p, topic in topics.items():
        window = p * lock_limit
        at = {
            "plain": lambda p=p, topic=topic: plain_share_consumer(
                kafka, topic, sizes.records, timeout_s, max_poll_records=p * PLAIN_POLL_RECORDS_PER_PARTITION),
            "broker": lambda p=p, topic=topic: source_into_noop(spark, kafka, topic, broker_records(p),
                                                                work("broker"), timeout_s),
            "broker_tuned": lambda p=p, topic=topic: _tuned(spark, kafka, topic, broker_records(p), work("tuned"),
                                                            timeout_s, p),
            "delta": lambda topic=topic: delta_into_noop(spark, kafka, topic, sizes.records, work("delta"),
                                                         timeout_s, sizes.trigger, sizes.task),
            "spark_kafka": lambda topic=topic: kafka_into_noop(spark, kafka, topic, sizes.records, work("kafka"),
                                                               timeout_s, sizes.trigger),
            "kafka_perf_tool": lambda topic=topic: kafka_perf_tool(kafka, topic, sizes.records, timeout_s),
            **{f"spark_own_{tasks}": lambda tasks=tasks, window=window: _spark_own(
                spark, window, tasks, sizes.spark_cost_batches, work("own")) for tasks in task_counts},
        }
        if p == max(topics):  # the Python data source path alone at delta's batches and tasks: no read at all
            at[FLOOR] = lambda: _spark_own(spark, sizes.trigger, -(-sizes.trigger // sizes.task),
                                           sizes.spark_cost_batches, work("floor"))
        for name, job in at.items():
            jobs[f"{name}@{p}"] = job
            labels[f"{name}@{p}"] = (f"{p:>2} partitions, " + STORY_CONSUMERS.get(name, (
                "Python source floor" if name == FLOOR else f"Spark's own batch, {name[10:]} task(s)")))
    # a fresh JVM's first queries of a kind are slower (class loading, JIT, Python workers): not in round 1's figures
    fewest = min(topics)
    source_into_noop(spark, kafka, topics[fewest], 2 * fewest * lock_limit, work("warm-up"), timeout_s)
    kafka_into_noop(spark, kafka, topics[fewest], sizes.trigger, work("warm-up"), timeout_s, sizes.trigger)
    say("story: warmed up (one sharegroup and one format(\"kafka\") query, not counted)")
    measured = measure_rounds(jobs, sizes.rounds, lambda message: say(f"story: {message}"), labels=labels)

    def rate(name: str, p: int) -> int | None:
        run = measured[f"{name}@{p}"]
        return run["throughput"]["records_per_s"] if "throughput" in run else None

    scaling = {name: {str(p): rate(name, p) for p in topics} for name in STORY_CONSUMERS}
    limits = {str(p): _limit(p * lock_limit, rate("plain", p),
                             {tasks: measured[f"spark_own_{tasks}@{p}"] for tasks in task_counts}) for p in topics}
    limit_rates = {p: figure.get("limit_records_per_s") for p, figure in limits.items()}
    ratios = {name: {p: {"to_spark_kafka": _ratio(r, scaling["spark_kafka"][p]), "to_limit": _ratio(r, limit_rates[p])}
                     for p, r in by_p.items()} for name, by_p in scaling.items()}
    ratios["limit"] = {p: {"to_spark_kafka": _ratio(r, scaling["spark_kafka"][p]), "to_limit": 1.0 if r else None}
                       for p, r in limit_rates.items()}
    runs_by = {name: {str(p): measured[f"{name}@{p}"] for p in topics} for name in STORY_CONSUMERS}
    return {
        "kind": kafka.describe(), "rounds": sizes.rounds, "cores": cores, "lock_limit": lock_limit,
        "value_bytes": value_bytes,
        "records": {name: {str(p): broker_records(p) if name.startswith("broker") else sizes.records for p in topics}
                    for name in STORY_CONSUMERS},
        "options": {"plain": {str(p): {"max.poll.records": p * PLAIN_POLL_RECORDS_PER_PARTITION} for p in topics},
                    "broker": {str(p): {} for p in topics},
                    "broker_tuned": {str(p): tuned_options(p) | {"checkpointLocation": "<the query's checkpoint>"}
                                     for p in topics},
                    "delta": {str(p): {"coordinator": "delta", "maxRecordsPerTrigger": sizes.trigger,
                                       "maxRecordsPerPartition": sizes.task,
                                       "share.partition.max.record.locks": sizes.trigger,
                                       "share.auto.offset.reset": "earliest"} for p in topics},
                    "spark_kafka": {str(p): {"maxOffsetsPerTrigger": sizes.trigger} for p in topics}},
        "scaling": scaling, "limit_per_partition": limit_rates, "limit": limits, "ratios": ratios,
        "checks": _checks(scaling, limit_rates),
        "python_floor": _floor(measured[f"{FLOOR}@{max(topics)}"], sizes, scaling, max(topics)),
        "errors": {key: run["error"] for key, run in measured.items() if "error" in run},
        "runs": runs_by,
        "topics": {str(p): topic for p, topic in topics.items()},
    }


def _floor(run: dict[str, Any], sizes: StorySizes, scaling: dict[str, dict[str, int | None]],
           partitions: int) -> dict[str, Any]:
    """The Python source floor beside format("kafka") and delta at ``partitions``: what delta's gap is made of."""
    rate = run.get("records_per_s")
    return {"partitions": partitions, "rows_per_batch": sizes.trigger, "tasks": -(-sizes.trigger // sizes.task),
            "records_per_s": rate, "phases_p50_ms": run.get("phases_p50_ms"),
            "runs_records_per_s": run.get("runs_records_per_s"),
            "to_spark_kafka": _ratio(rate, scaling["spark_kafka"][str(partitions)]),
            "delta_to_floor": _ratio(scaling["delta"][str(partitions)], rate),
            **({"error": run["error"]} if "error" in run else {})}


def _ratio(value: float | None, to: float | None) -> float | None:
    return round(value / to, 3) if value is not None and to else None


def _limit(window: int, plain_records_per_s: int | None, own: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """partitions x lock limit / (ShareFetch + Spark's own batch), with both terms and the Spark runs behind them."""
    spark = {str(tasks): {"batch_ms_p50": run.get("batch_ms_p50"), "runs_records_per_s": run.get("runs_records_per_s"),
                          "phases_p50_ms": run.get("phases_p50_ms"), **({"error": run["error"]} if "error" in run
                                                                        else {})}
             for tasks, run in own.items()}
    measured = {tasks: run["batch_ms_p50"] for tasks, run in own.items() if run.get("batch_ms_p50")}
    if not plain_records_per_s or not measured:
        return {"records_per_batch": window, "spark_batch_by_tasks": spark, "limit_records_per_s": None}
    tasks = min(measured, key=lambda t: measured[t])
    return {**limit_figures(window, plain_records_per_s, measured[tasks]), "spark_batch_tasks": tasks,
            "spark_batch_by_tasks": spark}


def _checks(scaling: dict[str, dict[str, int | None]], limits: dict[str, int | None]) -> list[dict[str, Any]]:
    """The done-when checks at the most and fewest partitions measured, each met or not (None: not measured)."""
    counts = sorted(int(p) for p in limits)
    at = {"most": str(counts[-1]), "fewest": str(counts[0])}
    table = {**scaling, "limit": limits}
    checks = []
    for label, (top, top_at), (bottom, bottom_at), least in CHECKS:
        value = _ratio(table[top][at[top_at]], table[bottom][at[bottom_at]])
        checks.append({"check": label.replace("(most)", f"({at['most']})").replace("(fewest)", f"({at['fewest']})"),
                       "value": value, "at_least": least, "met": None if value is None else value >= least})
    return checks
