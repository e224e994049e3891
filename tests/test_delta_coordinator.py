"""coordinator=delta: the group's state in Delta, executors reading the records, on both Kafka peers.

Every test compares the sink with what was produced, record by record, and reads the group's
``share_state`` table for what it says of the queue afterwards.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import sharegroup_source
from sharegroup_source import DeltaShareConsumer
from sharegroup_source.errors import OptionError
from sharegroup_source.options import SourceOptions
from sharegroup_testing.apache_kafka import ApacheKafka
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from state_store import RecordState, StateStore, StateStoreError
from state_store.errors import GroupSettingsError
from state_store.group import GroupStore
from tests.delta_worker import spawn
from tests.scenarios import assert_exactly_once, file_sink_exactly_once
from tests.streams import StreamSetup, worker_holding_an_epoch
from tests.test_delta_share_consumer import accept_until, tell, worker_config

pytestmark = pytest.mark.spark

#: The share-group APIs a delta-mode query must never need: the embedded broker fails them all.
SHARE_APIS = ("ShareGroupHeartbeat", "ShareFetch", "ShareAcknowledge")


class DeltaSetup(StreamSetup):
    """A query on the Delta coordinator: its group's state lives under ``root/group``."""

    @property
    def group_location(self) -> Path:
        return self.root / "group"

    def options(self, **extra) -> dict[str, str]:
        settings = {"coordinator": "delta", "groupLocation": str(self.group_location),
                    "share.auto.offset.reset": "earliest"}
        return super().options(**{**settings, **extra})

    def share_state(self) -> dict:
        return GroupStore.existing(str(self.group_location)).share_state.partitions()

    def in_flight(self) -> dict[tuple[str, int], list]:
        """Per share-partition, the state batches that are not settled yet."""
        return {key: [b for b in sp.batches if b.state is not RecordState.ACKNOWLEDGED]
                for key, sp in self.share_state().items()}

    def members_left(self) -> bool:
        return all(m.left_at_ms is not None for m in GroupStore.existing(str(self.group_location)).members())


def _setup(kafka: KafkaUnderTest, tmp_path: Path, partitions: int = 2) -> DeltaSetup:
    return DeltaSetup(kafka, kafka.new_topic(partitions), f"g-{tmp_path.name[-20:]}", tmp_path)


def _fail_share_apis(kafka: KafkaUnderTest) -> None:
    """Make the embedded broker refuse every share-group request from now on (for this test)."""
    for api in SHARE_APIS:
        kafka.embedded.fail_next(api, ["UNSUPPORTED_VERSION"] * 1000)


def _dead_letters(setup: StreamSetup) -> dict[tuple[int, bytes], tuple[str, int]]:
    rows = StateStore(str(setup.state)).dead_letters.read().to_pylist()
    return {(r["partition"], r["value"]): (r["reason"], r["delivery_count"]) for r in rows}


@pytest.mark.embedded
def test_every_record_exactly_once_with_no_share_group_api(spark, kafka, tmp_path):
    """Only Metadata, ListOffsets and Fetch: on the embedded broker every share-group request fails."""
    if kafka.is_embedded:
        _fail_share_apis(kafka)
    setup = _setup(kafka, tmp_path, partitions=2)
    file_sink_exactly_once(spark, setup, 2000, 2, maxRecordsPerTrigger=1000, maxRecordsPerPartition=100)
    assert {e.status for e in setup.ledger_entries()} == {"ACKED"}
    # an epoch of 1,000 over 2 partitions: tasks of at most 100, so one Kafka partition spans >= 4 tasks
    assert len(list(setup.sink.glob("part-*.parquet"))) >= 20
    state = setup.share_state()
    assert sorted(state) == [(setup.topic, 0), (setup.topic, 1)]
    assert all(sp.spso == 1000 and not sp.batches for sp in state.values()), state
    wait_for(setup.members_left, 30, "the query's member to leave the group")
    progress = setup.progress()
    assert progress["acquired"] == 2000 and progress["accepted"] == 2000 and progress["ack_failures"] == 0


