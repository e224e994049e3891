"""How big a micro-batch is by default: what the share-partitions' in-flight windows hold, not one fixed poll.

A share-partition holds at most the group's ``share.partition.max.record.locks`` records in flight
(2,000 by default), so a batch of one member's poll can hold up to partitions x that many records;
a fixed 10,000-record poll made a 16-partition topic no faster than a 4-partition one.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sharegroup_source.coordinators.broker.share_client import poll_size
from sharegroup_source.driver.micro_batch import MicroBatchDriver
from sharegroup_source.driver.planning import payload_partitions, replay_partitions, task_cuts
from sharegroup_source.executor.partition_reader import read_partition
from sharegroup_source.kafka.settings import MAX_RECORD_LOCKS
from sharegroup_source.options import SourceOptions
from sharegroup_source.schema import arrow_schema
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from state_store import EpochStatus, LedgerEntry, OffsetRange

#: the poll size of every default batch before the windows sized it
OLD_POLL = 10_000


def test_a_poll_asks_for_what_every_subscribed_partition_may_hold():
    assert poll_size({"orders": 8, "audit": 2}) == 10 * MAX_RECORD_LOCKS
    assert poll_size({}) == MAX_RECORD_LOCKS
    assert poll_size({"huge": 10**6}) == 2**31 - 1, "librdkafka's largest max.poll.records"


def _drain(options: SourceOptions) -> list[int]:
    """Run the driver as Spark would (acquire, plan, settle) until the queue is empty: each epoch's size."""
    driver = MicroBatchDriver(options)
    try:
        start, sizes = driver.initial_offset(), []
        while (end := driver.latest_offset(start, None)) != start:
            driver.plan(start, end)
            sizes.append(driver.store.ledger.get(options.group_id, end["epoch"]).record_count)
            start = end
        driver.commit(start["epoch"])
    finally:
        driver.stop()
    statuses = {e.status for e in driver.store.ledger.entries(options.group_id)}
    assert statuses == {EpochStatus.ACKED}, statuses
    return sizes


def test_a_default_broker_batch_takes_every_partitions_window(kafka: KafkaUnderTest, tmp_path: Path):
    topic = kafka.new_topic(16)
    kafka.produce_numbered(topic, 48_000, 16)
    sizes = _drain(SourceOptions.parse({"kafka.bootstrap.servers": kafka.bootstrap_servers,
                                        "kafka.group.id": kafka.new_group(), "subscribe": topic,
                                        "stateLocation": str(tmp_path / "state")}))
    assert sum(sizes) == 48_000, sizes
    # 16 windows of 2,000. Apache Kafka acquires whole producer batches, so an old poll of 10,000 held up to about
    # 11,400 records there, and a ShareFetch may answer before every window is acquired (seen: 11,286 of 8 windows
    # on a loaded machine), so the bound asked is half the windows
    assert max(sizes) >= 16_000, f"no epoch held more than one old poll of {OLD_POLL:,}: {sizes}"


@pytest.mark.parametrize("values", ["random", "text"])
def test_default_tasks_stay_below_sparks_large_task_warning(kafka: KafkaUnderTest, tmp_path: Path, values: str):
    """Spark warns of every task above 1000 KiB. A task's records travel compressed and default tasks are cut at
    960 KiB of that: batches of incompressible 64-byte values (about 4 MB of Arrow per 32,000 records) are cut
    into tasks below the warning, batches of text values travel in one task each; every acquired record is in
    exactly one task."""
    topic = kafka.new_topic(16)
    rnd = random.Random(7)
    kafka.produce(topic, [(i % 16, None, rnd.randbytes(64) if values == "random" else b"%064d" % i)
                          for i in range(32_000)])
    options = SourceOptions.parse({"kafka.bootstrap.servers": kafka.bootstrap_servers,
                                   "kafka.group.id": kafka.new_group(), "subscribe": topic,
                                   "stateLocation": str(tmp_path / "state")})
    driver = MicroBatchDriver(options)
    batches: list[list[int]] = []  # each batch's task sizes, pickled as Spark sends them
    read: list[tuple[int, int]] = []
    try:
        start = driver.initial_offset()
        while len(read) < 32_000:
            end = wait_for(lambda s=start: (e := driver.latest_offset(s, None)) != s and e, 60, "a batch")
            tasks = driver.plan(start, end)
            batches.append([len(pickle.dumps(task)) for task in tasks])
            got = [(partition, offset) for task in tasks for batch in read_partition(task)
                   for partition, offset in zip(batch.column("partition").to_pylist(),
                                                batch.column("offset").to_pylist(), strict=True)]
            entry = driver.store.ledger.get(options.group_id, end["epoch"])
            assert entry is not None
            assert sorted(got) == sorted((r.partition, offset) for r in entry.ranges for offset in r.offsets())
            read += got
            start = end
    finally:
        driver.stop()
    assert len(read) == len(set(read)) == 32_000
    assert max(max(sizes) for sizes in batches) < 1000 * 1024, f"task sizes per batch: {batches}"
    if values == "random":
        assert max(sum(sizes) for sizes in batches) > 1000 * 1024, f"no batch needed a cut: {batches}"
    else:
        assert all(len(sizes) == 1 for sizes in batches), f"text batches were cut: {batches}"


