"""The share client and offset reader against a real Kafka protocol peer over TCP."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from sharegroup_source.acks import Ack, AckType
from sharegroup_source.coordinators.broker.share_client import ShareClient
from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.offset_reader import OffsetRangeReader
from sharegroup_testing.apache_kafka import ApacheKafka, create_topic
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for


def _consume(client: ShareClient, want: int, ack: AckType = AckType.ACCEPT, timeout_s: float = 30) -> list:
    """Poll until ``want`` records arrived, acknowledging each poll with ``ack``."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        records = client.poll(0.5)
        client.acknowledge(Ack(r.topic(), r.partition(), r.offset(), ack) for r in records)
        if records:
            assert all(result.ok for result in client.commit()), "acknowledgement failed"
        got.extend(records)
    return got


def _keys(records) -> list[tuple[int, int, int]]:
    return sorted((r.partition(), r.offset(), r.delivery_count()) for r in records)


def test_each_record_exactly_once_with_delivery_count_one(kafka: KafkaUnderTest):
    topic, group = kafka.new_topic(3), kafka.new_group()
    produced = kafka.produce_numbered(topic, 1000, 3)
    with ShareClient(kafka.config(**{"group.id": group}), [topic]) as client:
        assert client.partitions == {topic: 3}
        got = _consume(client, 1000)
        assert {(r.partition(), r.value()) for r in got} == produced
        assert len(got) == 1000
        assert {r.delivery_count() for r in got} == {1}
        assert client.poll(1.0) == [], "every record was accepted, nothing may come back"


def test_release_redelivers_with_delivery_count_two(kafka: KafkaUnderTest):
    topic, group = kafka.new_topic(1), kafka.new_group()
    kafka.produce_numbered(topic, 20, 1)
    with ShareClient(kafka.config(**{"group.id": group}), [topic]) as client:
        first = _consume(client, 20, AckType.RELEASE)
        again = _consume(client, 20)
    assert _keys(first) == [(0, o, 1) for o in range(20)]
    assert _keys(again) == [(0, o, 2) for o in range(20)]


def test_reject_is_never_redelivered(kafka: KafkaUnderTest):
    topic, group = kafka.new_topic(1), kafka.new_group()
    kafka.produce_numbered(topic, 10, 1)
    with ShareClient(kafka.config(**{"group.id": group}), [topic]) as client:
        assert len(_consume(client, 10, AckType.REJECT)) == 10
        kafka.produce_numbered(topic, 1, 1)  # a marker record proves the member is still fetching
        after = _consume(client, 1, timeout_s=10)
    assert _keys(after) == [(0, 10, 1)]


@pytest.mark.timing
def test_lock_expiry_redelivers(kafka: KafkaUnderTest):
    topic, group = kafka.new_topic(1), kafka.new_group(lock_duration_ms=1000)
    kafka.produce_numbered(topic, 5, 1)
    with ShareClient(kafka.config(**{"group.id": group}), [topic]) as client:
        held = wait_for(lambda: client.poll(0.5), 15, "the first acquisition")
        assert _keys(held) == [(0, o, 1) for o in range(5)]
        # not synchronisation: the lock's duration is what is under test; a broker frees expired
        # locks on a timer (every second on the embedded one), so the wait is the lock plus two ticks
        time.sleep(3.0)
        client.acknowledge(Ack(topic, 0, r.offset()) for r in held)
        late = client.commit()
        assert late and not late[0].ok, "an ack after the lock ended must not count"
        redelivered = _consume(client, 5, timeout_s=20)
    assert _keys(redelivered) == [(0, o, 2) for o in range(5)]


