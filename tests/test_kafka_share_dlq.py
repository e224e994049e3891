"""Kafka 4.4's own dead-letter queue for share groups (KIP-1191) beside the source's ``dead_letters`` table.

From Kafka 4.4 (feature ``share.version=2``) a share group can name a DLQ topic (group config
``errors.deadletterqueue.topic.name``; the topic must start with the broker's
``errors.deadletterqueue.topic.name.prefix``, ``dlq.`` by default, and have the topic config
``errors.deadletterqueue.group.enable=true``). The broker then writes every record it archives
because a member REJECTed it, or because its delivery count reached ``share.delivery.count.limit``,
to that topic before archiving it, with ``__dlq.errors.*`` headers (the record's topic, partition,
offset, group, delivery count and why) and, with ``errors.deadletterqueue.copy.record.enable``,
its key and value.

The source's REJECT is a ShareAcknowledge REJECT, so on such a group a rejected record lands in
both: the ``dead_letters`` table (with the user's reason) and the broker's DLQ topic (with the
broker's). Apache Kafka only: the embedded broker has no DLQ, and the feature is 4.4's.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from pyspark.sql import functions as F

import sharegroup_source
from sharegroup_testing.apache_kafka import set_group_configs
from sharegroup_testing.jars import KAFKA_VERSION_ENV, kafka_version
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from state_store import StateStore
from state_store.dead_letters import DELIVERY_LIMIT_REASON
from tests.scenarios import assert_exactly_once, invalid_json_rejected_into_dead_letters
from tests.streams import StreamSetup

pytestmark = pytest.mark.spark

#: What the broker says in ``__dlq.errors.message``: a member rejected the record, or the broker archived it
#: at the group's ``share.delivery.count.limit``.
REJECTED_BY_CLIENT = "Offset rejected by client."
DELIVERY_COUNT_EXCEEDED = "Offset delivery count exceeded the threshold."


def _share_version(kafka: KafkaUnderTest) -> int | None:
    """The finalized ``share.version`` the broker reports (kafka-features describe)."""
    assert kafka.apache is not None
    described = kafka.apache.run_tool("kafka-features", "--bootstrap-server", kafka.bootstrap_servers, "describe")
    assert described.returncode == 0, described.stderr
    for line in described.stdout.splitlines():
        fields = line.split()
        if fields[:2] == ["Feature:", "share.version"]:
            return int(fields[fields.index("FinalizedVersionLevel:") + 1])
    return None


@pytest.fixture
def dlq_kafka(kafka: KafkaUnderTest) -> KafkaUnderTest:
    """The session's Apache Kafka with ``share.version=2`` (the operator's step: ``kafka-features upgrade``).

    Only groups that name a DLQ topic behave differently, so the other tests of the session are not affected.
    """
    apache = kafka.require_apache("its share-group dead-letter queue, KIP-1191")
    version = kafka_version()
    if tuple(int(part) for part in version.split(".")[:2]) < (4, 4):
        pytest.skip(f"needs Apache Kafka 4.4 or later (share.version=2, KIP-1191); this run's broker is {version} "
                    f"({KAFKA_VERSION_ENV})")
    if _share_version(kafka) != 2:
        upgraded = apache.run_tool("kafka-features", "--bootstrap-server", kafka.bootstrap_servers, "upgrade",
                                   "--feature", "share.version=2")
        assert upgraded.returncode == 0, f"{upgraded.stdout}{upgraded.stderr}"
        wait_for(lambda: _share_version(kafka) == 2, 30, "share.version=2 to be finalized")
    return kafka


def _dlq_topic(kafka: KafkaUnderTest, group: str) -> str:
    """A DLQ topic for ``group``: the broker's default name prefix, and the topic config that allows it."""
    name = f"dlq.{group}"
    kafka.admin.create_topics([NewTopic(name, 1, 1, config={"errors.deadletterqueue.group.enable": "true"})])[
        name].result(30)
    return name


def _read_topic(kafka: KafkaUnderTest, topic: str, count: int) -> list:
    """Every record of the one-partition ``topic``, once its end offset reached ``count``."""
    consumer = Consumer(kafka.config(**{"group.id": f"reader-{topic}", "enable.auto.commit": False}))
    try:
        wait_for(lambda: consumer.get_watermark_offsets(TopicPartition(topic, 0), 5)[1] >= count, 60,
                 f"{count} records in {topic}",
                 state=lambda: f"end offset {consumer.get_watermark_offsets(TopicPartition(topic, 0), 5)[1]}")
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), 5)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        records: list = []

        def read_to_the_end() -> bool:
            records.extend(message for message in consumer.consume(500, 0.5) if message.error() is None)
            return len(records) >= end

        wait_for(read_to_the_end, 60, f"the {end} records of {topic}", interval_s=0)
        return records
    finally:
        consumer.close()


def _dlq_record(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, group: str,
                delivery_count: int, message: str) -> tuple:
    """A DLQ record as :func:`_dlq_records` shows it: the original's coordinates, key and value, and the
    broker's other ``__dlq.errors.*`` headers."""
    return (topic, partition, offset, key, value, (("__dlq.errors.delivery.count", str(delivery_count)),
                                                   ("__dlq.errors.group", group), ("__dlq.errors.message", message)))


def _dlq_records(messages: list) -> collections.Counter:
    """What the DLQ topic holds, record by record (duplicates counted)."""
    records: collections.Counter = collections.Counter()
    for message in messages:
        headers = {name: value.decode() for name, value in message.headers() or [] if name.startswith("__dlq.")}
        records[(headers.pop("__dlq.errors.topic"), int(headers.pop("__dlq.errors.partition")),
                 int(headers.pop("__dlq.errors.offset")), message.key(), message.value(),
                 tuple(sorted(headers.items())))] += 1
    return records


