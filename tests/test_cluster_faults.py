"""A production cluster's faults: three Apache Kafka brokers, killed, frozen and restarted under a live stream.

Each test runs a producer (idempotent, so acks=all) writing numbered records for as long as the
faults last, and a streaming query (``coordinator=broker`` and ``coordinator=delta``) writing into
an idempotent sink (one parquet folder per batch id, rewritten by a re-run). Faults hit while a batch
is inside the sink (mid-batch). At the end the sink must hold every record whose delivery the
producer saw confirmed, exactly once, and the query must never have failed: one broker's death
or restart is something a three-broker cluster with min ISR 2 survives, and so must the source.

The time from each fault to the next batch in Spark's commit log is printed (``-s`` shows it),
never asserted. Select these tests with ``pytest -m cluster``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sharegroup_source.admin import describe_groups
from sharegroup_testing.kafka_cluster import KafkaCluster
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from soak.faults import applicable
from soak.producer import NumberedProducer
from soak.query import SoakQuery
from soak.run import SoakSettings, run_soak
from soak.sink import BatchSink
from state_store import StateStore
from tests.delta_worker import spawn

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.timing, pytest.mark.timeout(240)]

PARTITIONS = 4
RECORDS_PER_S = 100
#: The group's acquisition lock in the tests that do not outlast it on purpose.
LOCK_MS = 10_000
#: How long the sink holds the batch a fault hits, so the fault lands mid-batch.
MID_BATCH_S = 1.0
#: A frozen broker's outage in the lock test: well past its lock, and past the controller's 4 s fencing.
SHORT_LOCK_MS = 3_000
FREEZE_S = 8.0

COORDINATORS = ["broker", "delta"]


@dataclass
class FaultRun:
    """One query, its producer and sink on the cluster; faults are injected from the test's (main) thread."""

    kafka: KafkaUnderTest
    query: SoakQuery
    sink: BatchSink
    producer: NumberedProducer
    topic: str
    group: str
    root: Path
    coordinator: str
    recoveries: list[tuple[str, float]] = field(default_factory=list)

    @property
    def cluster(self) -> KafkaCluster:
        assert self.kafka.cluster is not None
        return self.kafka.cluster

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    def counters(self) -> dict[str, int]:
        """The source's counters over its runs (acquired, accepted, ack failures, redeliveries deduped...)."""
        return StateStore(str(self.root / "state")).progress.totals(self.group)

    def every_epoch_acked(self) -> bool:
        """Every epoch ACKED in the ledger: an epoch whose acknowledgement failed counts once all its records
        came back from the group and were acknowledged, so nothing of the query's is left in the group."""
        entries = StateStore(str(self.root / "state")).ledger.entries(self.group)
        return bool(entries) and {entry.status for entry in entries} == {"ACKED"}

    def last_commit(self) -> int:
        """The newest batch id in Spark's commit log (-1 before the first)."""
        commits = self.checkpoint / "commits"
        ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
        return max(ids, default=-1)

    def keep_running(self, condition: Callable[[], object], timeout_s: float, what: str) -> None:
        """Poll ``condition``; a query that ended is started again (and its failure noted for the verdict)."""
        def check() -> object:
            self.query.ensure_running()
            return condition()

        wait_for(check, timeout_s, what, interval_s=0.1, state=self.picture)

    def picture(self) -> str:
        """What a stalled run looks like: Spark's commits and the query's status, and where each share-partition
        of the group stands (a record acquired and never emitted shows as held; one never acquired as lag)."""
        try:
            described = describe_groups([str(self.root / ("group" if self.coordinator == "delta" else "state"))],
                                        bootstrap_servers=self.kafka.bootstrap_servers)
            group = "; ".join(f"{p.topic}[{p.partition}] spso {p.spso} end {p.log_end_offset} acquired {p.acquired} "
                              f"available {p.available}" for d in described for p in d.partitions) or \
                "; ".join(f"{d.state} {d.error or ''}" for d in described)
        except Exception as error:  # the picture must not hide the timeout it explains
            group = f"not described: {error!r}"
        return (f"last commit {self.last_commit()}, failures {self.query.unexpected_failures}, "
                f"query {self.query.status()}, group: {group}")

    def mid_batch(self) -> None:
        """Return once a batch is inside the sink (held there MID_BATCH_S): its records are acquired, not settled."""
        held = self.sink.arm_pause(MID_BATCH_S)
        self.keep_running(held.is_set, 60, "a batch to reach the sink")

    def fault(self, label: str, inject: Callable[[], object]) -> None:
        """Inject, then wait for the next committed batch and note how long it took."""
        before = self.last_commit()
        started = time.monotonic()
        inject()
        injected = time.monotonic() - started
        meanwhile = self.last_commit() - before
        self.keep_running(lambda: self.last_commit() > before, 120, f"a batch committed after: {label}")
        took = time.monotonic() - started
        self.recoveries.append((label, took))
        print(f"[{self.coordinator}] {label}: next batch committed {took:.1f} s after the fault began (the fault took "
              f"{injected:.1f} s, {meanwhile} batches committed meanwhile)", flush=True)

    def drain_and_check(self, accepted_elsewhere: Callable[[], set[int]] = set, settled: bool = False) -> None:
        """Stop producing, wait until every delivered record is in the sink (or taken by another member) and,
        with ``settled``, every epoch acknowledged; stop the query, then compare record by record."""
        self.producer.finish()
        delivered = self.producer.delivered
        self.keep_running(lambda: not delivered - self.sink.rows().numbers - accepted_elsewhere(), 120,
                          f"all {len(delivered)} delivered records in the sink")
        if settled:
            self.keep_running(self.every_epoch_acked, 60, "every epoch acknowledged")
        self.query.stop()
        rows = self.sink.rows()
        elsewhere = accepted_elsewhere()
        in_sink = len(rows.batches_by_position)
        summary = (f"[{self.coordinator}] produced {len(delivered)} (delivery failed {self.producer.failed}), "
                   f"in the sink {in_sink} ({len(rows.numbers)} distinct, {rows.redelivered} redelivered), "
                   f"taken by another member {len(elsewhere)}, query starts {self.query.starts}; recoveries "
                   + ", ".join(f"{label} {took:.1f} s" for label, took in self.recoveries))
        print(summary, flush=True)
        lost = sorted(delivered - rows.numbers - elsewhere)
        assert not lost, f"{len(lost)} delivered records never reached the sink, e.g. {lost[:10]}\n{summary}"
        assert rows.duplicated == 0, f"{rows.duplicated} records twice in the sink: {rows.batches_with_duplicates[:5]}"
        assert in_sink == len(rows.numbers), f"a record number in more than one position\n{summary}"
        unknown = sorted((rows.numbers | elsewhere) - delivered)
        assert not unknown, f"{len(unknown)} records nobody saw delivered, e.g. {unknown[:10]}\n{summary}"
        assert self.query.unexpected_failures == [], "the query failed:\n" + "\n\n".join(
            _python_part(message) for message in self.query.unexpected_details)
        assert self.query.starts == 1, f"the query was started {self.query.starts} times\n{summary}"


