"""DeltaShareConsumer: a plain Python worker of a Delta-coordinated share group, shaped like ShareConsumer.

Real Delta tables and both Kafka peers, no Spark. What the consumers got is compared with what
was produced, record by record, and the group's tables say what is left in the queue.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, IllegalStateException, KafkaError, Producer

from sharegroup_source import DeltaShareConsumer
from sharegroup_source.coordinators.delta.member import GroupMember
from sharegroup_source.errors import ClusterError
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from state_store import DeadLetters, GroupSettingsError, RecordState
from state_store.group import GroupStore
from tests.delta_worker import spawn
from tests.streams import burning_cpu

Record = tuple[int, bytes, int]  # partition, value, delivery count


def worker_config(kafka: KafkaUnderTest, group: str, group_location: Path, **extra: Any) -> dict[str, Any]:
    """A worker's config for ``group`` at ``group_location``, reading from the earliest offset."""
    return {"bootstrap.servers": kafka.bootstrap_servers, "group.id": group, "group.location": str(group_location),
            "share.auto.offset.reset": "earliest", **extra}


def accept_until(consumer: DeltaShareConsumer, count: int, timeout_s: float = 60) -> list[Record]:
    """Poll, ACCEPT and commit until ``count`` records came; every commit must take."""
    got: list[Record] = []

    def enough() -> bool:
        messages = consumer.poll(0.5)
        for message in messages:
            consumer.acknowledge(message)
        results = consumer.commit_sync()
        assert all(error is None for error in results.values()), results
        got.extend((m.partition(), m.value(), m.delivery_count()) for m in messages)
        return len(got) >= count

    wait_for(enough, timeout_s, f"{count} records", interval_s=0, state=lambda: f"{len(got)} got")
    return got


def poll_until_some(consumer: DeltaShareConsumer, timeout_s: float = 60) -> list:
    return wait_for(lambda: consumer.poll(0.5), timeout_s, "records", interval_s=0)


def tell(worker: subprocess.Popen, line: str) -> None:
    worker.stdin.write(line + "\n")
    worker.stdin.flush()


def group_left(group_location: Path) -> bool:
    return all(m.left_at_ms is not None for m in GroupStore.existing(str(group_location)).members())


def in_flight(group_location: Path) -> list:
    """State batches not acknowledged yet, over every share-partition of the group."""
    partitions = GroupStore.existing(str(group_location)).share_state.partitions().values()
    return [b for sp in partitions for b in sp.batches if b.state is not RecordState.ACKNOWLEDGED]


class Names:
    """A test's topic, group and group location."""

    def __init__(self, kafka: KafkaUnderTest, tmp_path: Path, partitions: int):
        self.kafka = kafka
        self.topic = kafka.new_topic(partitions)
        self.group = f"g-{tmp_path.name[-20:]}"
        self.location = tmp_path / "group"

    def config(self, **extra: Any) -> dict[str, Any]:
        return worker_config(self.kafka, self.group, self.location, **extra)


def test_every_record_exactly_once_in_polls_of_max_poll_records(kafka, tmp_path):
    names = Names(kafka, tmp_path, partitions=2)
    produced = kafka.produce_numbered(names.topic, 100, 2)
    got: list[Record] = []
    sizes: list[int] = []
    with DeltaShareConsumer(names.config(**{"max.poll.records": 30})) as consumer:
        consumer.subscribe([names.topic])

        def everything() -> bool:
            messages = consumer.poll(0.5)
            sizes.append(len(messages))
            for message in messages:
                assert message.error() is None and message.topic() == names.topic
                consumer.acknowledge(message)
            results = consumer.commit_sync()
            partitions = {m.partition() for m in messages}
            assert {(tp.topic, tp.partition) for tp in results} == {(names.topic, p) for p in partitions}
            assert all(error is None for error in results.values()), results
            got.extend((m.partition(), m.value(), m.delivery_count()) for m in messages)
            return len(got) >= 100

        wait_for(everything, 60, "100 records", interval_s=0, state=lambda: f"{len(got)} got")
        member = consumer.member_id
    counts = collections.Counter((p, v) for p, v, _ in got)
    assert set(counts) == produced and set(counts.values()) == {1}
    assert {dc for _, _, dc in got} == {1}
    assert max(sizes) == 30, sizes
    members = GroupStore.existing(str(names.location)).members()
    assert [(m.member_id, m.kind) for m in members] == [(member, "worker")] and members[0].left_at_ms is not None
    assert in_flight(names.location) == []