@pytest.mark.timing
def test_a_batch_slower_than_three_lock_durations_keeps_its_records(spark, kafka, tmp_path):
    """The member renews its locks while a batch runs: nothing is redelivered, no acknowledgement fails."""
    setup = _setup(kafka, tmp_path, partitions=1)
    produced = kafka.produce_numbered(setup.topic, 300, 1)
    lock_ms = 2000

    def slow_first_batch(frame, batch_id):
        if batch_id == 0:
            time.sleep(3 * lock_ms / 1000 + 1)  # the work itself is slow: this is what is measured
        return frame

    query = setup.batch_sink(spark, slow_first_batch, maxRecordsPerTrigger=100,
                             **{"share.record.lock.duration.ms": lock_ms})
    query.awaitTermination(180)
    assert query.exception() is None
    rows = setup.sink_rows(spark)
    assert_exactly_once(rows, produced)
    assert {dc for _, _, dc in rows} == {1}, "a record was redelivered: its lock expired under the batch"
    progress = setup.progress()
    assert progress["ack_failures"] == 0 and progress["accepted"] == 300
    assert all(not batches for batches in setup.in_flight().values())


@pytest.mark.timing
def test_a_restart_takes_back_its_crashed_runs_locks_at_once(spark, kafka, tmp_path):
    """A SIGKILLed driver worker holds epoch 1 under a 60 s lock; the restart does not wait for it."""
    setup = _setup(kafka, tmp_path, partitions=2)
    produced = kafka.produce_numbered(setup.topic, 400, 2)
    options = setup.options(maxRecordsPerTrigger=150, **{"share.record.lock.duration.ms": 60_000})
    worker = worker_holding_an_epoch(options)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(10)
    # the epoch, and the next batch if the worker's acquisition ahead committed before the kill
    assert _held(setup) in (150, 300), "the killed worker's epoch must still be locked in the group"
    started = time.monotonic()
    query = setup.file_sink(spark, maxRecordsPerTrigger=150, **{"share.record.lock.duration.ms": 60_000})
    query.awaitTermination(120)
    took = time.monotonic() - started
    assert query.exception() is None
    assert_exactly_once(setup.sink_rows(spark), produced)
    assert took < 50, f"the restart took {took:.0f}s: it waited for the crashed run's 60 s locks"
    assert all(not batches for batches in setup.in_flight().values())


def _held(setup: DeltaSetup) -> int:
    """Records some member holds acquired in the group."""
    return sum(b.last - b.first + 1 for batches in setup.in_flight().values() for b in batches
               if b.state is RecordState.ACQUIRED)


@pytest.mark.timing
def test_the_next_batch_is_acquired_while_spark_runs_this_one(spark, kafka, tmp_path):
    """Batches smaller than the in-flight windows: while Spark runs batch 0 the member already holds batch 1,
    so the next latestOffset does not wait for an acquisition. Every record once, none delivered twice, and
    nothing left held once the query stopped."""
    setup = _setup(kafka, tmp_path, partitions=2)
    produced = kafka.produce_numbered(setup.topic, 1000, 2)
    go = threading.Event()

    def first_batch_waits(frame, batch_id):
        if batch_id == 0:
            go.wait(120)
        return frame

    query = setup.batch_sink(spark, first_batch_waits, available_now=False, maxRecordsPerTrigger=100)
    try:
        wait_for(lambda: setup.ledger_entries(), 60, "the query to ledger its first epoch")  # its group exists then
        wait_for(lambda: _held(setup) == 200, 60, "batch 0's records and the next batch's, acquired ahead",
                 state=lambda: f"{_held(setup)} records held")
        go.set()
        wait_for(lambda: len(setup.sink_rows(spark)) >= 1000 and setup.every_epoch_settled(), 120,
                 "every record in the sink and every epoch settled", state=lambda: setup.describe(spark))
    finally:
        go.set()
        query.stop()
    assert query.exception() is None
    rows = setup.sink_rows(spark)
    assert_exactly_once(rows, produced)
    assert {dc for _, _, dc in rows} == {1}
    assert {e.record_count for e in setup.ledger_entries()} == {100}
    assert _held(setup) == 0