def _python_part(message: str) -> str:
    """The Python traceback inside Spark's error message (the plan after it is of no help here)."""
    lines = message.splitlines()
    end = next((i for i, line in enumerate(lines) if "== " in line or "=== Streaming Query ===" in line), len(lines))
    return "\n".join(lines[:end])[-4000:]


@contextmanager
def fault_run(spark, kafka: KafkaUnderTest, tmp_path: Path, coordinator: str,
              lock_ms: int = LOCK_MS) -> Iterator[FaultRun]:
    """A running query of ``coordinator`` with a live producer; both are stopped however the test ends."""
    topic = kafka.new_topic(PARTITIONS, prefix="faults")
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic,
               "stateLocation": str(tmp_path / "state"), "pollTimeoutMs": "500", "maxRecordsPerTrigger": "2000"}
    if coordinator == "broker":
        group = kafka.new_group(lock_duration_ms=lock_ms)
        options |= {"kafka.group.id": group, "lockDurationMs": str(lock_ms)}
    else:
        group = f"g-{tmp_path.name[-20:]}"
        options |= {"kafka.group.id": group, "coordinator": "delta",
                    "groupLocation": str(tmp_path / "group"), "share.auto.offset.reset": "earliest",
                    "share.record.lock.duration.ms": str(lock_ms)}
    sink = BatchSink(tmp_path / "sink")
    query = SoakQuery(spark, options, tmp_path / "checkpoint", sink)
    # log_level 0: its complaints about the killed node's refused connections would bury the recovery times
    producer = NumberedProducer(kafka.config(acks="all", log_level=0), topic, PARTITIONS, RECORDS_PER_S)
    run = FaultRun(kafka, query, sink, producer, topic, group, tmp_path, coordinator)
    try:
        query.start()
        producer.start()
        run.keep_running(lambda: run.last_commit() >= 1, 90, "the first batches")
        yield run
    finally:
        if producer.is_alive():
            producer.finish(30)
        query.stop()
        # every replica of a topic left behind would have to catch up at each later restart
        kafka.admin.delete_topics([topic])[topic].result(30)