def test_delivery_attempt_limit_archives(kafka: KafkaUnderTest):
    topic, group = kafka.new_topic(1), kafka.new_group(delivery_attempt_limit=2)
    kafka.produce_numbered(topic, 3, 1)
    with ShareClient(kafka.config(**{"group.id": group}), [topic]) as client:
        first = _consume(client, 3, AckType.RELEASE)
        second = _consume(client, 3, AckType.RELEASE)
        kafka.produce_numbered(topic, 1, 1)
        third = _consume(client, 1, timeout_s=10)
    assert [r.delivery_count() for r in first + second] == [1, 1, 1, 2, 2, 2]
    assert _keys(third) == [(0, 3, 1)], "records past the delivery limit must be archived"


@pytest.mark.embedded
def test_injected_acknowledge_error_is_reported_for_its_partition(kafka: KafkaUnderTest):
    broker = kafka.require_embedded("fault injection")
    topic, group = kafka.new_topic(2), kafka.new_group()
    kafka.produce(topic, [(1, b"k", b"only-partition-1")])
    with ShareClient(kafka.config(**{"group.id": group}), [topic]) as client:
        records = wait_for(lambda: client.poll(0.5), 15, "the record")
        broker.fail_next("ShareAcknowledge", ["INVALID_RECORD_STATE"])
        client.acknowledge([Ack(topic, 1, records[0].offset())])
        results = client.commit()
    assert [(r.topic, r.partition) for r in results] == [(topic, 1)]
    assert results[0].error is not None and "INVALID_RECORD_STATE" in results[0].error


@pytest.mark.timing
def test_two_members_never_both_accept_a_record(kafka: KafkaUnderTest):
    """A record reaches a second member only when the first member's acknowledgement failed.

    The embedded broker drops every share session on a node when any connection to it closes
    (a new member's metadata check does), so failed acks are expected and counted, not hidden.
    """
    topic, group = kafka.new_topic(4), kafka.new_group()
    config = kafka.config(**{"group.id": group})
    accepted: dict[str, set[tuple[int, int]]] = {"a": set(), "b": set()}
    failed: dict[str, set[tuple[int, int]]] = {"a": set(), "b": set()}
    done = threading.Event()

    def member(name: str, client: ShareClient) -> None:
        while not done.is_set():
            records = client.poll(0.3)
            client.acknowledge(Ack(r.topic(), r.partition(), r.offset()) for r in records)
            if not records:
                continue
            bad_partitions = {result.partition for result in client.commit() if not result.ok}
            for r in records:
                outcome = failed if r.partition() in bad_partitions else accepted
                outcome[name].add((r.partition(), r.offset()))

    with ShareClient(config, [topic], max_poll_records=20) as a, ShareClient(config, [topic], max_poll_records=20) as b:
        threads = [threading.Thread(target=member, args=(n, c)) for n, c in (("a", a), ("b", b))]
        for thread in threads:
            thread.start()
        # produced in steps, each once the last is taken: a member learns that the other took some
        # of its partitions only at its next heartbeat (every 5 s), so steps go on until both had some
        produced = 0
        while produced < 2000 or (not (accepted["a"] and accepted["b"]) and produced < 6000):
            kafka.produce(topic, [(i % 4, str(i).encode(), b"v") for i in range(produced, produced + 100)])
            produced += 100
            wait_for(lambda want=produced: len(accepted["a"] | accepted["b"]) >= want, 60,
                     f"{produced} accepted records")
        done.set()
        for thread in threads:
            thread.join()
    assert not accepted["a"] & accepted["b"], "a record was accepted by two members"
    assert len(accepted["a"] | accepted["b"]) == produced
    assert accepted["a"] and accepted["b"], "both members must have taken part"
    seen_by_both = (accepted["a"] | failed["a"]) & (accepted["b"] | failed["b"])
    assert seen_by_both <= failed["a"] | failed["b"], "a record reached both members without a failed ack"


