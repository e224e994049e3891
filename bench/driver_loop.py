"""Figures (c), (e) and (f): the source's driver methods in a process of their own, in Spark's call order.

Spark runs ``MicroBatchDriver`` in one Python worker per query (python_streaming_source_runner);
calling the same object here, without Spark around it, isolates what the source itself costs per
micro-batch. Spark's order is kept: ``latest_offset(start)`` (which acknowledges ``start``'s
epoch, then acquires the next), ``commit(start)``, ``plan(start, end)``. Three passes, each on
a fresh share group over the same records, so no pass disturbs another's figures:

- timing (several runs, batches pooled): wall time of the three calls per batch, and how much of it
  is the broker's (ShareFetch and ShareAcknowledge round trips, measured by wrapping the member's
  ``poll`` and ``commit``);
- profile: cProfile over the same calls, folded into "where the time goes" buckets;
- memory: tracemalloc, Arrow's allocator and resident memory around one acquired epoch.

It runs in a child process so that resident memory is the driver's alone, not the embedded
broker's (which lives in the parent) nor Spark's.
"""

from __future__ import annotations

import cProfile
import functools
import multiprocessing
import pstats
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
from confluent_kafka import ShareConsumer

from bench.measure import percentiles_ms
from sharegroup_source.coordinators.broker.share_client import ShareClient
from sharegroup_source.driver import micro_batch
from sharegroup_source.driver.epoch_book import offset_ranges
from sharegroup_source.driver.micro_batch import MicroBatchDriver
from sharegroup_source.driver.planning import payload_partitions
from sharegroup_source.options import SourceOptions
from sharegroup_source.schema import records_to_arrow
from state_store.decisions import Decisions
from state_store.delta_table import StateTable
from state_store.ledger import Ledger

__all__ = ["DriverJob", "measure_driver"]

#: cProfile entries folded into named buckets, each named by the function it times (a move or a
#: rename fails at import, and a bucket that matches no call fails the pass). Chosen so that no bucket
#: calls into another one; everything else is "other connector Python".
_BUCKETS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("broker: ShareFetch (poll)", ShareConsumer.poll),
    ("broker: ShareAcknowledge (commit_sync)", ShareConsumer.commit_sync),
    ("Delta commits (ledger, progress)", StateTable.commit),
    ("Delta reads (ledger)", Ledger.get),
    ("Delta reads (decisions)", Decisions.for_epochs),
    ("records -> Arrow", records_to_arrow),
    ("ledger entry from records", offset_ranges),
    ("partitions: sort + compressed Arrow IPC", payload_partitions),
    ("staging acks (acknowledge_offset)", ShareConsumer.acknowledge_offset),
)
_CALLS = (MicroBatchDriver.latest_offset, MicroBatchDriver.plan, MicroBatchDriver.commit)
#: The connector's own code, for the self-time hot spots that explain "other connector Python".
_OWN_CODE = ("/sharegroup_source/", "/state_store/")
_REPO = str(Path(micro_batch.__file__).resolve().parents[1]) + "/"
_HOT_SPOTS = 8


@dataclass(frozen=True)
class DriverJob:
    """What the child process needs: where the records are, and one fresh share group per pass."""

    bootstrap_servers: str
    topic: str
    records: int
    state_root: str
    timing_groups: tuple[str, ...]  # one timing run per group, their batches pooled
    profile_group: str
    memory_group: str
    memory_batches: int
    timeout_s: float


class _Timed:
    """Inside ``with``, every call of ``owner.name`` adds its wall time to ``seconds``: how long the member waited
    on the broker. The method is wrapped on its class, so no member's internals are reached into; the passes
    run one driver at a time in a process of their own."""

    def __init__(self, owner: type, name: str):
        self._owner, self._name = owner, name
        self.seconds = 0.0

    def __enter__(self) -> _Timed:
        method = getattr(self._owner, self._name)

        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - began

        setattr(self._owner, self._name, timed)
        self._method = method
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self._owner, self._name, self._method)

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def _driver(job: DriverJob, group: str, name: str) -> MicroBatchDriver:
    return MicroBatchDriver(SourceOptions.parse({
        "kafka.bootstrap.servers": job.bootstrap_servers, "kafka.group.id": group, "subscribe": job.topic,
        "stateLocation": str(Path(job.state_root) / name)}))


