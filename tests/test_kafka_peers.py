"""How each Kafka peer behaves, pinned with plain confluent-kafka ShareConsumers (no Spark).

The suite runs on two peers: Apache Kafka's own broker (the truth) and librdkafka's mock
cluster (the embedded broker). Where they differ, the test states what each one does
(``{...}[kafka.kind]``), so a change on either side shows up here first. The figures are
written up in docs/kafka-peers.md; ``-s`` prints the ones measured in this run.

Both peers heartbeat every 5 s. Kafka hands a new member its partitions with its second
heartbeat, so its first records come about 5 s after it subscribes; the mock answers at once.
The tests wait for records with bounded timeouts, never for a fixed time.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, IllegalStateException, Message, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient

from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for

pytestmark = pytest.mark.embedded  # the peers themselves: both run every test here

#: Kafka's heartbeat interval for share groups and the mock's (both 5 s by default).
HEARTBEAT_S = 5.0


def _member(kafka: KafkaUnderTest, group: str, topics: list[str], **config: Any) -> ShareConsumer:
    """A share-group member with explicit acknowledgement, as the connector's driver is."""
    consumer = ShareConsumer(kafka.config(**{
        "group.id": group, "share.acknowledgement.mode": "explicit", "log_level": 3, **config}))
    consumer.subscribe(topics)
    return consumer


def _poll(consumer: ShareConsumer, timeout_s: float) -> list[Message]:
    """One poll's records; retriable errors (a lost share session) are the broker's to recover."""
    records = []
    for message in consumer.poll(timeout_s):
        error = message.error()
        if error is None:
            records.append(message)
        else:
            assert error.retriable() and not error.fatal(), f"share fetch failed: {error}"
    return records


def _acquire(consumer: ShareConsumer, timeout_s: float) -> list[Message]:
    """Poll until records come; they stay acquired (locked) for this member, unacknowledged."""
    return wait_for(lambda: _poll(consumer, 0.2), timeout_s, "records for the member")


def _accept_all(consumer: ShareConsumer, records: list[Message]) -> dict[int, str | None]:
    """ACCEPT ``records`` and commit: the error name per partition (None where it was taken)."""
    for record in records:
        consumer.acknowledge(record, AcknowledgeType.ACCEPT)
    results = consumer.commit_sync(30) if records else {}
    return {tp.partition: None if error is None else error.args[0].name() for tp, error in results.items()}


def _consume_until(consumer: ShareConsumer, done: Callable[[list[Message]], bool], timeout_s: float,
                   also: Callable[[], None] = lambda: None) -> list[Message]:
    """Poll, ACCEPT and commit until ``done(everything so far)``; ``also`` runs between polls."""
    got: list[Message] = []

    def step() -> bool:
        also()
        records = _poll(consumer, 0.2)
        _accept_all(consumer, records)
        got.extend(records)
        return done(got)

    wait_for(step, timeout_s, "the expected records", interval_s=0)
    return got


class _Feed:
    """One producer for the whole test, connected before any member joins.

    On the embedded broker any client connection that closes drops every share session on the
    node, so a producer per send would disturb the members under test.
    """

    def __init__(self, kafka: KafkaUnderTest):
        self._producer = Producer(kafka.config(**{"linger.ms": 0, "log_level": 3}))
        assert self._producer.list_topics(timeout=15).brokers, "the producer did not connect"

    def send(self, topic: str, value: bytes, partition: int = 0) -> None:
        self._producer.produce(topic, value=value, partition=partition)
        assert self._producer.flush(15) == 0, f"could not produce to {topic}"

    def close(self) -> None:
        """Close now, inside the test: a producer left to the garbage collector would close its
        connection during some later test, and drop that test's share sessions on the mock."""
        self._producer.close()


@contextmanager
def _closing(*clients: ShareConsumer | _Feed) -> Iterator[None]:
    try:
        yield
    finally:
        for client in clients:
            client.close()


# -- 1. assignment ----------------------------------------------------------------------------

