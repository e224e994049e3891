"""The executors' consumer pool, and the offset reader that borrows from it.

A pooled consumer must be reused across reads (a consumer per task paid bootstrap, metadata
and a close each time), kept apart by configuration, closed when a read failed on it, bounded
in number and age. The reader learns where the log ends from the consume itself, so these
tests also hold its results to the log's truth: offsets below the log start or past its end
are missing, offsets inside the log with no record are gaps, and a pooled consumer reads the
same tail twice with the same answer.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sharegroup_source.kafka import consumer_pool
from sharegroup_source.kafka.consumer_pool import ConsumerPool
from sharegroup_source.kafka.offset_reader import OffsetRangeReader
from sharegroup_source.kafka.settings import consumer_config, replay_consumer_config
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for


class _Opened:
    """A factory of real consumers that remembers each one it built."""

    def __init__(self) -> None:
        self.consumers: list[Consumer] = []
        self.configs: list[Mapping[str, Any]] = []

    def __call__(self, config: Mapping[str, Any]) -> Consumer:
        self.configs.append(dict(config))
        self.consumers.append(Consumer(consumer_config(config)))
        return self.consumers[-1]


def _closed(consumer: Consumer) -> bool:
    try:
        consumer.assignment()
    except RuntimeError:  # "Consumer closed"
        return True
    return False


@pytest.fixture
def opened() -> _Opened:
    return _Opened()


@pytest.fixture
def pool(opened: _Opened):
    consumers = ConsumerPool(factory=opened)
    yield consumers
    consumers.close()


def _values(result) -> list[bytes]:
    return [m.value() for m in sorted(result.records, key=lambda m: m.offset())]


# -- reuse, keys, eviction, on a real broker -------------------------------------------------------
def test_one_consumer_serves_reads_one_after_another(kafka: KafkaUnderTest, pool: ConsumerPool, opened: _Opened):
    topic = kafka.new_topic(2)
    kafka.produce(topic, [(p, None, f"{p}-{i}".encode()) for p in (0, 1) for i in range(20)])
    for partition, first in ((0, 10), (1, 5), (0, 0), (1, 15)):  # tasks come to a Python worker in any order
        with OffsetRangeReader(kafka.config(), timeout_s=20, pool=pool) as reader:
            result = reader.read(topic, partition, range(first, first + 5))
        assert _values(result) == [f"{partition}-{i}".encode() for i in range(first, first + 5)]
        assert result.missing == [] and result.gaps == []
    assert len(opened.consumers) == 1 and pool.idle() == 1
    assert not _closed(opened.consumers[0]), "a pooled consumer stays open between reads"


def test_consumers_are_kept_apart_by_their_configuration(kafka: KafkaUnderTest, pool: ConsumerPool,
                                                         opened: _Opened):
    topic = kafka.new_topic(1)
    kafka.produce(topic, [(0, None, f"v{i}".encode()) for i in range(3)])
    plain = kafka.config()
    other = kafka.config(**{"client.id": "another-query"})
    for config in (plain, other, plain, other):
        with OffsetRangeReader(config, timeout_s=20, pool=pool) as reader:
            assert _values(reader.read(topic, 0, [0, 1, 2])) == [b"v0", b"v1", b"v2"]
    assert len(opened.consumers) == 2 and pool.idle() == 2
    assert [c.get("client.id") for c in opened.configs] == [None, "another-query"]


def test_readers_at_once_get_a_consumer_each(kafka: KafkaUnderTest, pool: ConsumerPool, opened: _Opened):
    topic = kafka.new_topic(1)
    kafka.produce(topic, [(0, None, b"x")])
    with OffsetRangeReader(kafka.config(), pool=pool) as first, OffsetRangeReader(kafka.config(), pool=pool) as second:
        assert _values(first.read(topic, 0, [0])) == _values(second.read(topic, 0, [0])) == [b"x"]
    assert len(opened.consumers) == 2 and pool.idle() == 2


def test_a_consumer_a_read_failed_on_is_closed_not_pooled(kafka: KafkaUnderTest, pool: ConsumerPool,
                                                          opened: _Opened):
    topic = kafka.new_topic(1)
    kafka.produce(topic, [(0, None, b"x")])
    with OffsetRangeReader(kafka.config(), timeout_s=1, pool=pool) as reader, pytest.raises(TimeoutError):
        reader.read(f"{topic}-never-created", 0, [0])  # an unknown partition is waited for, up to the deadline
    assert pool.idle() == 0 and _closed(opened.consumers[0])
    with OffsetRangeReader(kafka.config(), timeout_s=20, pool=pool) as reader:
        assert _values(reader.read(topic, 0, [0])) == [b"x"]
    assert len(opened.consumers) == 2, "the next read starts on a fresh consumer"


# -- what a read reports, now that the consume says where the log ends ----------------------------
def test_offsets_past_the_log_end_are_missing_on_every_read(kafka: KafkaUnderTest, pool: ConsumerPool):
    topic = kafka.new_topic(1)
    kafka.produce(topic, [(0, None, f"v{i}".encode()) for i in range(5)])
    for _ in range(2):  # the same pooled consumer reaches the same end again: it must say so again
        with OffsetRangeReader(kafka.config(), timeout_s=20, pool=pool) as reader:
            tail = reader.read(topic, 0, [3, 4, 5, 6])
            at_end = reader.read(topic, 0, [5, 6])
            far = reader.read(topic, 0, [9, 12])
        assert _values(tail) == [b"v3", b"v4"] and tail.missing == [5, 6] and tail.gaps == []
        assert at_end.records == [] and at_end.missing == [5, 6] and at_end.gaps == []
        assert far.records == [] and far.missing == [9, 12] and far.gaps == []


def test_delivered_offsets_past_the_end_are_read_once_the_end_moves_past_them(kafka: KafkaUnderTest,
                                                                              pool: ConsumerPool):
    """A share group delivered these offsets, so the log held them: a log that ends below them is a new leader
    whose high watermark has not caught up, waited for (up to half the read's timeout); an end that never moves
    leaves them missing after that, as for any reader."""
    topic = kafka.new_topic(1)
    kafka.produce(topic, [(0, None, f"v{i}".encode()) for i in range(5)])
    catching_up = threading.Timer(1.0, kafka.produce, (topic, [(0, None, f"v{i}".encode()) for i in range(5, 8)]))
    catching_up.start()
    with OffsetRangeReader(kafka.config(), timeout_s=20, pool=pool, delivered=True) as reader:
        caught_up = reader.read(topic, 0, [3, 4, 5, 6, 7])
    catching_up.join()
    with OffsetRangeReader(kafka.config(), timeout_s=2, pool=pool, delivered=True) as reader:
        never = reader.read(topic, 0, [7, 8, 9])
    assert _values(caught_up) == [b"v3", b"v4", b"v5", b"v6", b"v7"] and caught_up.missing == []
    assert _values(never) == [b"v7"] and never.missing == [8, 9] and never.gaps == []


def test_offsets_below_the_log_start_are_missing(kafka: KafkaUnderTest, pool: ConsumerPool):
    topic = kafka.new_topic(1)
    start = _trim_log(kafka, topic)
    with OffsetRangeReader(kafka.config(), timeout_s=20, pool=pool) as reader:
        lost = reader.read(topic, 0, [0, 1, start - 1])
        across = reader.read(topic, 0, [1, start, start + 1])
    assert lost.records == [] and lost.missing == [0, 1, start - 1] and lost.gaps == []
    assert [m.offset() for m in across.records] == [start, start + 1]
    assert across.missing == [1] and across.gaps == []


def test_a_transaction_marker_inside_the_range_is_a_gap(kafka: KafkaUnderTest, pool: ConsumerPool):
    topic = kafka.new_topic(1)
    producer = Producer(kafka.config(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"in-txn", partition=0)
    producer.commit_transaction(30)  # offset 1: the commit marker
    # the coordinator writes the marker after it answered the commit: wait until the log holds it
    watcher = Consumer(kafka.config(**{"group.id": "marker-watch"}))
    try:
        wait_for(lambda: watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1] == 2, 30,
                 "the commit marker in the log")
    finally:
        watcher.close()
    with OffsetRangeReader(kafka.config(), timeout_s=20, pool=pool) as reader:
        to_end = reader.read(topic, 0, [0, 1])
        beyond = reader.read(topic, 0, [0, 1, 2])
    assert _values(to_end) == [b"in-txn"] and to_end.gaps == [1] and to_end.missing == []
    assert _values(beyond) == [b"in-txn"] and beyond.gaps == [1] and beyond.missing == [2]


def test_a_read_of_many_partitions_at_once_answers_each_as_a_read_of_it_alone(kafka: KafkaUnderTest,
                                                                            pool: ConsumerPool):
    """One task reads several partitions' ranges with one assignment: records interleave in the client's queue,
    one partition reaches its log's end, another starts below its log's start, and two topics share a
    partition number; every partition's answer is what reading it alone gives."""
    trimmed = kafka.new_topic(1)
    start = _trim_log(kafka, trimmed)
    other = kafka.new_topic(3)
    kafka.produce(other, [(p, None, f"{p}-{i}".encode()) for i in range(300) for p in range(3)])
    wanted = {(other, 0): range(0, 250), (other, 1): range(100, 305), (other, 2): [7, 299],
              (trimmed, 0): [1, start, start + 1]}
    with OffsetRangeReader(kafka.config(), timeout_s=20, pool=pool) as reader:
        together = reader.read_many(wanted)
        alone = {key: reader.read(*key, offsets) for key, offsets in wanted.items()}
    assert set(together) == set(wanted)
    for key in wanted:
        assert _values(together[key]) == _values(alone[key]), key
        assert (together[key].missing, together[key].gaps) == (alone[key].missing, alone[key].gaps), key
    assert _values(together[other, 0]) == [f"0-{i}".encode() for i in range(250)]
    assert _values(together[other, 1]) == [f"1-{i}".encode() for i in range(100, 300)]
    assert together[other, 1].missing == [300, 301, 302, 303, 304]
    assert _values(together[other, 2]) == [b"2-7", b"2-299"]
    assert [m.offset() for m in together[trimmed, 0].records] == [start, start + 1]
    assert together[trimmed, 0].missing == [1]


def _trim_log(kafka: KafkaUnderTest, topic: str) -> int:
    """Push partition 0's first records out of its log; returns its new start offset (records remain after it)."""
    if kafka.apache is None:  # the embedded broker keeps at most 5 MiB per partition
        kafka.produce(topic, [(0, None, b"x" * 900_000) for _ in range(8)])
    else:
        kafka.produce(topic, [(0, None, b"x") for _ in range(8)])
        kafka.admin.delete_records([TopicPartition(topic, 0, 5)])[TopicPartition(topic, 0, 5)].result(30)
    probe = Consumer(consumer_config(kafka.config(**{"group.id": "probe"})))
    try:
        low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
    finally:
        probe.close()
    assert low >= 3 and low + 2 <= high, (low, high)
    return low


# -- bounds, without a broker ----------------------------------------------------------------------
class _Stub:
    """Stands in for a consumer where only the pool's bookkeeping is under test."""

    def __init__(self, config: Mapping[str, Any]):
        self.config = dict(config)
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_pool_closes_the_least_recently_returned_beyond_its_capacity():
    pool = ConsumerPool(capacity=2, factory=_Stub)
    stubs = [pool.take({"client.id": str(i)}) for i in range(3)]
    for stub in stubs:
        pool.give_back({"client.id": stub.config["client.id"]}, stub)
    assert [s.closed for s in stubs] == [True, False, False] and pool.idle() == 2
    assert pool.take({"client.id": "2"}) is stubs[2]
    pool.close()
    assert stubs[1].closed and not stubs[2].closed, "a borrowed consumer is its borrower's to give back"


def test_the_pool_closes_consumers_idle_too_long_at_its_next_use():
    clock = _Clock()
    pool = ConsumerPool(idle_timeout_s=300, factory=_Stub, clock=clock)
    old, kept = pool.take({"a": 1}), pool.take({"b": 1})
    pool.give_back({"a": 1}, old)
    clock.now = 200
    pool.give_back({"b": 1}, kept)
    clock.now = 301
    assert pool.take({"b": 1}) is kept and old.closed and not kept.closed
    assert pool.idle() == 0


def test_a_broken_consumer_is_closed_at_once():
    pool = ConsumerPool(factory=_Stub)
    broken = pool.take({"a": 1})
    pool.give_back({"a": 1}, broken, broken=True)
    assert broken.closed and pool.idle() == 0 and pool.take({"a": 1}) is not broken


def test_a_forked_child_neither_uses_nor_frees_the_parents_consumers(kafka: KafkaUnderTest):
    """Spark starts its JVM with subprocess: the child, between fork and exec, runs the pool's fork hook. Freeing
    the parent's consumers there destroyed them in a process without their threads (a segmentation fault)."""
    pool = consumer_pool.consumer_pool()
    config = replay_consumer_config(kafka.config())
    pool.give_back(config, pool.take(config))
    assert pool.idle() >= 1, "the parent holds an idle consumer when it forks"
    child = os.fork()
    if child == 0:  # the fork hook ran; a child that frees the consumers dies here
        gc.collect()
        os._exit(0 if consumer_pool.consumer_pool().idle() == 0 else 3)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the child ended with {os.waitstatus_to_exitcode(status)}"
    assert pool.idle() >= 1, "the parent keeps its consumers"
