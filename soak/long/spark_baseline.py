"""What each start of a streaming query leaves behind in the driver that is Spark's own, measured in the same run.

Each start of a query that reads a Python data source into ``foreachBatch`` leaves objects in the
driver that Spark (4.0 to 4.3) never frees: in the JVM an idle-worker monitor thread, a listening
socket and selectors of the Python data source's worker factory; in the driver's Python a py4j
callback thread and its socket, kept after the query's stream thread ends. The broker lane
restarts its query every half minute or so under its faults, so over hours these add hundreds of
threads and descriptors that no code of the connector can free.

So the long soak measures them before its lanes start, on the same session, with a Python data
source of a few lines (not the connector: a counter) into a ``foreachBatch`` that counts its rows.
A first start warms up what a session creates once; then :data:`PROBE_STARTS` starts that end with
``stop()`` are counted, and as many that end with their driver-side source worker SIGKILLed, as most
of the broker lane's faults end its query (in 2026-11-29's 2-hour run the JVM grew by two sockets
and two anonymous inodes per idle-worker monitor, where stopped starts had left one of each). A
thread name or a descriptor kind is allowed what the costlier of the two ends left.

Threads are sampled before and after each end's starts, once Spark's cached pools (block managers,
adaptive query stages) have let their idle threads go: sampled right after the starts, those pools
counted 4 to 9 threads a start (2026-11-29), which they give back a minute later. A name counts as
left per start when it grew by at least one a start; what grew less does not, so the allowance errs
short. Descriptors are no pool's: they are sampled around every start, and a kind is allowed the
median of the starts' own growths. A total floored over the starts read one socket a start where
every start of the lanes left two (2026-11-30's 2-hour run: 843 -> 1,687 JVM descriptors over 211
starts, against an allowance of 1,560): one start whose socket had not closed yet, or had closed
early, at a sample moves a total; the median of five starts reads through one such start. The verdict
gives the driver's threads and descriptors this much per start of the lanes' queries between the
two intervals it compares, and no more.

The driver JVM's live heap gains per start the session the query cloned (its SessionState, SQLConf and
function registry; 278 KB a start over 80 starts with the status store's caps at 20, 2026-11-29, one
SparkSession, SessionState and PythonWorkerFactory more each start and no MicroBatchExecution), most likely
held by the monitor thread, which inherits the stream thread's active session (an InheritableThreadLocal).
Each batch may also add an entry to Spark's status store, which keeps a number of them
(``spark.sql.ui.retainedExecutions``, 1,000) and is full within the soak's first minutes but not in the
probe's. So the probe runs :data:`HEAP_STARTS` more short starts and one start of :data:`HEAP_BATCHES`
batches, and solves for both: heap = starts x per start + batches x per batch. Each heap reading is the least
of a few full collections seconds apart: Spark's context cleaner frees what a collection found unreachable
only afterwards, and a single reading after the probe's first starts was 5 MB above the next (2026-11-29).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Iterator, Mapping
from typing import Any

import psutil
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from sharegroup_source.batch_interruption import short_on_stop
from sharegroup_testing.workers import kill_source_workers
from soak.long.intervals import ProcessFigures, SparkPerStart
from soak.long.processes import driver_jvm, figures_of, jvm_heap

__all__ = ["HEAP_BATCHES", "HEAP_STARTS", "PROBE_STARTS", "measure_spark_per_start"]

#: Counted starts of each end: enough that a name growing once a start stands out of pools that grow by a few now
#: and then, and odd, so that the descriptors' median is one start's growth.
PROBE_STARTS = 5
#: Short starts that measure the heap a start leaves (a quarter of a MB each, against readings a MB or two apart),
#: and the batches of the one long start that tells what a batch adds from what a start does.
HEAP_STARTS = 24
HEAP_BATCHES = 30
#: Full collections per heap reading, this far apart (the context cleaner's turn in between).
HEAP_READINGS = 3
HEAP_READING_GAP_S = 3.0
#: A start's wait for its first batch: the first start of a session compiles and starts the data source's worker.
FIRST_BATCH_TIMEOUT_S = 120.0
#: Spark's cached thread pools end a thread idle this long (ThreadUtils.newDaemonCachedThreadPool's keep-alive, 60 s),
#: plus a margin.
POOL_KEEP_ALIVE_S = 65.0
#: The driver's processes the allowance is for, as the soak's samples name them.
DRIVER_ROLES = ("driver_jvm", "driver_python")


def _per_start(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """Names that grew by at least one a counted start, and by how many a start."""
    grown = {name: (after[name] - before.get(name, 0)) // PROBE_STARTS for name in after}
    return {name: n for name, n in sorted(grown.items()) if n > 0}


def _idle_driver() -> dict[str, ProcessFigures]:
    """The driver's figures once Spark's cached pools let their idle threads go."""
    time.sleep(POOL_KEEP_ALIVE_S)
    return _driver()


def _heap_mb() -> float:
    """The driver JVM's live heap: the least of :data:`HEAP_READINGS` full collections."""
    jvm = driver_jvm()
    readings = []
    for n in range(HEAP_READINGS):
        if n:
            time.sleep(HEAP_READING_GAP_S)
        live = jvm_heap(jvm.pid).live_mb if jvm is not None else None
        if live is not None:
            readings.append(live)
    if not readings:
        raise RuntimeError("the baseline could not read the driver JVM's heap (jcmd)")
    return min(readings)


def _driver() -> dict[str, ProcessFigures]:
    jvm = driver_jvm()
    return {"driver_jvm": figures_of([jvm] if jvm is not None else []),
            "driver_python": figures_of([psutil.Process()])}