#: (partitions, members) -> (partitions per member, sorted; members per partition), once settled.
#: Kafka's SimpleAssignor: each partition goes to ceil(members / partitions) members, and the
#: member counts differ by at most one. The mock: each partition goes to exactly one member, in
#: join order; members beyond the partition count get nothing.
ASSIGNMENT = {
    "apache": {
        (2, 1): ([2], 1), (2, 2): ([1, 1], 1), (2, 5): ([1, 1, 1, 1, 2], 3),
        (4, 1): ([4], 1), (4, 2): ([2, 2], 1), (4, 5): ([1, 1, 2, 2, 2], 2),
    },
    "embedded": {
        (2, 1): ([2], 1), (2, 2): ([1, 1], 1), (2, 5): ([0, 0, 0, 1, 1], 1),
        (4, 1): ([4], 1), (4, 2): ([2, 2], 1), (4, 5): ([0, 1, 1, 1, 1], 1),
    },
}
#: A member's partitions are those it got records from in the last WINDOW_S; an assignment
#: counts as settled when that picture stayed the same for longer than a heartbeat.
WINDOW_S = 3.0
SETTLED_S = HEARTBEAT_S + 1.0


class _PollingMember(threading.Thread):
    """A member on its own thread: polls, ACCEPTs, commits, and notes where records came from."""

    def __init__(self, kafka: KafkaUnderTest, group: str, topic: str):
        super().__init__(daemon=True)
        self._subscription = (kafka, group, [topic])
        self.stopping = threading.Event()
        self.polled = threading.Event()
        self._lock = threading.Lock()
        self._seen: list[tuple[float, int]] = []

    def run(self) -> None:
        consumer = _member(*self._subscription)
        try:
            while not self.stopping.is_set():
                records = _poll(consumer, 0.2)
                _accept_all(consumer, records)  # a lost ack only means a redelivery: not under test here
                now = time.monotonic()
                with self._lock:
                    self._seen.extend((now, record.partition()) for record in records)
                self.polled.set()
        finally:
            consumer.close()

    def partitions_since(self, since: float) -> frozenset[int]:
        with self._lock:
            return frozenset(partition for at, partition in self._seen if at >= since)


def _shape(partitions: int, seen: list[frozenset[int]]) -> tuple[list[int], list[int]]:
    """(partitions per member, sorted; members per partition, by partition)."""
    return sorted(len(s) for s in seen), [sum(p in s for s in seen) for p in range(partitions)]


@pytest.mark.timing
def test_assignment_of_1_2_and_5_members_over_2_and_4_partitions(kafka: KafkaUnderTest):
    topics = {partitions: kafka.new_topic(partitions) for partitions in (2, 4)}
    groups = {(partitions, size): [_PollingMember(kafka, group, topics[partitions]) for _ in range(size)]
              for partitions in topics for size in (1, 2, 5) for group in [kafka.new_group()]}
    members = [member for group in groups.values() for member in group]
    feed = _Feed(kafka)
    stop_feeding = threading.Event()

    def feeding() -> None:  # a record per partition every 0.1 s, so every assigned member keeps getting some
        while not stop_feeding.is_set():
            for partitions, topic in topics.items():
                for partition in range(partitions):
                    feed.send(topic, b"x", partition)
            stop_feeding.wait(0.1)

    feeder = threading.Thread(target=feeding, daemon=True)
    unchanged_since: dict[tuple[int, int], tuple[float, Any]] = {}
    settled: dict[tuple[int, int], tuple[list[int], list[int]]] = {}

    def all_settled() -> bool:
        now = time.monotonic()
        for key, group in groups.items():
            shape = _shape(key[0], [member.partitions_since(now - WINDOW_S) for member in group])
            since, last = unchanged_since.get(key, (now, None))
            if shape != last or not any(shape[0]):
                unchanged_since[key] = (now, shape)
                settled.pop(key, None)
            elif now - since >= SETTLED_S:
                settled[key] = shape
        return len(settled) == len(groups)

    try:
        for member in members:
            member.start()
        feeder.start()
        for member in members:
            assert member.polled.wait(30), "a member never returned from its first poll"
        try:
            wait_for(all_settled, 60, "every group's assignment to settle", interval_s=0.25)
        except AssertionError as error:
            last = {key: shape for key, (_, shape) in unchanged_since.items()}
            raise AssertionError(f"{error}; last seen (partitions per member, members per partition): {last}") from None
    finally:
        stop_feeding.set()
        if feeder.is_alive():
            feeder.join()
        feed.close()
        for member in members:
            member.stopping.set()
        for member in members:
            if member.is_alive():
                member.join()
    print(f"\n[{kafka.kind}] settled assignment, (partitions, members) -> "
          f"(partitions per member, members per partition): {settled}")
    expected = {key: (counts, [sharing] * key[0]) for key, (counts, sharing) in ASSIGNMENT[kafka.kind].items()}
    assert settled == expected


