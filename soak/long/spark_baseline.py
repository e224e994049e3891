"""What each start of a streaming query leaves behind in the driver that is Spark's own, measured in the same run.

Each start of a query that reads a Python data source into ``foreachBatch`` leaves objects in the
driver that Spark (4.0 to 4.3) never frees: in the JVM an idle-worker monitor thread, a listening
socket and selectors of the Python data source's worker factory; in the driver's Python a py4j
callback thread and its socket, kept after the query's stream thread ends. The broker lane
restarts its query every half minute or so under its faults, so over hours these add hundreds of
threads and descriptors that no code of the connector can free.

So the long soak measures them before its lanes start, on the same session, with a Python data
source of a few lines (not the connector: a counter) into a ``foreachBatch`` that counts its rows.
A first start warms up what a session creates once; then :data:`PROBE_STARTS` starts are counted.
Both samples wait until Spark's cached pools (block managers, adaptive query stages) have let their
idle threads go: sampled right after the starts, those pools counted 4 to 9 threads a start
(2026-11-29), which they give back a minute later. A thread name or a descriptor kind counts as
left per start when it grew by at least one a start; what grew less does not, so the allowance
errs short. The verdict gives the driver's threads and descriptors this much per start of the
lanes' queries between the two intervals it compares, and no more.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import psutil
from pyspark.sql import DataFrame, SparkSession

from soak.long.intervals import ProcessFigures, SparkPerStart
from soak.long.processes import driver_jvm, figures_of

__all__ = ["PROBE_STARTS", "measure_spark_per_start"]

#: Counted starts: enough that a name growing once a start stands out of pools that grow by a few now and then.
PROBE_STARTS = 4
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
    frame.count()


def _one_start(spark: SparkSession, checkpoint: str) -> None:
    query = (spark.readStream.format("soak_spark_baseline").load().writeStream
             .foreachBatch(_count).option("checkpointLocation", checkpoint).start())
    try:
        deadline = time.monotonic() + FIRST_BATCH_TIMEOUT_S
        while not any(p.get("numInputRows") for p in query.recentProgress):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the baseline query ran no batch within {FIRST_BATCH_TIMEOUT_S:.0f} s")
            if query.exception() is not None:
                raise RuntimeError(f"the baseline query failed: {query.exception()}")
            time.sleep(0.2)
    finally:
        query.stop()


def measure_spark_per_start(spark: SparkSession, work: str) -> SparkPerStart:
    """Start and stop the counter query 1 + :data:`PROBE_STARTS` times (each with a new checkpoint under ``work``)
    and return what the counted starts left in the driver per start."""
    spark.dataSource.register(_counter_source())
    _one_start(spark, f"{work}/warm-up")
    before = _idle_driver()
    for k in range(PROBE_STARTS):
        _one_start(spark, f"{work}/start-{k}")
    after = _idle_driver()
    return SparkPerStart(
        {role: _per_start(before[role].thread_names, after[role].thread_names) for role in DRIVER_ROLES},
        {role: _per_start(before[role].fd_kinds, after[role].fd_kinds) for role in DRIVER_ROLES}, PROBE_STARTS)
