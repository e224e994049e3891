"""format("sharegroup") into Spark's Delta sink, across a restart on the same checkpoint and state.

The Delta sink is idempotent per batch (it records the query id and batch id in each commit), so
with the source's ledger it must hold every produced record exactly once, whatever happens to
the query in between. The sink is compared with what was produced, record by record.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from tests.streams import StreamSetup

pytestmark = pytest.mark.spark

PARTITIONS = 3
PER_RUN = 300  # records produced before each run
PER_TRIGGER = 100  # several epochs per run


def _numbered(first: int, count: int) -> set[tuple[int, bytes, bytes]]:
    """(partition, key, value) of the records ``produce_numbered(topic, count, PARTITIONS, first)`` writes."""
    return {(i % PARTITIONS, str(i).encode(), f"record-{i}".encode()) for i in range(first, first + count)}


def _start(setup: StreamSetup, spark: SparkSession, available_now: bool) -> StreamingQuery:
    writer = (setup.read_stream(spark, maxRecordsPerTrigger=PER_TRIGGER).writeStream.format("delta")
              .option("checkpointLocation", str(setup.checkpoint)))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")
    return writer.start(str(setup.sink))


def _sink_so_far(sink: Path) -> list[tuple[int, bytes]]:
    """(partition, value) of every row committed to the Delta sink, read with delta-rs while the query runs.

    Polling through delta-rs keeps Spark's two cores for the query; the assertions read with Spark.
    """
    if not (sink / "_delta_log").exists():
        return []
    table = DeltaTable(str(sink)).to_pyarrow_table(columns=["partition", "value"])
    return list(zip(table.column("partition").to_pylist(), table.column("value").to_pylist(), strict=True))


def _holds(setup: StreamSetup, expected: set[tuple[int, bytes, bytes]]) -> bool:
    """The sink holds at least every expected record and no epoch is held any more."""
    rows = _sink_so_far(setup.sink)
    wanted = {(p, v) for p, _, v in expected}
    return len(rows) >= len(wanted) and set(rows) >= wanted and setup.every_epoch_settled()


def _read_sink(spark: SparkSession, setup: StreamSetup) -> list[dict]:
    frame = spark.read.format("delta").load(str(setup.sink))
    return frame.select("topic", "partition", "offset", "key", "value", "deliveryCount", "epoch").toArrow().to_pylist()


def _assert_exactly(rows: list[dict], expected: set[tuple[int, bytes, bytes]], topic: str) -> None:
    """The rows are the expected records, each once, with consistent Kafka coordinates."""
    counts = collections.Counter((r["partition"], r["value"]) for r in rows)
    duplicates = {k: n for k, n in counts.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} records duplicated, e.g. {list(duplicates.items())[:3]}"
    wanted = {(p, v) for p, _, v in expected}
    missing, unexpected = wanted - counts.keys(), counts.keys() - wanted
    assert not missing, f"{len(missing)} records lost, e.g. {sorted(missing)[:3]}"
    assert not unexpected, f"{len(unexpected)} records never produced, e.g. {sorted(unexpected)[:3]}"
    assert {(r["partition"], r["key"], r["value"]) for r in rows} == expected
    assert {r["topic"] for r in rows} == {topic}
    offsets = collections.Counter((r["partition"], r["offset"]) for r in rows)
    assert max(offsets.values()) == 1, "two rows with the same (partition, offset)"
    per_partition = len(expected) // PARTITIONS
    for partition in range(PARTITIONS):
        assert sorted(o for p, o in offsets if p == partition) == list(range(per_partition)), partition
    assert min(r["deliveryCount"] for r in rows) >= 1


def _assert_rows_match_the_ledger(rows: list[dict], setup: StreamSetup) -> None:
    """Each row carries the epoch and delivery count the ledger holds for its offset; the ledger holds no other."""
    ledgered = {}
    for entry in setup.ledger_entries():
        assert entry.status in ("ACKED", "ACK_FAILED"), f"epoch {entry.epoch} is {entry.status}"
        for offset_range in entry.ranges:
            assert offset_range.topic == setup.topic
            for offset, delivery_count in zip(offset_range.offsets(), offset_range.delivery_counts, strict=True):
                assert (offset_range.partition, offset) not in ledgered, "an offset ledgered in two epochs"
                ledgered[offset_range.partition, offset] = (entry.epoch, delivery_count)
    assert {(r["partition"], r["offset"]): (r["epoch"], r["deliveryCount"]) for r in rows} == ledgered


def _delta_commits(spark: SparkSession, setup: StreamSetup) -> list[tuple[str, int]]:
    """(query id, batch id) of each streaming commit of the sink, oldest first."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{setup.sink}`").orderBy("version").collect()
    assert {r.operation for r in history} == {"STREAMING UPDATE"}, [r.operation for r in history]
    return [(r.operationParameters["queryId"], int(r.operationParameters["epochId"])) for r in history]


@pytest.mark.timing
def test_delta_sink_holds_every_record_once_across_a_restart(delta_spark, kafka: KafkaUnderTest, tmp_path):
    spark = delta_spark
    setup = StreamSetup(kafka, kafka.new_topic(PARTITIONS), kafka.new_group(), tmp_path)

    first_records = _numbered(0, PER_RUN)
    assert kafka.produce_numbered(setup.topic, PER_RUN, PARTITIONS) == {(p, v) for p, _, v in first_records}
    first = _start(setup, spark, available_now=True)
    first.awaitTermination(180)
    assert not first.isActive, "the AvailableNow run did not end within 180 s"
    assert first.exception() is None
    assert setup.every_epoch_settled(), [(e.epoch, e.status) for e in setup.ledger_entries()]
    first_rows = _read_sink(spark, setup)
    _assert_exactly(first_rows, first_records, setup.topic)
    _assert_rows_match_the_ledger(first_rows, setup)
    first_commits = _delta_commits(spark, setup)
    assert len(first_commits) >= PER_RUN // PER_TRIGGER

    second_records = _numbered(PER_RUN, PER_RUN)
    assert (kafka.produce_numbered(setup.topic, PER_RUN, PARTITIONS, first=PER_RUN)
            == {(p, v) for p, _, v in second_records})
    second = _start(setup, spark, available_now=False)  # same checkpoint, same stateLocation
    try:
        wait_for(lambda: _holds(setup, first_records | second_records), 180,
                 "every record in the Delta table and every epoch settled", interval_s=0.5)
    finally:
        second.stop()
    assert second.exception() is None

    rows = _read_sink(spark, setup)
    _assert_exactly(rows, first_records | second_records, setup.topic)
    _assert_rows_match_the_ledger(rows, setup)
    # the restart went on from the checkpoint: epochs and Spark batches continue, none is written twice
    last_first_epoch = max(r["epoch"] for r in first_rows)
    second_values = {v for _, _, v in second_records}
    assert min(r["epoch"] for r in rows if r["value"] in second_values) > last_first_epoch
    assert {(r["partition"], r["value"], r["epoch"]) for r in first_rows} <= {
        (r["partition"], r["value"], r["epoch"]) for r in rows}
    commits = _delta_commits(spark, setup)
    assert commits[:len(first_commits)] == first_commits
    assert len({query_id for query_id, _ in commits}) == 1, "a restart on one checkpoint keeps the query id"
    batch_ids = [batch_id for _, batch_id in commits]
    assert batch_ids == sorted(set(batch_ids)), f"a Spark batch was committed to the sink twice: {batch_ids}"
    assert len(commits) > len(first_commits)
    assert len(rows) == 2 * PER_RUN
