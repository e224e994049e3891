"""A replayed epoch reads records with the isolation the share group delivered them with.

A share group hands out records of a transaction that is still open (``share.isolation.level``
defaults to read_uncommitted), so an epoch can hold them. After a restart an executor reads
that epoch back by offset with a plain consumer, whose own default is read_committed: it
would stop at the last stable offset and call the epoch's records lost (or wait for them).
These tests leave a transaction open and replay its offsets the way the source does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from sharegroup_source.executor.partition_reader import ReplayPartition, read_partition
from sharegroup_source.kafka.offset_reader import OffsetRangeReader
from sharegroup_source.options import SourceOptions
from sharegroup_testing.kafka_peers import KafkaUnderTest
from state_store import OffsetRange

RECORDS = [f"open-{i}".encode() for i in range(5)]


def _options(kafka: KafkaUnderTest, topic: str, **extra: str) -> SourceOptions:
    return SourceOptions.parse({"kafka.bootstrap.servers": kafka.bootstrap_servers, "kafka.group.id": "replay",
                                "subscribe": topic, "stateLocation": "/unused", **extra})


@pytest.fixture
def open_transaction(kafka: KafkaUnderTest) -> Iterator[tuple[str, list[int]]]:
    """A topic whose records sit in a transaction left open: (topic, their offsets)."""
    topic = kafka.new_topic(1, prefix="txn")
    producer = Producer(kafka.config(**{"transactional.id": f"open-{uuid.uuid4().hex[:8]}",
                                        "transaction.timeout.ms": 120_000}))
    producer.init_transactions(30)
    producer.begin_transaction()
    offsets: list[int] = []
    for value in RECORDS:
        producer.produce(topic, value=value, partition=0,
                         on_delivery=lambda error, message: offsets.append(-1 if error else message.offset()))
    assert producer.flush(30) == 0 and len(offsets) == len(RECORDS) and -1 not in offsets, offsets
    try:
        yield topic, sorted(offsets)
    finally:
        producer.abort_transaction(30)  # nothing else should wait on this partition's stable offset


@pytest.mark.timeout(90)
def test_replay_returns_records_of_an_open_transaction(kafka: KafkaUnderTest, open_transaction):
    topic, offsets = open_transaction
    options = _options(kafka, topic)
    part = ReplayPartition(epoch=1, ranges=(OffsetRange.of(topic, 0, [(offset, 1) for offset in offsets]),),
                           include_headers=False, fail_on_data_loss=True, client_config=options.replay_config)
    table = next(read_partition(part)).to_pydict()  # a DataLossError here: the replay read committed only
    assert table["offset"] == offsets and table["value"] == RECORDS


@pytest.mark.embedded
@pytest.mark.timeout(90)
def test_replay_honours_a_user_set_isolation_level(kafka: KafkaUnderTest, open_transaction):
    """kafka.isolation.level=read_committed (a group set to share.isolation.level=read_committed)
    reaches the replay reader, which then stops at the open transaction."""
    if kafka.is_embedded:
        pytest.skip("the embedded broker (librdkafka's mock cluster) keeps no last stable offset: a read_committed "
                    "fetch returns an open transaction's records too (checked), so there is nothing to tell apart")
    topic, offsets = open_transaction
    options = _options(kafka, topic, **{"kafka.isolation.level": "read_committed"})
    assert "isolation.level" not in options.client_config, "the share consumer refuses isolation.level"
    with OffsetRangeReader(options.replay_config, timeout_s=20) as reader:
        result = reader.read(topic, 0, offsets)
    assert result.records == [] and result.missing == offsets
