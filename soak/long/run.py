"""Both lanes at once on one Kafka, sampled at the end of every interval: the long soak's run.

The broker lane is soak.run.run_soak itself, given hooks. Its tick (every 0.2 s or so, faults'
waits included) keeps the delta lane running, takes a sample when an interval ends, and stops the
delta lane's producer when the run's time is up, as run_soak stops its own. Its driver_killed fault
kills the broker lane's source runner only (the process the lane's progress rows name as its
member): the delta lane's runner then lives as long as its query does, so its memory over hours
says something, and the delta query fails only where the cluster's faults make it. After run_soak's
drain the delta lane drains, and soak.run.account accounts for both.
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
from pyspark.sql import SparkSession

from sharegroup_testing.kafka_peers import KafkaUnderTest
from sharegroup_testing.workers import source_workers
from soak.faults import FAULTS, SoakContext, SoakHooks
from soak.long.batches import BatchTimes
from soak.long.delta_lane import DeltaLane
from soak.long.footprints import footprints
from soak.long.intervals import Interval, LaneFigures, ProcessFigures, RecordFigures, SparkPerStart
from soak.long.processes import (
    HeapReading,
    driver_jvm,
    figures_of,
    heap_floor,
    jvm_heap,
    python_heap,
    release_free_memory,
    task_workers,
    thread_counts,
)
from soak.long.spark_baseline import measure_spark_per_start
from soak.long.tally import SinkTally, record_figures
from soak.long.verdict import LaneOutcome
from soak.numbers import NumberSet
from soak.report import SoakReport
from soak.run import SoakSettings, run_soak
from state_store import StateStore, StateStoreError

__all__ = ["LongSoakPlan", "LongSoakResult", "lane_runner", "run_long_soak"]


#: How long the broker lane's faults outlast the run: a broker's restart holds its loop, and so the sample, a
#: minute or more (15-73 s in the suite), and the last sample must come before the lane drains.
LAST_SAMPLE_MARGIN_S = 180.0


@dataclass(frozen=True)
class LongSoakPlan:
    """How long, how often sampled, and the load: ``records_per_s`` per lane."""

    minutes: float = 120.0
    interval_minutes: float = 10.0
    seed: int = 932
    #: per lane: both lanes, three brokers and a worker share two cores, and a lane that cannot keep up would show
    #: a growing backlog as growing batch times
    records_per_s: int = 100
    #: each lane's drain after the run: the last faults' recoveries (a killed runner's member fenced after the
    #: session timeout, a broker back in its ISRs), then the backlog
    drain_timeout_s: float = 90.0

    @property
    def seconds(self) -> float:
        return self.minutes * 60

    def boundaries(self) -> list[float]:
        """Seconds from the start at which each interval ends (the last one may be shorter)."""
        step = self.interval_minutes * 60
        return [min((k + 1) * step, self.seconds) for k in range(math.ceil(self.seconds / step - 1e-9))]

    def settings(self) -> SoakSettings:
        """The broker lane's: its faults go on :data:`LAST_SAMPLE_MARGIN_S` past the run's end, so the last
        interval is sampled as every other one, faults running, before any drain or account (2026-11-29's
        last sample came during the broker lane's drain, which tallies every record number each second: the
        driver's Python had 850 MB resident, against 418 ten minutes before, and Spark's block-manager pools
        122 threads more)."""
        return SoakSettings(fault_seconds=self.seconds + LAST_SAMPLE_MARGIN_S, drain_timeout_s=self.drain_timeout_s,
                            seed=self.seed, records_per_s=self.records_per_s)


@dataclass(frozen=True)
class LongSoakResult:
    intervals: list[Interval]
    reports: dict[str, SoakReport]
    outcomes: dict[str, LaneOutcome]
    worker_starts: int
    seconds: float
    #: what Spark itself leaves in the driver per query start, measured before the lanes started
    spark_per_start: SparkPerStart

    def to_json(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 1), "worker_starts": self.worker_starts,
                "spark_per_start": self.spark_per_start.to_dict(),
                "intervals": [i.to_dict() for i in self.intervals],
                "outcomes": {lane: asdict(outcome) for lane, outcome in self.outcomes.items()},
                # asdict would turn the Counter of faults into counts of (kind, count) pairs
                "reports": {lane: {**asdict(report), "faults": dict(report.faults)}
                            for lane, report in self.reports.items()}}


def lane_runner(state: Path, group: str) -> int | None:
    """The pid of the source runner whose member is in the lane's group, as the lane's progress rows say (None
    while no live run wrote one: a runner starting up writes its first row as its member joins)."""
    try:
        member = StateStore(str(state)).progress.member_in_group(group)
    except (StateStoreError, OSError):
        return None
    return member.pid if member is not None and member.process_is_alive() else None


def _process(pid: int | None) -> psutil.Process | None:
    """The process ``pid`` names, None without one or once it ended."""
    if pid is None:
        return None
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


class _Sampler:
    """Takes a sample at the end of each interval of ``plan``, from the running lanes."""

    def __init__(self, plan: LongSoakPlan, broker_work: Path, delta: DeltaLane, batches: BatchTimes):
        self._boundaries = plan.boundaries()
        self._broker_work, self._delta, self._batches = broker_work, delta, batches
        self._broker_sink: SinkTally | None = None
        self._sent_before = {"broker": 0, "delta": 0}
        self._delta_runner: int | None = None
        self.heap_floor = heap_floor()
        self.thread_floors = thread_counts(self._judged_processes)
        self.intervals: list[Interval] = []

    @property
    def pending(self) -> bool:
        return len(self.intervals) < len(self._boundaries)

    def due(self, elapsed_s: float) -> bool:
        return self.pending and elapsed_s >= self._boundaries[len(self.intervals)]

    def sample(self, ctx: SoakContext, elapsed_s: float) -> None:
        began = time.monotonic()
        release_free_memory()  # the driver Python's RSS is what is live (soak.long.processes)
        processes = self._processes(ctx)  # first: the samples below allocate, and resident memory keeps some
        python_heap_mb, soak_mb, blocks = python_heap()  # its collection frees JVM objects py4j held for garbage
        jvm = processes["driver_jvm"].pids
        heap = jvm_heap(jvm[0]) if jvm else HeapReading()
        self.heap_floor.read({"jvm_heap": heap.live_mb})
        batches = self._batches.take()
        lanes = {"broker": LaneFigures(batches["broker"], self._broker_records(ctx), ctx.query.starts),
                 "delta": LaneFigures(batches["delta"], self._delta_records(), self._delta.query.starts)}
        tables = footprints({"broker/state": self._broker_work / "state", "delta/state": self._delta.state,
                             "delta/group": self._delta.group_location})
        previous = self.intervals[-1].end_s if self.intervals else 0.0
        self.intervals.append(Interval(len(self.intervals) + 1, round(elapsed_s, 1), round(elapsed_s - previous, 1),
                                       processes, heap.live_mb, heap.metaspace_mb, python_heap_mb, blocks, lanes,
                                       tables, round(time.monotonic() - began, 1), soak_mb,
                                       jvm_heap_floor_mb=self.heap_floor.take().get("jvm_heap"),
                                       thread_floors={role: int(n) for role, n in self.thread_floors.take().items()},
                                       jvm_heap_committed_mb=heap.committed_mb))
        print(f"interval {len(self.intervals)} sampled at {elapsed_s / 60:.1f} min in "
              f"{self.intervals[-1].sample_s:.1f} s", flush=True)

    def _judged_processes(self) -> dict[str, psutil.Process | None]:
        """The processes whose threads are judged, by role, as they are now (the delta lane's runner as the last
        sample found it: finding it reads the lane's progress table)."""
        return {"driver_jvm": driver_jvm(), "driver_python": psutil.Process(),
                "runner_delta": _process(self._delta_runner), "worker": _process(self._delta.worker.pid)}

    def _processes(self, ctx: SoakContext) -> dict[str, ProcessFigures]:
        jvm = driver_jvm()
        runners = list(source_workers())
        broker = lane_runner(self._broker_work / "state", ctx.group)
        delta = self._delta_runner = lane_runner(self._delta.state, self._delta.group)
        worker = _process(self._delta.worker.pid)
        return {"driver_jvm": figures_of([jvm] if jvm is not None else []),
                "driver_python": figures_of([psutil.Process()]),
                "runner_broker": figures_of(p for p in runners if p.pid == broker),
                "runner_delta": figures_of(p for p in runners if p.pid == delta),
                "task_workers": figures_of(task_workers(jvm)),
                "worker": figures_of([worker] if worker is not None else [])}

    def _broker_records(self, ctx: SoakContext) -> RecordFigures:
        assert ctx.producer is not None, "run_soak gives its context the producer"
        if self._broker_sink is None:
            self._broker_sink = SinkTally(ctx.sink, self._broker_work / "checkpoint")
        self._broker_sink.update()
        accepted = NumberSet.of(set().union(*(m.accepted for m in ctx.members)))
        unanswered = NumberSet.of(set().union(*(m.unanswered for m in ctx.members)))
        records = record_figures(ctx.producer.delivered_numbers(), self._sent_before["broker"], self._broker_sink,
                                 accepted, unanswered)
        self._sent_before["broker"] = ctx.producer.sent
        return records

    def _delta_records(self) -> RecordFigures:
        delta = self._delta
        delta.update()
        records = record_figures(delta.producer.delivered_numbers(), self._sent_before["delta"], delta.sink_tally,
                                 delta.worker_tally.numbers, delta.worker_tally.unknown, delta.worker_tally.duplicated,
                                 exclusive=True)
        self._sent_before["delta"] = delta.producer.sent
        return records


class _LongSoak:
    """One run: the hooks run_soak calls, and what they share."""

    def __init__(self, spark: SparkSession, kafka: KafkaUnderTest, work: Path, plan: LongSoakPlan):
        self._plan = plan
        self._broker_work = work / "broker"
        self.delta = DeltaLane(spark, kafka, work / "delta", plan.settings())
        self.batches = BatchTimes({"broker": self._broker_work / "checkpoint", "delta": self.delta.checkpoint})
        self.sampler = _Sampler(plan, self._broker_work, self.delta, self.batches)
        self._started = time.monotonic()
        self.ctx: SoakContext | None = None

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    def start(self) -> None:
        self.delta.start()
        self.sampler.heap_floor.start()
        self.sampler.thread_floors.start()
        self._started = time.monotonic()

    def tick(self, ctx: SoakContext) -> None:
        self.ctx = ctx  # the delta lane keeps itself running, in its own thread
        if self.sampler.due(self.elapsed_s):
            self.sampler.sample(ctx, self.elapsed_s)
        if self.elapsed_s >= self._plan.seconds:
            self.delta.stop_producing()

    def kill_broker_runner(self, ctx: SoakContext) -> int:
        """SIGKILL the broker lane's runner only; 0 (the fault did not happen) while none is known."""
        pid = lane_runner(self._broker_work / "state", ctx.group)
        doomed = [p for p in source_workers() if p.pid == pid]
        for process in doomed:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGKILL)
        return len(doomed)

    def broker_lane(self, spark: SparkSession, kafka: KafkaUnderTest) -> SoakReport:
        return run_soak(spark, kafka, self._broker_work, self._plan.settings(),
                        SoakHooks(tick=self.tick, kill_driver_workers=self.kill_broker_runner))