@pytest.mark.timing
def test_a_rejected_record_reaches_dead_letters_and_the_brokers_dlq_topic(dlq_kafka, spark, tmp_path: Path):
    kafka = dlq_kafka
    setup = StreamSetup(kafka, kafka.new_topic(2), kafka.new_group(), tmp_path)
    dlq = _dlq_topic(kafka, setup.group)
    set_group_configs(kafka.admin, setup.group, {"errors.deadletterqueue.topic.name": dlq,
                                                 "errors.deadletterqueue.copy.record.enable": "true"})
    # every 33rd record is not JSON (13 of 400): the source's dead letters have each, with the user's reason
    invalid, letters = invalid_json_rejected_into_dead_letters(spark, setup, 400, 2, max_records=100)

    # the broker's DLQ topic: the same records, once each, with the broker's context headers
    in_dlq = _read_topic(kafka, dlq, len(invalid))
    assert _dlq_records(in_dlq) == collections.Counter(
        _dlq_record(r["topic"], r["partition"], r["offset"], r["key"], r["value"], setup.group, r["delivery_count"],
                    REJECTED_BY_CLIENT)
        for r in letters)


@pytest.mark.timing
@pytest.mark.parametrize("who_gives_up", ["source", "broker"])
def test_a_record_released_until_a_delivery_limit(dlq_kafka, spark, tmp_path: Path, who_gives_up: str):
    """A record the query RELEASEs every time it comes: the first limit reached decides where it ends.

    ``source``: the source's ``maxDeliveries`` (2) is below the group's ``share.delivery.count.limit`` (5): the
    source rejects the third delivery, so the record is in ``dead_letters`` and, REJECTed, in the DLQ topic.
    ``broker``: no ``maxDeliveries``, a limit of 2: the broker archives the record after its second release and
    writes it to the DLQ topic; the source, which gave it back on its last attempt, keeps it in ``dead_letters``
    with the group's reason: the two meet, each with its own words.
    """
    kafka = dlq_kafka
    limit, options = (5, {"maxDeliveries": 2}) if who_gives_up == "source" else (2, {})
    setup = StreamSetup(kafka, kafka.new_topic(2), kafka.new_group(delivery_attempt_limit=limit), tmp_path)
    dlq = _dlq_topic(kafka, setup.group)
    set_group_configs(kafka.admin, setup.group, {"errors.deadletterqueue.topic.name": dlq,
                                                 "errors.deadletterqueue.copy.record.enable": "true"})
    records = [(i % 2, str(i).encode(), b"poison" if i in (3, 8) else f"record-{i}".encode()) for i in range(20)]
    kafka.produce(setup.topic, records)
    valid = {(p, v) for p, _, v in records if v != b"poison"}
    poison = [(p, k, v) for p, k, v in records if v == b"poison"]

    def handle(batch, _batch_id):
        is_poison = F.col("value").cast("string") == "poison"
        sharegroup_source.acknowledge(batch.filter(is_poison), "RELEASE", options=setup.options())
        return batch.filter(~is_poison)

    query = setup.batch_sink(spark, handle, available_now=False, checkpointLocation=str(setup.checkpoint),
                             **options)
    watch = Consumer(kafka.config(**{"group.id": f"watch-{dlq}"}))

    def dlq_end() -> int:
        return watch.get_watermark_offsets(TopicPartition(dlq, 0), 5)[1]

    try:
        wait_for(lambda: len(setup.sink_rows(spark)) >= len(valid) and setup.every_epoch_acked()
                 and dlq_end() >= len(poison)
                 and setup.progress().get("dead_lettered", 0) >= len(poison),
                 240, f"{len(valid)} rows in the sink, every epoch acknowledged "
                 f"and {len(poison)} records in {dlq}", state=lambda: f"{setup.describe(spark)}, {dlq_end()} in {dlq}")
    finally:
        query.stop()
        watch.close()
    assert_exactly_once(setup.sink_rows(spark), valid)

    # (partition, offset) of the poison records: produced in order, two partitions, offsets count per partition
    offsets = {(p, k): sum(1 for q, _, _ in records[:int(k)] if q == p) for p, k, _ in poison}
    letters = StateStore(str(setup.state)).dead_letters.read().to_pylist()
    in_dlq = _dlq_records(_read_topic(kafka, dlq, len(poison)))
    if who_gives_up == "source":
        expected_letters = {(setup.topic, p, offsets[(p, k)], k, v, "max deliveries exceeded", 3) for p, k, v in poison}
        expected_dlq = collections.Counter(_dlq_record(setup.topic, p, offsets[(p, k)], k, v, setup.group, 3,
                                                       REJECTED_BY_CLIENT) for p, k, v in poison)
    else:
        expected_letters = {(setup.topic, p, offsets[(p, k)], k, v, DELIVERY_LIMIT_REASON, limit) for p, k, v in poison}
        expected_dlq = collections.Counter(_dlq_record(setup.topic, p, offsets[(p, k)], k, v, setup.group, limit,
                                                       DELIVERY_COUNT_EXCEEDED) for p, k, v in poison)
    assert {(r["topic"], r["partition"], r["offset"], r["key"], r["value"], r["reason"], r["delivery_count"])
            for r in letters} == expected_letters
    assert in_dlq == expected_dlq