def test_records_at_the_delivery_limit_are_archived_and_dead_lettered(spark, kafka, tmp_path):
    """Released twice at a limit of 2: the group archives them and the member keeps them as dead letters."""
    setup = _setup(kafka, tmp_path, partitions=1)
    produced = kafka.produce_numbered(setup.topic, 100, 1)
    poison = {b"record-3", b"record-50"}
    options = setup.options(**{"share.delivery.count.limit": 2})

    def release_poison(frame, batch_id):
        sharegroup_source.acknowledge(frame.filter(frame.value.isin(list(poison))), "RELEASE", "retry",
                                      options=options)
        return frame.filter(~frame.value.isin(list(poison)))

    query = setup.batch_sink(spark, release_poison, maxRecordsPerTrigger=40,
                             **{"share.delivery.count.limit": 2})
    query.awaitTermination(180)
    assert query.exception() is None
    assert_exactly_once(setup.sink_rows(spark), {r for r in produced if r[1] not in poison})
    assert _dead_letters(setup) == {(0, v): ("the group's delivery count limit reached", 2) for v in poison}
    assert all(not batches for batches in setup.in_flight().values()), "archived records leave the in-flight window"


def test_max_deliveries_rejects_a_record_released_every_time_before_the_groups_limit(spark, kafka, tmp_path):
    """maxDeliveries=3 under a group limit of 10: the source rejects the 4th delivery and keeps it as a dead letter."""
    setup = _setup(kafka, tmp_path, partitions=1)
    produced = kafka.produce_numbered(setup.topic, 60, 1)
    poison = b"record-13"
    options = setup.options(**{"share.delivery.count.limit": 10})

    def release_poison(frame, batch_id):
        sharegroup_source.acknowledge(frame.filter(frame.value == poison), "RELEASE", "still failing",
                                      options=options)
        return frame.filter(frame.value != poison)

    query = setup.batch_sink(spark, release_poison, maxRecordsPerTrigger=20, maxDeliveries=3,
                             **{"share.delivery.count.limit": 10})
    query.awaitTermination(180)
    assert query.exception() is None
    assert_exactly_once(setup.sink_rows(spark), produced - {(0, poison)})
    assert _dead_letters(setup) == {(0, poison): ("max deliveries exceeded", 4)}
    assert all(not batches for batches in setup.in_flight().values()), "the rejected record left the window"


def test_acknowledge_reject_and_release_in_delta_mode(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, partitions=2)
    produced = kafka.produce_numbered(setup.topic, 300, 2)
    rejected = {(i % 2, f"record-{i}".encode()) for i in range(0, 300, 50)}
    retried = {(1, b"record-7")}
    seen: collections.Counter = collections.Counter()
    options = setup.options()

    def handle(frame, batch_id):
        rows = frame.select("partition", "value").collect()
        seen.update((r.partition, bytes(r.value)) for r in rows)
        values = [v for _, v in rejected]
        sharegroup_source.acknowledge(frame.filter(frame.value.isin(values)), "REJECT", "bad", options=options)
        first_time = [v for p, v in retried if seen[(p, v)] == 1]
        sharegroup_source.acknowledge(frame.filter(frame.value.isin(first_time)), "RELEASE", "later",
                                      options=options)
        return frame.filter(~frame.value.isin(values + first_time))

    query = setup.batch_sink(spark, handle, maxRecordsPerTrigger=100)
    query.awaitTermination(180)
    assert query.exception() is None
    rows = setup.sink_rows(spark)
    assert_exactly_once(rows, produced - rejected)
    assert [dc for p, v, dc in rows if (p, v) in retried] == [2], "a released record comes back once, count 2"
    assert _dead_letters(setup) == {key: ("bad", 1) for key in rejected}
    assert all(not batches for batches in setup.in_flight().values())


def test_group_settings_conflicts_and_bad_locations_fail_clearly(kafka, tmp_path):
    setup = _setup(kafka, tmp_path, partitions=1)
    GroupStore.open(str(setup.group_location), setup.group, {"share.delivery.count.limit": 5})
    with pytest.raises(GroupSettingsError, match=r"share.delivery.count.limit=5.*asks for 3"):
        GroupStore.open(str(setup.group_location), setup.group, {"share.delivery.count.limit": 3})
    with pytest.raises(GroupSettingsError, match=setup.group):
        GroupStore.open(str(setup.group_location), "another-group", {})
    options = setup.options()
    del options["groupLocation"]
    with pytest.raises(OptionError, match="option 'groupLocation' is required"):
        SourceOptions.parse(options)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    from sharegroup_source.coordinators.delta import DeltaCoordinator
    with pytest.raises(StateStoreError, match=r"a-file is a file, not a directory"):
        DeltaCoordinator.join(setup.source_options(groupLocation=str(blocked / "group")), None, "run")