@pytest.mark.parametrize("coordinator", COORDINATORS)
def test_partition_leader_killed_mid_batch_and_restarted(spark, kafka_cluster, tmp_path, coordinator):
    with fault_run(spark, kafka_cluster, tmp_path, coordinator) as run:
        leader = run.cluster.leader_of(run.topic, 0)
        run.mid_batch()
        run.fault(f"kill -9 node {leader} (leader of partition 0)", lambda: run.cluster.kill(leader))
        wait_for(lambda: run.cluster.leader_of(run.topic, 0) != leader, 30, "partition 0's leadership to move")
        run.fault(f"restart node {leader}", lambda: run.cluster.restart(leader))
        run.drain_and_check()


@pytest.mark.parametrize("coordinator", COORDINATORS)
def test_share_coordinator_killed_mid_batch_and_restarted(spark, kafka_cluster, tmp_path, coordinator):
    """The leader of ``__share_group_state`` (the share coordinator of every group; on coordinator=delta it
    holds no state of ours, but it leads partitions and the fault is the same) dies with a batch in flight."""
    with fault_run(spark, kafka_cluster, tmp_path, coordinator) as run:
        coordinator_node = run.cluster.share_coordinator()
        run.mid_batch()
        run.fault(f"kill -9 node {coordinator_node} (share coordinator)", lambda: run.cluster.kill(coordinator_node))
        run.fault(f"restart node {coordinator_node}", lambda: run.cluster.restart(coordinator_node))
        run.drain_and_check()


@pytest.mark.parametrize("coordinator", COORDINATORS)
def test_rolling_restart_of_all_three_brokers(spark, kafka_cluster, tmp_path, coordinator):
    """As an upgrade does it: each node in turn shuts down (controlled), starts, and is back in every ISR."""
    with fault_run(spark, kafka_cluster, tmp_path, coordinator) as run:
        for node in list(run.cluster.nodes):
            run.mid_batch()
            run.fault(f"stop node {node}", lambda node=node: run.cluster.stop_node(node))
            run.fault(f"start node {node}", lambda node=node: run.cluster.restart(node))
        run.drain_and_check()


@pytest.mark.parametrize("coordinator", COORDINATORS)
def test_a_leader_frozen_longer_than_the_lock(spark, kafka_cluster, tmp_path, coordinator):
    """The leader of partition 0 stops answering (SIGSTOP) for longer than the acquisition lock, mid-batch.

    On the broker coordinator the batch's acknowledgement may fail (the partition's leadership moved
    while the broker was frozen: 30-275 records per run here), and then the records come back to the
    group and to the query, which recognises them (the ledger) and acknowledges them without emitting
    them twice; or it may succeed late, when the frozen broker's own lock timers were frozen with it
    (one run of four beside a CPU burner). The test waits until every epoch is ACKED, so every record
    whose acknowledgement failed did come back. On the delta coordinator the locks are in Delta and
    renewed: the batch waits for the new leader. Either way the sink holds every record once.
    """
    with fault_run(spark, kafka_cluster, tmp_path, coordinator, lock_ms=SHORT_LOCK_MS) as run:
        leader = run.cluster.leader_of(run.topic, 0)
        run.mid_batch()

        def freeze() -> None:
            thaw_at = time.monotonic() + FREEZE_S
            run.cluster.pause(leader)
            run.keep_running(lambda: time.monotonic() > thaw_at, FREEZE_S + 5, "the end of the freeze")
            run.cluster.resume(leader)

        run.fault(f"SIGSTOP node {leader} (leader of partition 0) for {FREEZE_S:.0f} s", freeze)
        run.cluster.wait_in_sync()
        run.drain_and_check(settled=True)
        print(f"[{coordinator}] source counters: {run.counters()}")


