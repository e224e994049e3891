"""Scenarios that several test files run, each with its own variant (coordinator, Spark's path, broker).

A scenario does what a user does and checks what a user would check (the sink against what was
produced, the ``dead_letters`` table, the refusal a second run gets); the test that calls it adds
what is particular to its variant. tests/test_compat.py imports this module on every supported
Spark minor and on Python 3.10, so it needs nothing beyond the package and its ``compat-test`` extra.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Collection

import pytest
from pyspark.errors.exceptions.captured import StreamingQueryException
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

import sharegroup_source
from sharegroup_source.driver.micro_batch import MicroBatchDriver
from sharegroup_source.errors import StateMismatchError
from sharegroup_source.options import SourceOptions
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from state_store import StateStore
from tests.streams import StreamSetup


def assert_exactly_once(rows: Collection[tuple[int, bytes, int]], produced: set[tuple[int, bytes]]) -> None:
    """Every (partition, value) of ``produced`` is in ``rows`` (the sink's, as ``sink_rows`` reads them) once."""
    counts = collections.Counter((p, v) for p, v, _ in rows)
    duplicates = {k: n for k, n in counts.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} records duplicated, e.g. {list(duplicates.items())[:3]}"
    missing = produced - counts.keys()
    assert not missing, f"{len(missing)} records lost, e.g. {sorted(missing)[:3]}"
    assert counts.keys() == produced


def json_orders(kafka: KafkaUnderTest, setup: StreamSetup, count: int, partitions: int) -> tuple[set, set]:
    """Numbered JSON orders, every 33rd one not JSON; returns (valid, invalid) as (partition, value)."""
    valid, invalid = set(), set()
    records = []
    for i in range(count):
        value = f"{{not json #{i}".encode() if i % 33 == 0 else json.dumps({"order": i}).encode()
        records.append((i % partitions, str(i).encode(), value))
        (invalid if i % 33 == 0 else valid).add((i % partitions, value))
    kafka.produce(setup.topic, records)
    return valid, invalid


def is_json(column: str) -> Column:
    """Whether ``column`` (binary) parses as JSON."""
    return F.try_parse_json(F.col(column).cast("string")).isNotNull()


def run_until_complete(spark: SparkSession, setup: StreamSetup, count: int, query: StreamingQuery) -> None:
    """Wait until the sink has ``count`` rows and every epoch is acknowledged, then stop the query."""
    try:
        wait_for(lambda: len(setup.sink_rows(spark)) >= count and setup.every_epoch_acked(), 240,
                 f"{count} rows in the sink and every epoch acknowledged", state=lambda: setup.describe(spark))
    finally:
        query.stop()


def file_sink_exactly_once(spark: SparkSession, setup: StreamSetup, count: int, partitions: int,
                           **options: object) -> list[tuple[int, bytes, int]]:
    """``count`` numbered records over ``partitions``, read by an AvailableNow query into a file sink: the sink
    has each of them once, at its first delivery. Returns the sink's rows."""
    produced = setup.kafka.produce_numbered(setup.topic, count, partitions)
    query = setup.file_sink(spark, **options)
    query.awaitTermination(180)
    assert query.exception() is None
    rows = setup.sink_rows(spark)
    assert_exactly_once(rows, produced)
    assert {dc for _, _, dc in rows} == {1}, "a record was delivered more than once"
    return rows


def sink_down_at_batch_2_then_restart(spark: SparkSession, setup: StreamSetup, **options: object) -> StreamingQuery:
    """A foreachBatch query whose sink fails batch 2 once: the failure ends the query, which is then restarted
    from its checkpoint. Returns the restarted query (its sink works from then on)."""
    failed_once = threading.Event()

    def fail_on_batch_2(_frame, batch_id: int) -> None:
        if batch_id == 2 and not failed_once.is_set():
            failed_once.set()
            raise RuntimeError("sink down")

    first = setup.batch_sink(spark, fail_on_batch_2, **options)
    with pytest.raises(StreamingQueryException, match="sink down"):
        first.awaitTermination(120)
    assert failed_once.is_set()
    return setup.batch_sink(spark, fail_on_batch_2, **options)


def invalid_json_rejected_into_dead_letters(spark: SparkSession, setup: StreamSetup, count: int, partitions: int,
                                            max_records: int) -> tuple[set[tuple[int, bytes]], list[dict]]:
    """``count`` JSON orders, every 33rd one not JSON, read by a query whose foreachBatch REJECTs the invalid ones
    ("invalid JSON") and writes the rest: the sink has every valid order once, ``dead_letters`` every invalid one
    once with that reason. Returns the invalid (partition, value)s and the ``dead_letters`` rows."""
    valid, invalid = json_orders(setup.kafka, setup, count, partitions)

    def handle(batch, _batch_id):
        checked = batch.withColumn("ok", is_json("value")).cache()
        sharegroup_source.acknowledge(checked.filter("not ok"), "REJECT", "invalid JSON", options=setup.options())
        return checked.filter("ok").drop("ok")

    query = setup.batch_sink(spark, handle, available_now=False, maxRecordsPerTrigger=max_records,
                             checkpointLocation=str(setup.checkpoint))
    run_until_complete(spark, setup, len(valid), query)
    assert_exactly_once(setup.sink_rows(spark), valid)
    letters = StateStore(str(setup.state)).dead_letters.read().to_pylist()
    assert collections.Counter((r["partition"], r["value"], r["reason"]) for r in letters) == \
        collections.Counter((p, v, "invalid JSON") for p, v in invalid)
    return invalid, letters


def refused_second_run(options: SourceOptions, max_records: int) -> tuple[str, StateMismatchError]:
    """A second run on the state of a running one, from a new checkpoint: Spark's first call refuses it (the
    state is ahead of epoch 0), and it is stopped. Returns its run id and the refusal."""
    second = MicroBatchDriver(options, handover_timeout_s=0.5)
    try:
        with pytest.raises(StateMismatchError) as refused:
            second.latest_offset(second.initial_offset(), max_records)
    finally:
        second.stop()
    return second._run_id, refused.value