def _counter_source() -> type:
    """A streaming data source whose every trigger has one row: defined in a function, so cloudpickle sends the
    class itself to the source's worker, which need not import the soak."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class CounterReader(DataSourceStreamReader):
        def __init__(self) -> None:
            self._next = 0

        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def latestOffset(self) -> dict[str, int]:  # type: ignore[override]  # Spark 4.0/4.1's signature, still called
            self._next += 1
            return {"n": self._next}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition((start["n"], end["n"]))]

        def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
            low, high = partition.value
            yield from ((n,) for n in range(low, high))

        def commit(self, end: dict[str, int]) -> None:
            return None

    class CounterSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "soak_spark_baseline"

        def schema(self) -> str:
            return "n long"

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return CounterReader()

    return CounterSource


def _count(frame: DataFrame, _: int) -> None:
    with short_on_stop():  # as the soak's sinks: a long traceback overflows Spark's check of it in the stream thread
        frame.count()


def _one_start(spark: SparkSession, checkpoint: str, killed: bool = False, batches: int = 1) -> int:
    """One start that runs ``batches`` batches, then ends with ``stop()``, or ``killed``: its source worker
    SIGKILLed; how many batches it ran."""
    query = (spark.readStream.format("soak_spark_baseline").load().writeStream
             .foreachBatch(_count).option("checkpointLocation", checkpoint).start())
    try:
        deadline = time.monotonic() + FIRST_BATCH_TIMEOUT_S
        while sum(1 for p in query.recentProgress if p.get("numInputRows")) < batches:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the baseline query ran no batch within {FIRST_BATCH_TIMEOUT_S:.0f} s")
            if query.exception() is not None:
                raise RuntimeError(f"the baseline query failed: {query.exception()}")
            time.sleep(0.2)
        if killed:
            if not kill_source_workers():
                raise RuntimeError("the baseline query had no source worker to kill")
            try:
                ended = query.awaitTermination(FIRST_BATCH_TIMEOUT_S)
            except StreamingQueryException:  # what a killed worker ends a query with (java.io.EOFException)
                ended = True
            if not ended:
                raise TimeoutError(f"the baseline query outlived its killed worker by {FIRST_BATCH_TIMEOUT_S:.0f} s")
    finally:
        query.stop()
    return len(query.recentProgress)


def measure_spark_per_start(spark: SparkSession, work: str) -> SparkPerStart:
    """Start the counter query once to warm up, then :data:`PROBE_STARTS` times ending with ``stop()`` and as many
    ending with a killed source worker (each with a new checkpoint under ``work``); return, per thread name and
    descriptor kind, what the costlier of the two ends left in the driver per start."""
    spark.dataSource.register(_counter_source())
    _one_start(spark, f"{work}/warm-up")
    idle = [_idle_driver()]
    fds: dict[str, dict[str, int]] = {role: {} for role in DRIVER_ROLES}
    for killed in (False, True):
        around = [_driver()]
        for k in range(PROBE_STARTS):
            _one_start(spark, f"{work}/start-{killed}-{k}", killed)
            around.append(_driver())
        idle.append(_idle_driver())
        for role in DRIVER_ROLES:
            fds[role] = _larger(fds[role], _median_growth([sample[role].fd_kinds for sample in around]))
    heap = [_heap_mb()]
    short_batches = sum(_one_start(spark, f"{work}/heap-{k}") for k in range(HEAP_STARTS))
    heap.append(_heap_mb())
    long_batches = _one_start(spark, f"{work}/long", batches=HEAP_BATCHES)
    heap.append(_heap_mb())
    per_start = _heap_per_start(heap[1] - heap[0], HEAP_STARTS, short_batches, heap[2] - heap[1], long_batches)
    return SparkPerStart({role: _costlier(idle, role) for role in DRIVER_ROLES}, fds, PROBE_STARTS, per_start)


def _heap_per_start(grown: float, starts: int, batches: int, long_grown: float, long_batches: int) -> float:
    """What a start leaves in the heap (MB), from ``starts`` starts of ``batches`` batches in all that grew it
    ``grown`` and one start of ``long_batches`` that grew it ``long_grown``: both are starts x s + batches x b.
    Never below 0: a collection that freed more than the starts left allows nothing."""
    ratio = batches / long_batches
    return round(max(0.0, (grown - ratio * long_grown) / (starts - ratio)), 3)


def _costlier(samples: list[dict[str, ProcessFigures]], role: str) -> dict[str, int]:
    """Per thread name, the larger per-start growth of the consecutive ``samples`` of ``role``."""
    grown: dict[str, int] = {}
    for before, after in itertools.pairwise(samples):
        grown = _larger(grown, _per_start(before[role].thread_names, after[role].thread_names))
    return grown


def _median_growth(counts: list[Mapping[str, int]]) -> dict[str, int]:
    """Per name, the median of what each step of ``counts`` (a sample around every start) grew it by; the names
    whose median is above 0."""
    names = sorted({name for sample in counts for name in sample})
    median = {name: statistics.median_low(after.get(name, 0) - before.get(name, 0)
                                          for before, after in itertools.pairwise(counts)) for name in names}
    return {name: n for name, n in median.items() if n > 0}


def _larger(one: Mapping[str, int], other: Mapping[str, int]) -> dict[str, int]:
    """Per name, the larger of the two counts."""
    return {name: max(one.get(name, 0), other.get(name, 0)) for name in sorted({*one, *other})}