def test_delta_worker_beside_the_query_under_kills(spark, kafka_cluster, tmp_path):
    """coordinator=delta with a DeltaShareConsumer worker in its own process sharing the group, while the
    leader of partition 0 and then another node are killed and restarted. Together the sink and the
    worker hold every record; neither holds one twice, and no record is in both."""
    with fault_run(spark, kafka_cluster, tmp_path, "delta") as run:
        out = tmp_path / "worker.txt"
        config = {"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": f"g-{tmp_path.name[-20:]}",
                  "group.location": str(tmp_path / "group"), "share.auto.offset.reset": "earliest",
                  "share.record.lock.duration.ms": str(LOCK_MS)}
        worker = spawn(config, run.topic, "share", str(out))
        try:
            assert worker.stdout.readline().strip() == "joined"
            worker.stdin.write("go\n")
            worker.stdin.flush()

            def worker_rows() -> list[int]:
                assert worker.poll() is None, f"the worker died (exit {worker.returncode})"
                lines = out.read_text().splitlines() if out.exists() else []
                return [int(bytes.fromhex(line.split()[1]).decode()) for line in lines]

            run.keep_running(lambda: worker_rows(), 60, "the worker's first records")
            first = run.cluster.leader_of(run.topic, 0)
            second = next(node for node in run.cluster.nodes if node != first)
            for node in (first, second):
                run.mid_batch()
                run.fault(f"kill -9 node {node}", lambda node=node: run.cluster.kill(node))
                run.fault(f"restart node {node}", lambda node=node: run.cluster.restart(node))
            run.drain_and_check(lambda: set(worker_rows()))
            taken = worker_rows()
            assert len(taken) == len(set(taken)), "the worker committed a record twice"
            both = set(taken) & run.sink.rows().numbers
            print(f"[delta] the worker took {len(taken)} records, the query {len(run.sink.rows().numbers)}; "
                  f"in both {len(both)}")
            assert not both, f"{len(both)} records reached both the worker and the sink, e.g. {sorted(both)[:10]}"
        finally:
            if worker.poll() is None:
                worker.stdin.write("stop\n")
                worker.stdin.flush()
            worker.wait(60)


#: The soak, short, on the cluster: every kind of the soak's faults at least once, broker kills and
#: controlled restarts among them, then the drain (``make soak SOAK_ARGS="--kafka cluster"`` is the long one).
CLUSTER_SOAK = SoakSettings(fault_seconds=25, drain_timeout_s=90, seed=25, gap_s=(1.0, 2.0))


@pytest.mark.soak
def test_soak_on_the_cluster_loses_and_duplicates_nothing(spark, kafka_cluster, tmp_path):
    report = run_soak(spark, kafka_cluster, tmp_path, CLUSTER_SOAK)
    print(report.table())
    expected_kinds = {f.name for f in applicable(embedded=False, cluster=True)}
    assert {"broker_killed", "broker_restarted"} <= expected_kinds
    assert set(report.faults) == expected_kinds, f"faults that never happened: {expected_kinds - set(report.faults)}"
    assert report.produced > 0 and report.in_sink > 0
    assert report.lost == 0, f"{report.lost} records lost, e.g. {report.lost_examples}\n{report.table()}"
    assert report.duplicated == 0, f"{report.duplicated} records duplicated in the sink\n{report.table()}"
    assert report.unexpected_failures == (), (
        f"{len(report.unexpected_failures)} query failure(s) no fault caused\n{report.table()}")