def test_poll_refuses_while_records_of_the_previous_poll_are_unacknowledged(kafka, tmp_path):
    names = Names(kafka, tmp_path, partitions=1)
    produced = kafka.produce_numbered(names.topic, 10, 1)
    consumer = DeltaShareConsumer(names.config())
    with pytest.raises(IllegalStateException, match="not subscribed"):
        consumer.poll(0)
    consumer.subscribe([names.topic])
    messages = poll_until_some(consumer)
    first, last = messages[0], messages[-1]
    for message in messages[:-1]:
        consumer.acknowledge(message)
    with pytest.raises(IllegalStateException, match=r"^1 records from previous poll have not been acknowledged$"):
        consumer.poll(0)
    consumer.acknowledge(last, AcknowledgeType.ACCEPT)
    got = [(m.partition(), m.value(), m.delivery_count()) for m in messages]
    got += accept_until(consumer, 10 - len(messages))  # the first poll here settles what was staged
    with pytest.raises(IllegalStateException, match="not in flight"):
        consumer.acknowledge(first)  # settled by that poll
    consumer.close()
    consumer.close()
    with pytest.raises(IllegalStateException, match="closed"):
        consumer.poll(0)
    with pytest.raises(IllegalStateException, match="closed"):
        consumer.commit_sync()
    assert collections.Counter((p, v) for p, v, _ in got) == collections.Counter(produced)
    assert in_flight(names.location) == [] and group_left(names.location)


@pytest.mark.timing
def test_commit_returns_a_lost_lock_as_a_value(kafka, tmp_path):
    """A worker stalled past its lock (SIGSTOP: it cannot renew) loses its records to another member; its
    commit then says so per partition, as an error value, and the other member's commit takes."""
    names = Names(kafka, tmp_path, partitions=1)
    produced = kafka.produce_numbered(names.topic, 20, 1)
    config = names.config(**{"share.record.lock.duration.ms": 1500})
    stalled = spawn(config, names.topic, "hold")
    try:
        holding = json.loads(stalled.stdout.readline())
        held = {(p, bytes.fromhex(v)) for p, _, v, _ in holding}
        os.kill(stalled.pid, signal.SIGSTOP)
        with DeltaShareConsumer(config) as other:
            other.subscribe([names.topic])
            got = accept_until(other, 20)
            os.kill(stalled.pid, signal.SIGCONT)
            tell(stalled, "commit")
            results = json.loads(stalled.stdout.readline())
        assert stalled.wait(30) == 0
    finally:
        stalled.kill()  # a stopped process too; nothing if it ended
    assert {dc for *_, dc in holding} == {1}
    assert results == {"0": KafkaError(KafkaError.INVALID_RECORD_STATE).name()}
    assert held and {(p, v) for p, v, dc in got if dc == 2} == held
    assert collections.Counter((p, v) for p, v, _ in got) == collections.Counter(produced)
    assert in_flight(names.location) == [] and group_left(names.location)