def test_a_default_delta_batch_takes_every_partitions_window(kafka: KafkaUnderTest, tmp_path: Path):
    topic = kafka.new_topic(3)
    kafka.produce_numbered(topic, 900, 3)
    sizes = _drain(SourceOptions.parse({
        "kafka.bootstrap.servers": kafka.bootstrap_servers, "kafka.group.id": kafka.new_group(),
        "subscribe": topic, "stateLocation": str(tmp_path / "state"), "coordinator": "delta",
        "groupLocation": str(tmp_path / "group"), "share.auto.offset.reset": "earliest",
        "share.partition.max.record.locks": "100"}))
    assert sizes == [300, 300, 300], "3 windows of 100 records each per epoch"


def _cuts_row_by_row(weights: list[int], max_records: int, max_bytes: int) -> list[int]:
    """The greedy split as a row-by-row loop states it."""
    cuts, count, size = [0], 0, 0
    for row, weight in enumerate(weights):
        if count and (count == max_records or size + weight > max_bytes):
            cuts.append(row)
            count, size = 0, 0
        count, size = count + 1, size + weight
    return [*cuts, len(weights)] if weights else [0]


def test_tasks_are_cut_by_records_and_bytes_as_row_by_row():
    rng = random.Random(7)
    for _ in range(300):
        weights = [rng.choice((0, 1, 64, 900, 5_000)) for _ in range(rng.randint(0, 400))]
        max_records, max_bytes = rng.randint(1, 120), rng.choice((1, 100, 1_000, 30_000, 10**9))
        assert task_cuts(np.array(weights, np.int64), max_records, max_bytes) == \
            _cuts_row_by_row(weights, max_records, max_bytes), (weights, max_records, max_bytes)


def test_a_replayed_epoch_packs_several_partitions_into_a_task(tmp_path: Path):
    """Tasks of offsets hold up to maxRecordsPerPartition records of any partitions: 16 small partitions are
    not 16 tasks (each Spark task costs the Python data source path tens of milliseconds)."""
    ranges = (*(OffsetRange.of_spans("t", p, [(0, 99)]) for p in range(16)), OffsetRange.of_spans("t", 16, [(0, 249)]))
    entry = LedgerEntry("g", 3, ranges, "run", 0, None, EpochStatus.ACQUIRED)
    options = SourceOptions.parse({"kafka.bootstrap.servers": "localhost:9092", "kafka.group.id": "g",
                                   "subscribe": "t", "stateLocation": str(tmp_path / "state"),
                                   "maxRecordsPerPartition": "450"})
    tasks = replay_partitions(entry, options)
    held = [[(r.topic, r.partition, r.first, r.last) for r in task.ranges] for task in tasks]
    assert held == [[("t", p, 0, 99) for p in range(0, 4)], [("t", p, 0, 99) for p in range(4, 8)],
                    [("t", p, 0, 99) for p in range(8, 12)], [("t", p, 0, 99) for p in range(12, 16)],
                    [("t", 16, 0, 249)]]
    assert all(task.epoch == 3 for task in tasks)


def test_a_payload_task_is_cut_again_where_its_rows_compress_worse_than_the_average(tmp_path: Path):
    """A task's bytes are known only once compressed: a batch whose first half is random and second half zeros is
    cut by the average and then again where a part still exceeds, so every task stays within maxBytesPerPartition,
    and the tasks hold every row once, in order."""
    rnd = random.Random(3)
    count = 6_000
    values = [rnd.randbytes(200) if row < count // 2 else bytes(200) for row in range(count)]
    table = pa.Table.from_pydict({
        "key": pa.array([None] * count, pa.binary()), "value": pa.array(values, pa.binary()),
        "topic": ["t"] * count, "partition": pa.array([0] * count, pa.int32()),
        "offset": pa.array(range(count), pa.int64()),
        "timestamp": pa.array([0] * count, pa.timestamp("us", tz="UTC")),
        "timestampType": pa.array([0] * count, pa.int32()),
        "headers": pa.array([[]] * count, arrow_schema(include_headers=True).field("headers").type),
        "deliveryCount": pa.array([1] * count, pa.int32()), "epoch": pa.array([5] * count, pa.int64())},
        schema=arrow_schema(include_headers=True))
    options = SourceOptions.parse({"kafka.bootstrap.servers": "localhost:9092", "kafka.group.id": "g",
                                   "subscribe": "t", "stateLocation": str(tmp_path / "state"),
                                   "maxBytesPerPartition": "100000"})
    tasks = payload_partitions(5, table, options)
    assert max(len(task.payload) for task in tasks) <= 100_000, [len(task.payload) for task in tasks]
    assert len(tasks) >= 7, "600 KB of random values need at least 7 tasks of 100 KB"
    offsets = [offset for task in tasks for batch in read_partition(task)
               for offset in batch.column("offset").to_pylist()]
    assert offsets == list(range(count))