def test_range_reader_returns_exactly_the_asked_offsets_across_gaps(kafka: KafkaUnderTest):
    topic = kafka.new_topic(1)
    producer = Producer(kafka.config(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(30)
    for batch in range(3):  # each commit marker leaves a gap in the offsets
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=f"{batch}-{i}".encode(), partition=0)
        producer.commit_transaction(30)
    with OffsetRangeReader(kafka.config(), timeout_s=20) as reader:
        everything = reader.read(topic, 0, range(0, 18))
        data_offsets = sorted(m.offset() for m in everything.records)
        assert len(data_offsets) == 15
        markers = sorted(set(range(18)) - set(data_offsets))
        assert everything.gaps == markers and everything.missing == [], "markers inside the log are gaps, not a loss"
        asked = [data_offsets[1], data_offsets[4], data_offsets[5], data_offsets[14]]
        some = reader.read(topic, 0, asked)
        assert sorted(m.offset() for m in some.records) == asked
        assert [m.value() for m in sorted(some.records, key=lambda m: m.offset())] == [
            b"0-1", b"0-4", b"1-0", b"2-4"]
        assert some.missing == [] and some.gaps == []
        beyond = reader.read(topic, 0, [data_offsets[-1], 1000])
        assert [m.offset() for m in beyond.records] == [data_offsets[-1]] and beyond.missing == [1000]


@pytest.mark.timing
def test_range_reader_waits_for_a_node_that_comes_back(kafka: KafkaUnderTest):
    kafka.require_outages()
    topic = kafka.new_topic(1)
    kafka.produce_numbered(topic, 50, 1)
    results: list = []
    with OffsetRangeReader(kafka.config(), timeout_s=30) as reader:
        reader.read(topic, 0, [0])  # connected and warm, as an executor's reader is mid-query
        kafka.broker_down()
        replay = threading.Thread(target=lambda: results.append(reader.read(topic, 0, range(10, 20))))
        replay.start()
        replay.join(timeout=2)
        assert replay.is_alive(), "a replay must wait for the node, not fail"
        kafka.broker_up()
        replay.join(timeout=30)
    assert results, "the replay did not finish once the node was back"
    assert sorted(m.offset() for m in results[0].records) == list(range(10, 20)) and results[0].missing == []


def test_unknown_topic_is_one_clear_error(kafka: KafkaUnderTest):
    with pytest.raises(ClusterError, match="topic 'no-such-topic' does not exist"):
        ShareClient(kafka.config(**{"group.id": "g"}), ["no-such-topic"])
    # asking for it by name created nothing (both brokers create a topic a metadata request may create)
    assert "no-such-topic" not in kafka.admin.list_topics(timeout=10).topics


def test_unreachable_bootstrap_fails_within_the_timeout():
    started = time.monotonic()
    with pytest.raises(ClusterError, match=r"cannot reach Kafka at bootstrap.servers=127.0.0.1:1 within 2s"):
        ShareClient({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}, ["t"], metadata_timeout_s=2)
    assert time.monotonic() - started < 10


@pytest.mark.embedded
def test_a_broker_without_share_groups_is_named(kafka: KafkaUnderTest):
    if kafka.apache is not None:
        # Kafka's own answer: a second broker whose storage was formatted with share.version=0
        with ApacheKafka(share_groups=False) as plain:
            create_topic(AdminClient({"bootstrap.servers": plain.bootstrap_servers}), "t", 1)
            _assert_share_groups_refused({"bootstrap.servers": plain.bootstrap_servers}, "t", "g")
        return
    broker = kafka.require_embedded("simulating a broker without the share-group APIs")
    topic = kafka.new_topic(1)
    broker.fail_next("ShareGroupHeartbeat", ["UNSUPPORTED_VERSION"] * 5)
    _assert_share_groups_refused(kafka.config(), topic, kafka.new_group())


def _assert_share_groups_refused(config: dict, topic: str, group: str) -> None:
    with (ShareClient({**config, "group.id": group}, [topic]) as client,
          pytest.raises(ClusterError, match=r"does not support share groups .*coordinator=delta")):
        wait_for(lambda: client.poll(0.5), 10, "the heartbeat error")