# -- 2. another client's connection closing ---------------------------------------------------

def _short_lived_client(kafka: KafkaUnderTest, kind: str, scratch_topic: str) -> None:
    """Connect, do one thing, disconnect: what a metadata check or a one-off producer does."""
    if kind == "admin":
        admin = AdminClient(kafka.config(log_level=3))
        assert admin.list_topics(timeout=15).brokers
        del admin  # destroyed: its connections close now
    else:
        producer = Producer(kafka.config(log_level=3))
        producer.produce(scratch_topic, value=b"elsewhere", partition=0)
        assert producer.flush(15) == 0
        producer.close()


@pytest.mark.timing
def test_another_client_disconnecting_between_poll_and_ack(kafka: KafkaUnderTest):
    """The embedded broker drops every share session on the node when any connection closes:
    the member's ack fails with SHARE_SESSION_NOT_FOUND and the record comes back at once with
    its delivery count raised. Apache Kafka keeps the member's session: the ack counts."""
    lock_ms = 30_000
    topic, scratch, group = kafka.new_topic(1), kafka.new_topic(1), kafka.new_group(lock_duration_ms=lock_ms)
    feed = _Feed(kafka)
    consumer = _member(kafka, group, [topic])
    outcomes = {}
    with _closing(consumer, feed):
        for closer in ("admin", "producer"):
            feed.send(topic, f"{closer}-held".encode())
            held = _acquire(consumer, 30)
            assert [m.value() for m in held] == [f"{closer}-held".encode()]
            _short_lived_client(kafka, closer, scratch)
            ack = _accept_all(consumer, held)
            acked_at = time.monotonic()
            feed.send(topic, f"{closer}-marker".encode())
            after = _consume_until(consumer, lambda got, c=closer: f"{c}-marker".encode() in {m.value() for m in got},
                                   30)
            outcomes[closer] = (ack, sorted((m.value().decode(), m.delivery_count()) for m in after),
                                round(time.monotonic() - acked_at, 2))
    print(f"\n[{kafka.kind}] closer -> (ack result, records after it, seconds to the marker): {outcomes}")
    for closer, (ack, after, seconds) in outcomes.items():
        expected = {
            "embedded": ({0: "SHARE_SESSION_NOT_FOUND"}, [(f"{closer}-held", 2), (f"{closer}-marker", 1)]),
            "apache": ({0: None}, [(f"{closer}-marker", 1)]),
        }[kafka.kind]
        assert (ack, after) == expected, closer
        assert seconds < lock_ms / 1000 / 2, "a lost session frees its records at once, not at lock expiry"


# -- 3. lock expiry ---------------------------------------------------------------------------

