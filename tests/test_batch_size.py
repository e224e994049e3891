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

from sharegroup_source.coordinators.broker.share_client import MAX_RECORD_LOCKS, poll_size
from sharegroup_source.micro_batch import MicroBatchDriver, replay_partitions, task_cuts
from sharegroup_source.options import SourceOptions
from sharegroup_source.partition_reader import read_partition
from sharegroup_source.testing.kafka_peers import KafkaUnderTest, wait_for
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


def test_max_bytes_per_partition_keeps_tasks_below_sparks_large_task_warning(kafka: KafkaUnderTest, tmp_path: Path):
    """Spark warns of every task above 1000 KiB; the README's remedy, maxBytesPerPartition=983040, keeps default
    batches of 64-byte records over 16 partitions (3.9 MB in one task without it) in tasks below that, since a
    row weighs what the task carries of it (topic, offsets, timestamps), not its value alone; every acquired
    record in exactly one task."""
    topic = kafka.new_topic(16)
    kafka.produce(topic, [(i % 16, None, b"%064d" % i) for i in range(32_000)])
    options = SourceOptions.parse({"kafka.bootstrap.servers": kafka.bootstrap_servers,
                                   "kafka.group.id": kafka.new_group(), "subscribe": topic,
                                   "stateLocation": str(tmp_path / "state"), "maxBytesPerPartition": "983040"})
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
    assert max(sum(sizes) for sizes in batches) > 1000 * 1024, f"no batch needed a cut: {batches}"
    assert max(max(sizes) for sizes in batches) < 1000 * 1024, f"task sizes per batch: {batches}"


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