def _outcome(report: SoakReport, faults: int, extra_duplicates: int = 0,
             extra_failures: tuple[str, ...] = ()) -> LaneOutcome:
    return LaneOutcome(report.produced, report.in_sink, report.accepted_by_independent, report.lost,
                       report.duplicated + extra_duplicates, report.unexpected_failures + extra_failures,
                       report.query_starts, faults, report.unanswered_at_independent)


def run_long_soak(spark: SparkSession, kafka: KafkaUnderTest, work: Path, plan: LongSoakPlan) -> LongSoakResult:
    """Spark's own per-start objects first (soak.long.spark_baseline), then both lanes for ``plan.minutes``, a
    sample per interval, then their drains and accounts."""
    spark_per_start = measure_spark_per_start(spark, str(work / "spark-baseline"))
    print(f"Spark's own per query start in the driver: threads {spark_per_start.threads}, descriptors "
          f"{spark_per_start.fds}", flush=True)
    soak = _LongSoak(spark, kafka, work, plan)
    spark.streams.addListener(soak.batches)
    try:
        soak.start()
        broker = soak.broker_lane(spark, kafka)
        if soak.sampler.pending and soak.ctx is not None:  # run_soak's drain ended before the last interval did
            soak.sampler.sample(soak.ctx, soak.elapsed_s)
        soak.delta.drain(plan.drain_timeout_s)
    finally:
        soak.sampler.heap_floor.stop()
        soak.sampler.thread_floors.stop()
        soak.delta.stop()
        spark.streams.removeListener(soak.batches)
    delta = soak.delta.report()
    worker = soak.delta.worker
    # the Delta group gives a record to one member: one in the sink and with the worker too is a duplicate
    cluster_faults = sum(broker.faults[fault.name] for fault in FAULTS if fault.needs_cluster)  # they hit both
    delta_outcome = _outcome(delta, cluster_faults, soak.delta.worker_tally.duplicated + delta.in_both,
                             tuple(f"worker {end}" for end in worker.exits))
    broker_outcome = _outcome(broker, sum(broker.faults.values()))
    return LongSoakResult(soak.sampler.intervals, {"broker": broker, "delta": delta},
                          {"broker": broker_outcome, "delta": delta_outcome}, worker.starts, soak.elapsed_s,
                          spark_per_start)