def _spark_order(driver: MicroBatchDriver, job: DriverJob, on_batch: Callable[[int, float], None],
                 around: Callable[[], AbstractContextManager[Any]] = nullcontext) -> float:
    """Drive batches until ``job.records`` were acquired; returns the steady-state seconds (batch 2..n).

    ``on_batch(records, seconds)`` gets each batch's record count and the wall time of its three
    calls; ``around`` is a context manager factory entered around each round of calls, batch or idle.
    """
    start = driver.initial_offset()
    acquired, steady_from = 0, None
    deadline = time.monotonic() + job.timeout_s
    while acquired < job.records and time.monotonic() < deadline:
        began = time.perf_counter()
        with around():
            end = driver.latest_offset(start, None)
            if start["epoch"] > 0:
                driver.commit(start["epoch"])
            if end != start:
                driver.plan(start, end)
        seconds = time.perf_counter() - began
        if end == start:
            continue
        batch = driver.counters.acquired - acquired
        acquired = driver.counters.acquired
        on_batch(batch, seconds)
        steady_from = steady_from or time.perf_counter()
        start = end
    driver.commit(start["epoch"])  # the last batch's acknowledgement belongs to the run, as in the baseline
    return time.perf_counter() - steady_from if steady_from else 0.0


def _profiling(profiler: cProfile.Profile) -> Callable[[], AbstractContextManager[None]]:
    @contextmanager
    def enabled() -> Iterator[None]:
        profiler.enable()
        try:
            yield
        finally:
            profiler.disable()

    return enabled


def _timing_pass(job: DriverJob) -> dict[str, Any]:
    runs = [_timing_run(job, group, f"timing-{n}") for n, group in enumerate(job.timing_groups)]
    steady = [batch for batches, _ in runs for batch in batches]
    records = sum(b["records"] for b in steady)
    return {
        "runs": len(runs), "batches": len(steady),
        "records_per_batch_p50": statistics.median(b["records"] for b in steady),
        "source_calls": percentiles_ms([b["calls_s"] for b in steady]),
        "broker_round_trips": percentiles_ms([b["broker_s"] for b in steady]),
        "connector_own": percentiles_ms([b["own_s"] for b in steady]),
        "connector_own_us_per_record": round(sum(b["own_s"] for b in steady) / max(records, 1) * 1e6, 2),
        "records_per_s": round(records / sum(seconds for _, seconds in runs)),
    }


def _timing_run(job: DriverJob, group: str, name: str) -> tuple[list[dict[str, float]], float]:
    """One run's steady-state batches (all but the first) and their seconds."""
    driver = _driver(job, group, name)
    poll, commit = _Timed(ShareClient, "poll"), _Timed(ShareClient, "commit")
    batches: list[dict[str, float]] = []

    @contextmanager
    def round_of_calls() -> Iterator[None]:
        poll.take(), commit.take()  # an idle round's broker time belongs to no batch
        yield

    def on_batch(records: int, seconds: float) -> None:
        broker = poll.take() + commit.take()
        batches.append({"records": records, "calls_s": seconds, "broker_s": broker, "own_s": seconds - broker})

    try:
        with poll, commit:
            seconds = _spark_order(driver, job, on_batch, around=round_of_calls)
    finally:
        driver.stop()
    return batches[1:], seconds


def _profile_pass(job: DriverJob) -> dict[str, Any]:
    driver = _driver(job, job.profile_group, "profile")
    profiler = cProfile.Profile()
    batches: list[int] = []
    try:
        _spark_order(driver, job, lambda records, _seconds: batches.append(records), around=_profiling(profiler))
    finally:
        driver.stop()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    def cumulative(function: Callable[..., Any]) -> tuple[int, float]:
        key = _profile_key(function)
        calls, seconds = 0, 0.0
        for (file, _line, name), (_cc, ncalls, _tt, ct, _callers) in stats.items():
            if (file, name) == key:
                calls, seconds = calls + ncalls, seconds + ct
        return calls, seconds

    total = sum(cumulative(call)[1] for call in _CALLS)
    records, epochs = sum(batches), len(batches)
    rows = []
    for label, function in _BUCKETS:
        calls, seconds = cumulative(function)
        if calls == 0:
            raise RuntimeError(f"profile bucket {label!r} matched no call of {_profile_key(function)}: "
                               "the driver no longer calls it; update _BUCKETS")
        rows.append({"bucket": label, "seconds": round(seconds, 3), "calls_per_epoch": round(calls / epochs, 1)})
    rows.append({"bucket": "other connector Python", "seconds": round(total - sum(r["seconds"] for r in rows), 3),
                 "calls_per_epoch": None})
    for row in rows:
        row["share"] = round(row["seconds"] / total, 3)
        row["ms_per_epoch"] = round(row["seconds"] / epochs * 1000, 1)
        row["us_per_record"] = round(row["seconds"] / records * 1e6, 2)
    own = sorted(((tt, file, name) for (file, _line, name), (_cc, _nc, tt, _ct, _callers) in stats.items()
                  if any(part in file for part in _OWN_CODE)), reverse=True)[:_HOT_SPOTS]
    hot = [{"function": f"{file.removeprefix(_REPO)}:{name}", "self_ms_per_epoch": round(tt / epochs * 1000, 1)}
           for tt, file, name in own]
    return {"epochs": epochs, "records": records, "seconds": round(total, 3), "buckets": rows, "hot_spots": hot}