@pytest.mark.timing
def test_lock_expiry_hands_held_records_to_a_member_that_joins(kafka: KafkaUnderTest):
    """Member A acquires two records and does not acknowledge them; member B joins the group.

    Apache Kafka: B gets them when A's lock ends (the lock duration plus well under a second),
    with delivery count 2. A's late ack of a record B holds fails (INVALID_RECORD_STATE); its
    late ack of a record B has already ACCEPTed is reported as a success. The lock is longer
    than a heartbeat because Kafka gives a joining member its partitions at its second
    heartbeat (~5 s). Embedded broker: B's connecting (its bootstrap connection closes) drops
    A's share session, so B gets the records at once; A's first late ack fails with
    SHARE_SESSION_NOT_FOUND, its second with INVALID_SHARE_SESSION_EPOCH.
    """
    lock_s = 8.0
    # Kafka shares the single partition between A and B (two members, one partition); the
    # mock gives each partition to one member, in join order, so there B gets partition 1 of 2.
    partitions = {"apache": 1, "embedded": 2}[kafka.kind]
    partition = partitions - 1
    topic, group = kafka.new_topic(partitions), kafka.new_group(lock_duration_ms=int(lock_s * 1000))
    kafka.produce(topic, [(partition, None, b"r1"), (partition, None, b"r2")])
    holder = _member(kafka, group, [topic])
    with _closing(holder):
        held = _acquire(holder, 30)
        acquired_at = time.monotonic()
        joiner = _member(kafka, group, [topic])
        with _closing(joiner):
            got = wait_for(lambda: _poll(joiner, 0.2), lock_s + 30, "the held records for the joining member")
            waited = time.monotonic() - acquired_at
            late_while_held = _accept_all(holder, [m for m in held if m.value() == b"r1"])
            assert all(error is None for error in _accept_all(joiner, got).values())
            late_after_accept = _accept_all(holder, [m for m in held if m.value() == b"r2"])
    print(f"\n[{kafka.kind}] lock {lock_s:.0f} s: the joining member got the held records after {waited:.2f} s, "
          f"delivery counts {[m.delivery_count() for m in got]}; the holder's late ack while the joiner held "
          f"the record: {late_while_held}, after the joiner accepted it: {late_after_accept}")
    assert sorted((m.value(), m.delivery_count()) for m in held) == [(b"r1", 1), (b"r2", 1)]
    assert sorted((m.value(), m.delivery_count()) for m in got) == [(b"r1", 2), (b"r2", 2)]
    earliest, latest = {"apache": (lock_s - 0.2, lock_s + 2.0), "embedded": (0.0, 2.0)}[kafka.kind]
    assert earliest <= waited <= latest
    expected = {"apache": ("INVALID_RECORD_STATE", None),
                "embedded": ("SHARE_SESSION_NOT_FOUND", "INVALID_SHARE_SESSION_EPOCH")}[kafka.kind]
    assert (late_while_held, late_after_accept) == ({partition: expected[0]}, {partition: expected[1]})


# -- 4. delivery count ------------------------------------------------------------------------

def test_delivery_count_rises_with_each_release_until_the_limit_archives(kafka: KafkaUnderTest):
    """Message.delivery_count() is the broker's count: 1, then +1 per RELEASE (and per expired
    lock or lost session, see the tests above); at the group's delivery limit a RELEASE archives
    the record. An explicit-mode member cannot poll while a record is unacknowledged."""
    assert callable(getattr(Message, "delivery_count", None))
    topic, group = kafka.new_topic(1), kafka.new_group(delivery_attempt_limit=3)
    kafka.produce(topic, [(0, None, b"r")])
    consumer = _member(kafka, group, [topic])
    counts = []
    with _closing(consumer):
        for _ in range(3):
            records = _acquire(consumer, 30)
            counts += [(m.value(), m.delivery_count()) for m in records]
            with pytest.raises(IllegalStateException, match="not been acknowledged"):
                consumer.poll(0.1)
            for record in records:
                consumer.acknowledge(record, AcknowledgeType.RELEASE)
            assert all(error is None for error in consumer.commit_sync(30).values())
        kafka.produce(topic, [(0, None, b"marker")])
        after = _consume_until(consumer, lambda got: b"marker" in {m.value() for m in got}, 30)
    assert counts == [(b"r", 1), (b"r", 2), (b"r", 3)]
    assert [(m.value(), m.delivery_count()) for m in after] == [(b"marker", 1)], "r must be archived"


# -- 5. in-flight records per share-partition ---------------------------------------------------