@pytest.mark.timing
def test_a_member_keeps_its_records_through_slow_work_while_a_worker_commits_on_a_loaded_machine(kafka, tmp_path):
    """Every commit of a Delta group races every other on one table: a member that works on its records for 2.5
    lock durations lands its renewals against a worker process committing every 100 records, on a machine a
    burner keeps busy. It keeps every record: its commit settles them all, and the worker is given none of them."""
    names = Names(kafka, tmp_path, partitions=4)
    kafka.produce_numbered(names.topic, 40_000, 4)
    lock_s = 4.0
    config = names.config(**{"share.record.lock.duration.ms": int(lock_s * 1000)})
    worker_out = tmp_path / "worker.txt"
    worker = spawn({**config, "max.poll.records": 100}, names.topic, "share", str(worker_out))

    def worker_records() -> list[str]:
        return worker_out.read_text().splitlines() if worker_out.exists() else []

    try:
        with burning_cpu(), DeltaShareConsumer({**config, "max.poll.records": 2000}) as consumer:
            consumer.subscribe([names.topic])
            assert worker.stdout.readline().strip() == "joined"
            held = wait_for(lambda: consumer.poll(0.5), 60, "records for the slow member")
            tell(worker, "go")
            worked_until = time.monotonic() + 2.5 * lock_s
            wait_for(lambda: time.monotonic() >= worked_until and len(worker_records()) >= 500, 120,
                     "2.5 lock durations of work while the worker took 500 records", interval_s=0.2,
                     state=lambda: len(worker_records()))
            for message in held:
                consumer.acknowledge(message)
            results = consumer.commit_sync()
        tell(worker, "stop")
        assert worker.wait(60) == 0
    finally:
        worker.kill()
    assert {(tp.topic, tp.partition): error for tp, error in results.items()} == {
        (names.topic, p): None for p in {m.partition() for m in held}}, "the slow member's locks lapsed"
    taken = {(int(p), bytes.fromhex(v)) for p, v, _ in (line.split() for line in worker_records())}
    assert len(held) == 2000 and not taken & {(m.partition(), m.value()) for m in held}


def test_a_released_record_comes_back_with_delivery_count_2(kafka, tmp_path):
    names = Names(kafka, tmp_path, partitions=1)
    kafka.produce_numbered(names.topic, 10, 1)
    with DeltaShareConsumer(names.config()) as consumer:
        consumer.subscribe([names.topic])
        first = poll_until_some(consumer)
        released = first[0]
        consumer.acknowledge(released, AcknowledgeType.RELEASE)
        for message in first[1:]:
            consumer.acknowledge(message)
        assert set(consumer.commit_sync().values()) == {None}
        again = accept_until(consumer, 10 - len(first) + 1)
    assert [(p, dc) for p, v, dc in again if v == released.value()] == [(0, 2)]
    assert {dc for _, v, dc in again if v != released.value()} <= {1}
    assert in_flight(names.location) == []


@pytest.mark.parametrize("own_location", [False, True], ids=["default-location", "dead.letter.location"])
def test_rejected_records_and_records_at_the_limit_go_to_the_dead_letters(kafka, tmp_path, own_location):
    names = Names(kafka, tmp_path, partitions=1)
    headers = [("origin", b"test")]
    for i in range(10):
        kafka.producer.produce(names.topic, key=f"{i}".encode(), value=f"record-{i}".encode(), partition=0,
                               headers=headers)
    assert kafka.producer.flush(30) == 0
    extra = {"dead.letter.location": str(tmp_path / "rejects")} if own_location else {}
    config = names.config(**{"share.delivery.count.limit": 2, **extra})
    with DeltaShareConsumer(config) as consumer:
        consumer.subscribe([names.topic])
        types = {b"record-1": AcknowledgeType.REJECT, b"record-2": AcknowledgeType.RELEASE}
        seen = 0
        while seen < 10:  # record-2 comes back once, then the limit archives it
            messages = poll_until_some(consumer)
            for message in messages:
                consumer.acknowledge(message, types.get(message.value(), AcknowledgeType.ACCEPT))
            seen += sum(m.value() != b"record-2" or m.delivery_count() == 2 for m in messages)
            assert set(consumer.commit_sync().values()) == {None}
    root, name = (tmp_path, "rejects") if own_location else (names.location, "dead_letters")
    rows = {r["value"]: r for r in DeadLetters.open(str(root), name).read().to_pylist()}
    assert {v: (r["reason"], r["delivery_count"], r["group_id"]) for v, r in rows.items()} == {
        b"record-1": ("rejected by the worker", 1, names.group),
        b"record-2": ("the group's delivery count limit reached", 2, names.group),
    }
    assert rows[b"record-1"]["key"] == b"1" and rows[b"record-2"]["headers"] == [{"key": "origin", "value": b"test"}]
    assert in_flight(names.location) == []


