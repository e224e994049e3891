"""Records that left the log before the group read them, and topics deleted and created again, on Apache Kafka.

A query reads 1,000 records and stops; 1,000 more are written; DeleteRecords moves each partition's log start past
250 of the unread ones. With ``failOnDataLoss`` at its default the restarted query fails naming each partition and
how many of its records are gone, and fails the same way again (the group did not move past them); with
``failOnDataLoss=false`` it goes on with what the log holds, every remaining record once, and the progress table
counts the 500 lost. A topic deleted and created again under its name fails the query naming it, while it runs (a
broker group) and across a restart (a Delta group, whose state is of the old log).
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from pyspark.errors import StreamingQueryException

from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup
from tests.test_delta_coordinator import DeltaSetup

pytestmark = pytest.mark.spark

#: Partitions, records read before the stop and written after it (over both partitions), unread records deleted
#: per partition.
PARTITIONS, READ, UNREAD, DELETED = 2, 1_000, 1_000, 250


def _setup(kafka: KafkaUnderTest, coordinator: str, tmp_path) -> StreamSetup:
    topic, group = kafka.new_topic(PARTITIONS), kafka.new_group()
    return DeltaSetup(kafka, topic, group, tmp_path) if coordinator == "delta" else StreamSetup(
        kafka, topic, group, tmp_path)


def _delete_unread(kafka: KafkaUnderTest, topic: str) -> dict[int, int]:
    """Move each partition's log start DELETED records past what the query read; returns the new log starts."""
    starts = {p: READ // PARTITIONS + DELETED for p in range(PARTITIONS)}
    wanted = [TopicPartition(topic, p, offset) for p, offset in starts.items()]
    for future in kafka.admin.delete_records(wanted).values():
        future.result(30)
    return starts


@pytest.mark.parametrize("coordinator", ["broker", "delta"])
def test_records_deleted_before_the_query_read_them_fail_it_unless_fail_on_data_loss_is_false(
        spark, kafka, tmp_path, coordinator):
    kafka.require_apache("DeleteRecords, and a broker group's start offsets and lag (KIP-1226)")
    setup = _setup(kafka, coordinator, tmp_path)
    read = kafka.produce_numbered(setup.topic, READ, PARTITIONS)
    first = setup.batch_sink(spark, maxRecordsPerTrigger=300)
    first.awaitTermination(120)
    assert first.exception() is None
    assert_exactly_once(setup.sink_rows(spark), read)
    unread = kafka.produce_numbered(setup.topic, UNREAD, PARTITIONS, first=READ)
    starts = _delete_unread(kafka, setup.topic)

    for attempt in (1, 2):  # the group stayed where it was: the second restart fails as the first
        failing = setup.batch_sink(spark, maxRecordsPerTrigger=300)
        with pytest.raises(StreamingQueryException) as failed:
            failing.awaitTermination(120)
        message = str(failed.value)
        for p, start in starts.items():
            named = (f"{setup.topic}[{p}] offsets {READ // PARTITIONS}-{start - 1}" if coordinator == "delta"
                     else rf"{setup.topic}[{p}] {DELETED} record(s) of offsets ")
            assert named in message, f"restart {attempt}: {message}"
        assert f"{DELETED * PARTITIONS} record(s) left the log before the share group processed them" in message
        assert "set failOnDataLoss=false" in message
        assert len(setup.sink_rows(spark)) == READ, "nothing was read past the loss"

    tolerant = setup.batch_sink(spark, maxRecordsPerTrigger=300, failOnDataLoss="false")
    tolerant.awaitTermination(120)
    assert tolerant.exception() is None
    left = {(p, v) for p, v in unread if int(v.split(b"-")[1]) // PARTITIONS >= starts[p]}  # record i: offset i // 2
    assert len(left) == UNREAD - DELETED * PARTITIONS
    assert_exactly_once(setup.sink_rows(spark), read | left)
    assert setup.progress()["lost_unread"] == DELETED * PARTITIONS


def _recreate(kafka: KafkaUnderTest, topic: str) -> None:
    """Delete ``topic`` and create it again under its name, as soon as the cluster lets it."""
    kafka.admin.delete_topics([topic])[topic].result(30)
    wait_for(lambda: topic not in kafka.admin.list_topics(timeout=5).topics, 30, "the topic to be gone")
    wait_for(lambda: _created(kafka, topic), 30, "the topic to be created again")


def _created(kafka: KafkaUnderTest, topic: str) -> bool:
    try:
        kafka.admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(30)
    except KafkaException as error:  # its deletion still under way
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        return False
    return True


def test_a_topic_deleted_and_created_again_under_a_running_broker_query_fails_it_naming_the_topic(
        spark, kafka, tmp_path):
    """A share group reads a topic created again as a new topic; the query stops there instead of going on as if
    the unread records of the old one had been read."""
    kafka.require_apache("topic ids (a broker group's state is keyed by them)")
    setup = StreamSetup(kafka, kafka.new_topic(PARTITIONS), kafka.new_group(), tmp_path)
    kafka.produce_numbered(setup.topic, 100, PARTITIONS)
    query = setup.batch_sink(spark, available_now=False, checkpointLocation=str(setup.checkpoint))
    try:
        wait_for(lambda: len(setup.sink_rows(spark)) >= 100, 120, "the records in the sink")
        _recreate(kafka, setup.topic)
        kafka.produce_numbered(setup.topic, 100, PARTITIONS, first=100)
        wait_for(lambda: not query.isActive, 60, "the query to fail")
    finally:
        query.stop()
    error = str(query.exception())
    # the watch asks every few seconds: it sees the topic gone, or (more likely) back with another id
    recreated = f"topic {setup.topic} was deleted and created again while the query read it"
    gone = f"a subscribed topic is gone while the query read it: topic '{setup.topic}' does not exist"
    assert recreated in error or gone in error, error


def test_a_topic_deleted_and_created_again_between_runs_of_a_delta_query_fails_it_naming_the_way_out(
        spark, kafka, tmp_path):
    """A Delta group's state is of the old log: read against the new one it would skip the new one's first records."""
    kafka.require_apache("DeleteTopics and CreateTopics")
    setup = DeltaSetup(kafka, kafka.new_topic(PARTITIONS), kafka.new_group(), tmp_path)
    kafka.produce_numbered(setup.topic, 200, PARTITIONS)
    setup.batch_sink(spark).awaitTermination(120)
    assert len(setup.sink_rows(spark)) == 200
    _recreate(kafka, setup.topic)
    kafka.produce_numbered(setup.topic, 20, PARTITIONS, first=200)
    again = setup.batch_sink(spark)
    with pytest.raises(StreamingQueryException) as failed:
        again.awaitTermination(120)
    message = str(failed.value)
    assert f"{setup.topic}[0] ends at offset 10, below the offset 100 the group has read it to" in message
    assert f"sharegroup delete-offsets <groupLocation> --topic {setup.topic} --execute" in message