def test_in_flight_limit_and_max_poll_records_kafka_counts_whole_batches(kafka: KafkaUnderTest):
    """group.share.partition.max.record.locks (2,000 on both peers), one member, no acks; and
    max.poll.records=500 for a member of a second group.

    Kafka acquires whole producer batches: while fewer than 2,000 records are in flight it
    takes the next batch, so three batches of 700 give 2,100 at once, and a poll limited to
    500 records still gets a whole batch of 700. The mock counts records: exactly 2,000 and
    exactly 500.
    """
    topic, unlimited, limited = kafka.new_topic(1), kafka.new_group(), kafka.new_group()
    producer = Producer(kafka.config(**{"linger.ms": 10_000, "log_level": 3}))
    for first in range(0, 2500, 700):  # flush sends each chunk as one batch
        for i in range(first, min(first + 700, 2500)):
            producer.produce(topic, value=str(i).encode(), partition=0)
        assert producer.flush(15) == 0
    producer.close()
    # The small member polls first: on the embedded broker a client's connecting (its bootstrap
    # connection closes) drops every share session on the node, so the member that ACCEPTs must be
    # the last to join; the small member's records are never acknowledged.
    small = _member(kafka, limited, [topic], **{"max.poll.records": 500})
    with _closing(small):
        first_small_poll = _acquire(small, 30)
        consumer = _member(kafka, unlimited, [topic], **{"max.poll.records": 10_000})
        with _closing(consumer):
            first_poll = _acquire(consumer, 30)
            assert _accept_all(consumer, first_poll) == {0: None}
            rest = _consume_until(consumer, lambda got: len(first_poll) + len(got) >= 2500, 30)
    print(f"\n[{kafka.kind}] 2,500 records in batches of 700: the first poll acquired {len(first_poll)}; "
          f"with max.poll.records=500, {len(first_small_poll)}")
    assert len(first_poll) == {"apache": 2100, "embedded": 2000}[kafka.kind]
    assert len(first_small_poll) == {"apache": 700, "embedded": 500}[kafka.kind]
    assert sorted(m.offset() for m in first_poll + rest) == list(range(2500))


# -- 6. share.auto.offset.reset ----------------------------------------------------------------

@contextmanager
def _latest_is_the_default(kafka: KafkaUnderTest) -> Iterator[None]:
    """Make ``latest`` what a group gets when nothing is set for it.

    That is Kafka's default already. The mock has one cluster-wide setting, which the suite's
    EmbeddedBroker sets to earliest: switch it, and always switch it back.
    """
    broker = kafka.embedded
    if broker is None:
        yield
        return
    broker.set_auto_offset_reset("latest")
    try:
        yield
    finally:
        broker.set_auto_offset_reset("earliest")


def test_auto_offset_reset_is_per_group_on_kafka_and_cluster_wide_on_the_mock(kafka: KafkaUnderTest):
    topic = kafka.new_topic(1)
    kafka.produce(topic, [(0, None, f"old-{i}".encode()) for i in range(3)])
    old = {b"old-0", b"old-1", b"old-2"}
    earliest = _member(kafka, kafka.new_group(), [topic])  # share.auto.offset.reset=earliest for this group
    with _closing(earliest):
        from_earliest = _consume_until(earliest, lambda got: len(got) >= 3, 30)
    feed = _Feed(kafka)
    with _latest_is_the_default(kafka):
        unset = _member(kafka, f"g-{uuid.uuid4().hex[:8]}", [topic])  # nothing set for this group
        # set to earliest for this group, which the mock cannot do (its setting is cluster-wide)
        configured = _member(kafka, kafka.new_group(), [topic])
        with _closing(unset, configured, feed):
            sent = iter(range(1000))

            def produce_new() -> None:
                feed.send(topic, f"new-{next(sent)}".encode())

            def has_new(got: list[Message]) -> bool:
                return any(m.value().startswith(b"new-") for m in got)

            from_unset = _consume_until(unset, has_new, 30, also=produce_new)
            from_configured = _consume_until(configured, has_new, 30, also=produce_new)
    values = {name: {m.value() for m in got} for name, got in
              (("earliest", from_earliest), ("unset", from_unset), ("configured", from_configured))}
    seen_old = {name: sorted(v & old) for name, v in values.items()}
    print(f"\n[{kafka.kind}] old records seen per group: {seen_old}")
    assert values["earliest"] == old
    assert not values["unset"] & old, "a group left at the default (latest) must not get old records"
    assert values["configured"] & old == {"apache": old, "embedded": set()}[kafka.kind]