def _profile_key(function: Callable[..., Any]) -> tuple[str, str]:
    """(file, name) as cProfile records ``function``: Python code by its code object, C methods as ``~``."""
    code = getattr(function, "__code__", None)
    if code is not None:
        return code.co_filename, code.co_name
    owner = function.__objclass__  # type: ignore[attr-defined]
    return "~", f"<method '{function.__name__}' of '{owner.__module__}.{owner.__name__}' objects>"


def _memory_pass(job: DriverJob) -> dict[str, Any]:
    """Memory one acquired epoch holds between ``latest_offset`` and its acknowledgement.

    Each batch is committed right after planning, so before every batch the driver holds
    nothing; what it holds after ``plan`` is the epoch in flight (its Arrow payload, ledger
    entry and dedupe ranges). Python objects are counted by tracemalloc, Arrow buffers by
    Arrow's allocator; librdkafka's buffers show up only in resident memory.
    """
    driver = _driver(job, job.memory_group, "memory")
    process = psutil.Process()
    samples: list[dict[str, float]] = []
    tracemalloc.start()
    try:
        start = driver.initial_offset()
        deadline = time.monotonic() + job.timeout_s
        while len(samples) <= job.memory_batches and time.monotonic() < deadline:
            tracemalloc.reset_peak()
            heap_before, arrow_before, rss_before = (tracemalloc.get_traced_memory()[0], pa.total_allocated_bytes(),
                                                     process.memory_info().rss)
            acquired_before = driver.counters.acquired
            end = driver.latest_offset(start, None)
            if end == start:
                continue
            partitions = driver.plan(start, end)
            heap_after, heap_peak = tracemalloc.get_traced_memory()
            del partitions  # pickled to the JVM by Spark and dropped; the epoch's payload stays held
            held_heap = tracemalloc.get_traced_memory()[0]
            samples.append({"records": driver.counters.acquired - acquired_before,
                            "heap_peak": heap_peak - heap_before, "heap_with_partitions": heap_after - heap_before,
                            "heap_held": held_heap - heap_before,
                            "arrow_held": pa.total_allocated_bytes() - arrow_before,
                            "rss_growth": process.memory_info().rss - rss_before})
            driver.commit(end["epoch"])
            start = end
    finally:
        tracemalloc.stop()
        driver.stop()
    measured = samples[1:]  # the first batch also pays for imports and caches
    records = max(sum(s["records"] for s in measured), 1)

    def per_10k_mb(name: str) -> float:
        return round(sum(s[name] for s in measured) / records * 10_000 / 2**20, 2)

    return {"batches": len(measured), "records_per_batch": records // max(len(measured), 1),
            "python_heap_peak_mb_per_10k": per_10k_mb("heap_peak"),
            "python_heap_with_partitions_mb_per_10k": per_10k_mb("heap_with_partitions"),
            "python_heap_held_mb_per_10k": per_10k_mb("heap_held"),
            "arrow_held_mb_per_10k": per_10k_mb("arrow_held"),
            "rss_growth_mb_per_10k": per_10k_mb("rss_growth"),
            "process_rss_mb": round(process.memory_info().rss / 2**20, 1)}


def _all_passes(job: DriverJob) -> dict[str, Any]:
    return {"timing": _timing_pass(job), "profile": _profile_pass(job), "memory": _memory_pass(job)}


def measure_driver(job: DriverJob) -> dict[str, Any]:
    """Run the three passes in a fresh child process and return their figures."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_all_passes, job).result()