@pytest.mark.timing
def test_kafka_without_share_groups_serves_a_delta_query(spark, kafka, tmp_path):
    """Apache Kafka formatted with share.version=0: a share consumer is refused, a delta-mode query is not."""
    kafka.require_apache("it starts a second Apache Kafka broker, with share groups switched off")
    with ApacheKafka(share_groups=False) as plain, KafkaUnderTest(None, plain.bootstrap_servers, plain) as plain_kafka:
        features = plain.run_tool("kafka-features", "--bootstrap-server", plain.bootstrap_servers, "describe")
        share = [line for line in features.stdout.splitlines() if "share.version" in line]
        assert share and "FinalizedVersionLevel: 0" in share[0], features.stdout + features.stderr
        setup = _setup(plain_kafka, tmp_path, partitions=2)
        produced = plain_kafka.produce_numbered(setup.topic, 500, 2)
        query = setup.file_sink(spark, maxRecordsPerTrigger=200)
        try:
            query.awaitTermination(180)
        finally:
            query.stop()
        assert query.exception() is None
        assert_exactly_once(setup.sink_rows(spark), produced)


def _accepted_by_workers(paths: list[Path]) -> list[tuple[int, bytes, int]]:
    """(partition, value, delivery count) of what worker processes accepted, from their files' complete lines."""
    lines = [line for path in paths for line in path.read_text().split("\n")[:-1]]
    return [(int(p), bytes.fromhex(v), int(dc)) for p, v, dc in (line.split() for line in lines)]


@pytest.mark.timing
def test_a_query_and_two_worker_processes_share_one_queue(spark, kafka, tmp_path):
    """A Spark query and two DeltaShareConsumer processes in one group: each record is accepted by one of them, once.

    The workers join first and start taking records once the query has its first epoch, so all three take part.
    """
    setup = _setup(kafka, tmp_path, partitions=2)
    produced = kafka.produce_numbered(setup.topic, 3000, 2)
    outputs = [tmp_path / f"worker-{i}.txt" for i in range(2)]
    for output in outputs:
        output.touch()
    config = worker_config(kafka, setup.group, setup.group_location, **{"max.poll.records": 100})
    workers = [spawn(config, setup.topic, "share", str(output)) for output in outputs]
    try:
        assert [worker.stdout.readline().strip() for worker in workers] == ["joined", "joined"]
        query = setup.file_sink(spark, available_now=False, maxRecordsPerTrigger=100)
        try:
            wait_for(setup.ledger_entries, 120, "the query's first epoch")
            for worker in workers:
                tell(worker, "go")
            wait_for(lambda: len(setup.sink_rows(spark)) + len(_accepted_by_workers(outputs)) >= len(produced), 180,
                     "every record in the sink or a worker's file", interval_s=1,
                     state=lambda: f"{len(_accepted_by_workers(outputs))} accepted by workers; {setup.describe(spark)}")
            for worker in workers:
                tell(worker, "stop")
            assert [worker.wait(60) for worker in workers] == [0, 0]
            wait_for(setup.every_epoch_settled, 60, "the query's last epoch to be acknowledged")
        finally:
            query.stop()
    finally:
        for worker in workers:
            worker.kill()
    wait_for(setup.members_left, 30, "every member to leave the group")
    sink = setup.sink_rows(spark)
    assert_exactly_once(sink + _accepted_by_workers(outputs), produced)
    assert sink, "the query took no record"
    assert all(_accepted_by_workers([output]) for output in outputs), "a worker took no record"
    assert {dc for *_, dc in sink + _accepted_by_workers(outputs)} == {1}, "a record was redelivered"
    assert sorted(m.kind for m in GroupStore.existing(str(setup.group_location)).members()) == [
        "query", "worker", "worker"]
    assert all(not batches for batches in setup.in_flight().values())