def test_config_errors_name_the_key_and_repr_shows_no_secret(kafka, tmp_path):
    names = Names(kafka, tmp_path, partitions=1)
    for key in ("bootstrap.servers", "group.id", "group.location"):
        config = names.config()
        del config[key]
        with pytest.raises(ValueError, match=f"'{re.escape(key)}' is required"):
            DeltaShareConsumer(config)
    with pytest.raises(ValueError, match=r"'max\.poll\.records' must be a positive integer"):
        DeltaShareConsumer(names.config(**{"max.poll.records": 0}))
    with pytest.raises(ValueError, match="acknowledges explicitly only"):
        DeltaShareConsumer(names.config(**{"share.acknowledgement.mode": "implicit"}))
    with DeltaShareConsumer(names.config(**{"share.delivery.count.limit": "3", "sasl.password": "hunter2"})) as first:
        assert "hunter2" not in repr(first) and names.group in repr(first)
        with pytest.raises(ClusterError, match="does not exist"):
            first.subscribe(["no-such-topic"])
    with pytest.raises(GroupSettingsError, match=r"share.delivery.count.limit=3.*asks for 4"):
        DeltaShareConsumer(names.config(**{"share.delivery.count.limit": 4}))


def test_offsets_without_a_record_are_acknowledged_with_the_commit(kafka, tmp_path):
    """Transaction markers take offsets that hold no record: never returned, settled with the records around them."""
    names = Names(kafka, tmp_path, partitions=1)
    producer = Producer(kafka.config(**{"transactional.id": f"tx-{names.group}"}))
    producer.init_transactions(30)
    for batch in range(2):
        producer.begin_transaction()
        for i in range(10):
            producer.produce(names.topic, value=f"record-{batch}-{i}".encode(), partition=0)
        producer.commit_transaction(30)  # a marker after each batch: offsets 10 and 21
    producer.flush(30)
    with DeltaShareConsumer(names.config()) as consumer:
        consumer.subscribe([names.topic])
        got = accept_until(consumer, 20)
    assert sorted(v for _, v, _ in got) == sorted(f"record-{b}-{i}".encode() for b in range(2) for i in range(10))
    (share_partition,) = GroupStore.existing(str(names.location)).share_state.partitions().values()
    assert share_partition.spso == 22 and not share_partition.batches


def test_records_of_an_acquisition_whose_answer_was_lost_expire_while_the_member_lives(kafka, tmp_path):
    """The commit landed but its answer did not reach the member (a storage error after the write): the member
    was never told of those records, so its renewer must not keep them locked; they return after one lock."""
    names = Names(kafka, tmp_path, partitions=1)
    kafka.produce_numbered(names.topic, 20, 1)
    group = GroupStore.open(str(names.location), names.group,
                            {"share.record.lock.duration.ms": 3000, "share.auto.offset.reset": "earliest"})
    lost = GroupMember(group, "worker-lost", "worker", {"bootstrap.servers": kafka.bootstrap_servers}, [names.topic])
    other = GroupMember(GroupStore.open(str(names.location), names.group, {}), "worker-other", "worker",
                        {"bootstrap.servers": kafka.bootstrap_servers}, [names.topic])
    try:
        _, kept = lost.acquire(5)
        assert [(h.records.first, h.records.last) for h in kept] == [(0, 4)]
        commit = group.share_state.update_all

        def lands_then_fails(*args, **kwargs):
            commit(*args, **kwargs)
            raise OSError("injected: the commit's answer was lost")

        group.share_state.update_all = lands_then_fails  # type: ignore[method-assign]
        with pytest.raises(OSError, match="injected"):
            lost.acquire(15)
        del group.share_state.update_all  # the member's commits work again: its renewer goes on
        holders = GroupStore.existing(str(names.location)).share_state.partitions()[(names.topic, 0)].holders()
        assert holders == {"worker-lost": 20}, "the lost acquisition landed"

        got = wait_for(lambda: other.acquire(20)[1], 30, "the unanswered records back in the queue", interval_s=0.2)
        assert [(h.records.first, h.records.last, h.records.delivery_count) for h in got] == [(5, 19, 2)]
        state = GroupStore.existing(str(names.location)).share_state.partitions()[(names.topic, 0)]
        assert state.holders() == {"worker-lost": 5, "worker-other": 15}, "what the member knows it holds stays held"
    finally:
        lost.close()
        other.close()
