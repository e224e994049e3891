"""Transactional producers beside a running query, on Apache Kafka: no aborted record, every committed one once.

A producer writes transactions of 50 records and aborts every third, beside a plain producer, while the query
reads. Read committed (the group's ``share.isolation.level`` with ``coordinator=broker``, the source option
``kafka.isolation.level`` with ``coordinator=delta``): the sink holds every committed and plain record once and no
aborted one, and the control markers between them count as nothing lost (the query never fails on their gaps).
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup
from tests.test_delta_coordinator import DeltaSetup

pytestmark = pytest.mark.spark

#: transactions of ``SIZE`` records, every ``ABORT_EVERY``th aborted, beside ``PLAIN`` records of a plain producer
TRANSACTIONS, SIZE, ABORT_EVERY, PLAIN = 12, 50, 3, 300


def _write_transactions(kafka: KafkaUnderTest, topic: str) -> tuple[set[tuple[int, bytes]], set[tuple[int, bytes]]]:
    """(committed and plain records, aborted records) as (partition, value), written interleaved over 2 partitions."""
    transactional = Producer(kafka.config(**{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}", "linger.ms": 5}))
    transactional.init_transactions(30)
    kept: set[tuple[int, bytes]] = set()
    aborted: set[tuple[int, bytes]] = set()
    plain = iter(range(PLAIN))
    for t in range(TRANSACTIONS):
        transactional.begin_transaction()
        written = {(i % 2, f"tx-{t}-{i}".encode()) for i in range(SIZE)}
        for partition, value in sorted(written):
            transactional.produce(topic, value=value, partition=partition)
        kept |= {(p, v) for p, _, v in _plain(kafka, topic, [next(plain) for _ in range(PLAIN // TRANSACTIONS)])}
        assert transactional.flush(30) == 0
        if t % ABORT_EVERY == ABORT_EVERY - 1:
            transactional.abort_transaction(30)
            aborted |= written
        else:
            transactional.commit_transaction(30)
            kept |= written
    return kept, aborted


def _plain(kafka: KafkaUnderTest, topic: str, numbers: list[int]) -> list[tuple[int, bytes, bytes]]:
    records = [(n % 2, None, f"plain-{n}".encode()) for n in numbers]
    kafka.produce(topic, records)
    return records


def _no_aborted_record(spark, setup: StreamSetup, **options: str) -> None:
    query = setup.batch_sink(spark, available_now=False, maxRecordsPerTrigger=100,
                             checkpointLocation=str(setup.checkpoint), **options)
    try:
        kept, aborted = _write_transactions(setup.kafka, setup.topic)
        marker = _plain(setup.kafka, setup.topic, [PLAIN])  # after every transaction: its arrival ends the wait
        kept |= {(p, v) for p, _, v in marker}
        wait_for(lambda: {(p, v) for p, v, _ in setup.sink_rows(spark)} >= kept and setup.every_epoch_settled(), 180,
                 "every committed and plain record in the sink", interval_s=0.5,
                 state=lambda: len(setup.sink_rows(spark)))
    finally:
        query.stop()
    assert query.exception() is None
    rows = setup.sink_rows(spark)
    assert not {(p, v) for p, v, _ in rows} & aborted, "an aborted record reached the sink"
    assert_exactly_once(rows, kept)


def test_a_broker_query_reads_committed_transactions_only(spark, kafka, tmp_path):
    kafka.require_apache("transactions and the group's share.isolation.level are Apache Kafka's")
    setup = StreamSetup(kafka, kafka.new_topic(2), kafka.new_group(), tmp_path)
    _no_aborted_record(spark, setup, **{"groupConfig.share.isolation.level": "read_committed"})


def test_a_delta_query_reads_committed_transactions_only(spark, kafka, tmp_path):
    kafka.require_apache("the embedded broker keeps no last stable offset")
    setup = DeltaSetup(kafka, kafka.new_topic(2), f"g-{tmp_path.name[-20:]}", tmp_path)
    _no_aborted_record(spark, setup, **{"kafka.isolation.level": "read_committed"})