@pytest.mark.timing
def test_a_killed_workers_records_come_back_once_with_delivery_count_2(kafka, tmp_path):
    """A worker SIGKILLed while it holds 30 records: after the lock duration another member gets exactly those."""
    setup = _setup(kafka, tmp_path, partitions=2)
    produced = kafka.produce_numbered(setup.topic, 100, 2)
    config = worker_config(kafka, setup.group, setup.group_location,
                           **{"max.poll.records": 30, "share.record.lock.duration.ms": 3000})
    killed = spawn(config, setup.topic, "hold")
    try:
        holding = json.loads(killed.stdout.readline())
    finally:
        killed.kill()
    assert killed.wait(10) == -signal.SIGKILL
    held = {(p, bytes.fromhex(v)) for p, _, v, _ in holding}
    assert len(held) == 30
    with DeltaShareConsumer({**config, "max.poll.records": 500}) as survivor:
        survivor.subscribe([setup.topic])
        got = accept_until(survivor, len(produced))
    assert_exactly_once(got, produced)
    assert {(p, v) for p, v, dc in got if dc == 2} == held
    assert {dc for p, v, dc in got if (p, v) not in held} == {1}
    members = GroupStore.existing(str(setup.group_location)).members()
    assert sorted(m.left_at_ms is None for m in members) == [False, True], "the killed worker never left; the other did"
    assert all(not batches for batches in setup.in_flight().values())


@pytest.mark.timing
def test_a_failed_batch_is_replayed_to_the_sink_and_no_worker_gets_its_records(spark, kafka, tmp_path):
    """Batch 1 fails in the sink while a worker shares the queue: the failed query leaves the epoch Spark will run
    again locked for its next run, which takes the locks over and replays it. Every record once, in the sink or
    the worker's file; the failed batch's records reach the sink once, never the worker, and nothing in the sink
    was delivered twice."""
    setup = _setup(kafka, tmp_path, partitions=2)
    produced = kafka.produce_numbered(setup.topic, 1000, 2)
    output = tmp_path / "worker.txt"
    output.touch()
    config = worker_config(kafka, setup.group, setup.group_location, **{"max.poll.records": 100})
    worker = spawn(config, setup.topic, "share", str(output))
    try:
        assert worker.stdout.readline().strip() == "joined"

        def batch_1_fails(frame, batch_id):
            if batch_id == 1:
                raise RuntimeError("the sink failed in batch 1")
            return frame

        options = {"maxRecordsPerTrigger": 100, "share.record.lock.duration.ms": 60_000}
        failing = setup.batch_sink(spark, batch_1_fails, available_now=False, **options)
        with pytest.raises(Exception, match="the sink failed in batch 1"):
            failing.awaitTermination(180)
        failed = max(setup.ledger_entries(), key=lambda e: e.epoch)
        tell(worker, "go")  # the queue is the worker's alone until the query is back
        wait_for(lambda: len(_accepted_by_workers([output])) >= 300, 120, "the worker to accept 300 records",
                 state=lambda: f"{len(_accepted_by_workers([output]))} accepted")
        tell(worker, "stop")
        assert worker.wait(60) == 0
    finally:
        worker.kill()
    taken = _accepted_by_workers([output])
    query = setup.batch_sink(spark, available_now=False, **options)
    try:
        wait_for(lambda: len(setup.sink_rows(spark)) + len(taken) >= len(produced) and setup.every_epoch_settled(),
                 180, "every record in the sink or the worker's file, and every epoch settled", interval_s=1,
                 state=lambda: setup.describe(spark))
    finally:
        query.stop()
    assert query.exception() is None
    sink = setup.sink_rows(spark)
    assert_exactly_once(sink + taken, produced)
    assert (failed.epoch, failed.status) == (2, "ACQUIRED"), "batch 1 (epoch 2) was left locked for the next run"
    epoch_2 = {(r.partition, f"record-{offset * 2 + r.partition}".encode()) for r in failed.ranges
               for offset in r.offsets()}  # produce_numbered's record n is at offset n // 2 of partition n % 2
    batch_1 = spark.read.parquet(str(setup.sink / "batch=1")).select("partition", "value", "deliveryCount").collect()
    assert {(r.partition, bytes(r.value)) for r in batch_1} == epoch_2 and len(batch_1) == 100
    assert {dc for *_, dc in sink} == {1}, "a record in the sink was delivered twice"
    assert taken and not epoch_2 & {(p, v) for p, v, _ in taken}, "the worker got the failed batch's records"
    assert all(not batches for batches in setup.in_flight().values())
