"""Throughput over the in-flight window: the plain loop and the sharegroup query at two lock limits.

The window is ``group.share.partition.max.record.locks`` on a Kafka broker (2,000 by default); Kafka
4.2+ also takes ``share.partition.max.record.locks`` per share group, which is how the bench sets it
on Apache Kafka without restarting the broker. The broker's static ``group.share.max.partition.max.record.locks``
bounds it (2,000 by default too, and not settable at run time): the broker the bench starts raises that
bound to 10,000 in its server properties; on a cluster of SHAREGROUP_TEST_BOOTSTRAP that did not, the
group setting is refused and the figure says why. The embedded broker has one cluster-wide limit, set
for the measurement and put back. The query's ``maxRecordsPerPartition`` follows the limit, and its
``maxRecordsPerTrigger`` twice the window times the partitions (Kafka acquires whole producer batches,
so a window can hand out more than the limit and a tight trigger would hold records back), and so does
the plain loop's ``max.poll.records``, so each consumer may take a whole window per batch. The topic
holds three windows' worth of every partition, so the steady state (from the second batch) spans at
least two batches at the largest limit.

The default limit is the configuration of every other figure: its figure is the plain loop and the
sharegroup query already measured at the main partition count (``known``: the throughput story's on
Apache Kafka, the main topic's on the embedded broker), not a second measurement of the same thing
(their topic holds other record counts per partition; on Apache Kafka that does not change a steady
rate, and the embedded broker's ShareFetch gets slower the more records a partition still holds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import count
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench.baseline import plain_share_consumer
from bench.cluster import produce_dataset
from bench.spark_noop import source_into_noop
from sharegroup_testing.apache_kafka import set_group_configs
from sharegroup_testing.kafka_peers import KafkaUnderTest

__all__ = ["DEFAULT_RECORD_LOCK_LIMIT", "measure_lock_limits"]

#: group.share.partition.max.record.locks' default, which the embedded broker applies too.
DEFAULT_RECORD_LOCK_LIMIT = 2_000
#: windows per partition in the topic
_WINDOWS = 3


@contextmanager
def _groups_with(kafka: KafkaUnderTest, limit: int) -> Iterator[Callable[[], str]]:
    """New share groups whose share-partitions hold at most ``limit`` records in flight."""
    if kafka.embedded is not None:
        kafka.embedded.set_record_lock_limit(limit)
        try:
            yield kafka.new_group
        finally:
            kafka.embedded.set_record_lock_limit(DEFAULT_RECORD_LOCK_LIMIT)
        return

    def group() -> str:
        name = kafka.new_group()
        set_group_configs(kafka.admin, name, {"share.partition.max.record.locks": str(limit)})
        return name

    yield group


def _figure(plain: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """One limit's row: both rates, their ratio, and what the query's batches were."""
    plain_rate, rate = plain["throughput"]["records_per_s"], source["throughput"]["records_per_s"]
    return {"plain_records_per_s": plain_rate, "sharegroup_records_per_s": rate,
            "ratio_to_plain": round(rate / plain_rate, 3) if plain_rate else None,
            "records_per_batch_p50": source["records_per_batch_p50"],
            "batch_ms_p50": source["batch_phases_p50_ms"].get("triggerExecution"),
            "plain_max_records_per_poll": plain["max_records_per_poll"],
            "options": source["options"], "complete": source["throughput"]["complete"]}


def measure_lock_limits(kafka: KafkaUnderTest, spark: SparkSession, limits: tuple[int, ...], partitions: int,
                        value_bytes: int, work: Path, timeout_s: float, say: Callable[[str], None],
                        known: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Records/s of the plain loop and of sharegroup -> noop at each lock limit, one run each, on one topic;
    at the default limit the runs in ``known`` ("plain" and "sharegroup")."""
    measured = [limit for limit in limits if limit != DEFAULT_RECORD_LOCK_LIMIT]
    records = max(measured, default=DEFAULT_RECORD_LOCK_LIMIT) * partitions * _WINDOWS
    topic = produce_dataset(kafka, partitions, records, value_bytes) if measured else ""
    runs = count()
    figures: dict[str, Any] = {"partitions": partitions, "records": records, "by_limit": {}}
    for limit in limits:
        if limit == DEFAULT_RECORD_LOCK_LIMIT:
            figures["by_limit"][str(limit)] = {**_figure(known["plain"], known["sharegroup"]),
                                               "measured_on": "the runs measured already at this partition count"}
            continue
        trigger = 2 * limit * partitions
        try:
            with _groups_with(kafka, limit) as new_group:
                plain = plain_share_consumer(kafka, topic, records, timeout_s, max_poll_records=trigger,
                                             group=new_group())
                source = source_into_noop(spark, kafka, topic, records, work / f"locks-{next(runs)}", timeout_s,
                                          group=new_group(), maxRecordsPerPartition=limit,
                                          maxRecordsPerTrigger=trigger)
        except Exception as error:  # a peer that cannot take the setting says why; the other limits go on
            figures["by_limit"][str(limit)] = {"error": f"{type(error).__name__}: "
                                                        f"{str(error).strip().splitlines()[0][:300]}"}
            say(f"lock limit {limit:,}: not measured: {figures['by_limit'][str(limit)]['error'][:160]}")
            continue
        figures["by_limit"][str(limit)] = {**_figure(plain, source), "measured_on": f"{records:,} records"}
        say(f"lock limit {limit:,}, {partitions} partitions: plain {plain['throughput']['records_per_s']:,} "
            f"records/s, sharegroup {source['throughput']['records_per_s']:,} records/s "
            f"({source['records_per_batch_p50']:,.0f} records per batch)")
    return figures
