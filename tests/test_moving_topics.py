"""Topics that move under a running query, on Apache Kafka: partitions added, a topic deleted.

A topic that grows (CreatePartitions) is read by both coordinators and by a ``DeltaShareConsumer``
within ``TopicWatch``'s refresh and an acquisition (Spark's own source: the next trigger), each new
partition from its earliest offset, every record once. A subscribed topic deleted while a query
reads it fails the query in one line naming it.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import NewPartitions

from sharegroup_source.kafka.topic_watch import REFRESH_S
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from tests.delta_worker import spawn
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup
from tests.test_delta_coordinator import DeltaSetup, _accepted_by_workers
from tests.test_delta_share_consumer import tell, worker_config

pytestmark = pytest.mark.spark

#: Partitions before and after the growth, and records written before it and after it (over every partition).
BEFORE, AFTER, FIRST, LATER = 2, 4, 1_000, 2_000


def _grow(kafka: KafkaUnderTest, topic: str) -> float:
    """Add partitions to ``topic``; returns when (monotonic), once the producer sees them."""
    kafka.admin.create_partitions([NewPartitions(topic, AFTER)])[topic].result(30)
    grown = time.monotonic()
    wait_for(lambda: len(kafka.producer.list_topics(topic, timeout=5).topics[topic].partitions) == AFTER, 30,
             "the producer to see the new partitions")
    return grown


def _first_of_the_new_partitions(setup: StreamSetup, spark, rows=None) -> bool:
    return any(p >= BEFORE for p, _, _ in (setup.sink_rows(spark) if rows is None else rows))


def test_a_broker_query_reads_partitions_its_topic_gains(spark, kafka, tmp_path):
    """The group starts at the earliest offset (the suite's groups do), so a new partition is read from its start."""
    kafka.require_apache("Kafka's share group coordinator assigns the new share-partitions")
    setup = StreamSetup(kafka, kafka.new_topic(BEFORE), kafka.new_group(), tmp_path)
    produced = kafka.produce_numbered(setup.topic, FIRST, BEFORE)
    query = setup.batch_sink(spark, available_now=False, maxRecordsPerTrigger=500,
                             checkpointLocation=str(setup.checkpoint))
    try:
        wait_for(lambda: len(setup.sink_rows(spark)) >= FIRST, 120, "the records written before the growth")
        grown = _grow(kafka, setup.topic)
        produced |= kafka.produce_numbered(setup.topic, LATER, AFTER, first=FIRST)
        wait_for(lambda: _first_of_the_new_partitions(setup, spark), 90, "a record of a new partition in the sink")
        print(f"the new partitions' first record reached the sink {time.monotonic() - grown:.1f}s after the growth")
        wait_for(lambda: len(setup.sink_rows(spark)) >= FIRST + LATER and setup.every_epoch_settled(), 120,
                 "every record in the sink", interval_s=0.5, state=lambda: len(setup.sink_rows(spark)))
    finally:
        query.stop()
    assert_exactly_once(setup.sink_rows(spark), produced)


def test_a_query_and_a_worker_of_a_delta_group_read_partitions_its_topic_gains(spark, kafka, tmp_path):
    """A query and a DeltaShareConsumer process share a Delta group whose topic grows from 2 to 4 partitions while
    both run: every record once between them, the new partitions read from their earliest offset (records written
    to them before any member looked are not skipped), within the topic watch's refresh; then, the worker gone,
    records written to every partition reach the query's sink."""
    kafka.require_apache("a topic that grows is Apache Kafka's CreatePartitions")
    setup = DeltaSetup(kafka, kafka.new_topic(BEFORE), f"g-{tmp_path.name[-20:]}", tmp_path)
    produced = kafka.produce_numbered(setup.topic, FIRST, BEFORE)
    output = tmp_path / "worker.txt"
    output.touch()
    worker = spawn(worker_config(kafka, setup.group, setup.group_location, **{"max.poll.records": 100}),
                   setup.topic, "share", str(output))
    query = None
    try:
        assert worker.stdout.readline().strip() == "joined"
        query = setup.batch_sink(spark, available_now=False, maxRecordsPerTrigger=100,
                                 checkpointLocation=str(setup.checkpoint))
        tell(worker, "go")

        def every_row() -> list[tuple[int, bytes, int]]:
            return setup.sink_rows(spark) + _accepted_by_workers([output])

        wait_for(lambda: len(every_row()) >= FIRST, 120, "the records written before the growth")
        grown = _grow(kafka, setup.topic)
        produced |= kafka.produce_numbered(setup.topic, LATER, AFTER, first=FIRST)
        wait_for(lambda: _first_of_the_new_partitions(setup, spark, every_row()), 60,
                 "a record of a new partition in the sink or the worker's file")
        print(f"the new partitions' first record arrived {time.monotonic() - grown:.1f}s after the growth "
              f"(refresh every {REFRESH_S:.0f}s)")
        wait_for(lambda: len(every_row()) >= FIRST + LATER and setup.every_epoch_settled(), 180,
                 "every record in the sink or the worker's file", interval_s=0.5, state=lambda: len(every_row()))
        tell(worker, "stop")
        assert worker.wait(60) == 0
        # the worker may have taken every record of the new partitions: with the query alone, some more prove
        # that its own member reads them
        marker = kafka.produce_numbered(setup.topic, 100, AFTER, first=10_000)
        produced |= marker
        wait_for(lambda: {(p, v) for p, v, _ in setup.sink_rows(spark)} >= marker and setup.every_epoch_settled(),
                 120, "the query alone to read records of every partition", interval_s=0.5)
    finally:
        worker.kill()
        if query is not None:
            query.stop()
    sink, taken = setup.sink_rows(spark), _accepted_by_workers([output])
    assert_exactly_once(sink + taken, produced)
    assert taken, "the worker took no part"


def test_a_subscribed_topic_deleted_under_a_broker_query_fails_it_naming_the_topic(spark, kafka, tmp_path):
    kafka.require_apache("a share consumer's wait on a deleted topic is Apache Kafka's")
    setup = StreamSetup(kafka, kafka.new_topic(2), kafka.new_group(), tmp_path)
    kafka.produce_numbered(setup.topic, 100, 2)
    query = setup.batch_sink(spark, available_now=False, checkpointLocation=str(setup.checkpoint))
    try:
        wait_for(lambda: len(setup.sink_rows(spark)) >= 100, 120, "the records in the sink")
        kafka.admin.delete_topics([setup.topic])[setup.topic].result(30)
        wait_for(lambda: not query.isActive, 60, "the query to fail")
    finally:
        query.stop()
    error = str(query.exception())
    assert f"a subscribed topic is gone while the query read it: topic '{setup.topic}' does not exist" in error, error
