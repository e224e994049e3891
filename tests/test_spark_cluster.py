"""format("sharegroup") on a Spark standalone cluster, executors killed under a running query, per coordinator.

``local[2]`` runs tasks in the driver's JVM, so no test there loses an executor. Here the driver runs in client
mode beside a master and two workers (tests/spark_cluster.py), each executor a JVM of its own with its own
Python workers; one driver serves the module's tests in turn. While the query reads numbered records into a
parquet file sink (Spark's exactly-once sink), one executor's JVM is SIGKILLed as it runs a task, then, once a
batch committed after that, the other executor's Python workers (the daemon and its forks). Spark runs the lost
tasks again and the worker relaunches the executor: the sink has every record once, and the query never stopped.

Records keep coming while the kills land (:class:`SteadyProducer`), so the query has work at each kill and
batches run after it on what the kill left.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from tests.scenarios import assert_exactly_once
from tests.spark_cluster import ClusterDriver, Executor, ExecutorTasks, SparkCluster, cluster_driver, spark_cluster  # noqa: F401 - fixtures
from tests.streams import StreamSetup
from tests.test_delta_coordinator import DeltaSetup

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark-cluster")]

PARTITIONS = 4
#: Records in the topic before the query starts: its first batches.
FIRST_RECORDS = 10_000
#: At most 2,000 records a batch in tasks of 1,000: both executors get a task in every batch.
OPTIONS = {"maxRecordsPerTrigger": 2000, "maxRecordsPerPartition": 1000}
#: Kills of one kind before the test gives up finding a task to kill: a kill lands mid-task more often than not.
KILLS = 10


class SteadyProducer:
    """Numbered records (after ``first``), ``chunk`` every ``interval_s`` on a thread until :meth:`stop`: below
    what the query reads a second, so it keeps up, and never runs out of work while the test kills."""

    def __init__(self, kafka: KafkaUnderTest, topic: str, first: int, chunk: int = 300, interval_s: float = 0.2):
        self.kafka, self.topic, self.next = kafka, topic, first
        self.chunk, self.interval_s = chunk, interval_s
        self.produced: set[tuple[int, bytes]] = set()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                self.produced |= self.kafka.produce_numbered(self.topic, self.chunk, PARTITIONS, first=self.next)
                self.next += self.chunk
        except BaseException as error:  # re-raised in the test's thread by stop()
            self._error = error

    def stop(self) -> set[tuple[int, bytes]]:
        """Stop producing; what was produced, as (partition, value)."""
        self._stop.set()
        self._thread.join(60)
        if self._error is not None:
            raise self._error
        return self.produced


def _sink_against(spark: SparkSession, setup: StreamSetup, produced: set[tuple[int, bytes]]) -> str:
    """What a failing wait says of the sink: its rows, what is missing from it, what it holds twice."""
    rows = [(partition, value) for partition, value, _ in setup.sink_rows(spark)]
    missing, twice = produced - set(rows), len(rows) - len(set(rows))
    return f"{len(rows)} rows in the sink, {len(missing)} records missing (e.g. {sorted(missing)[:3]}), {twice} twice"


def _executors(cluster: SparkCluster, app_id: str) -> list[Executor]:
    """The application's two executors, one on each worker, once both run."""
    def found() -> list[Executor]:
        executors = [e for e in cluster.executors() if e.app_id == app_id]
        return executors if len(executors) == 2 else []

    return wait_for(found, 90, f"2 executors of {app_id}", interval_s=0.2,
                    state=lambda: f"{cluster.executors()}\n{cluster.describe()}")


def _relaunched(cluster: SparkCluster, driver: ClusterDriver, killed: Executor) -> Executor:
    """The executor ``killed``'s worker launched in its place (the master asks it to: the application is short of
    cores), once the driver took it."""
    def found() -> Executor | None:
        new = next((e for e in cluster.executors() if e.app_id == killed.app_id and e.worker == killed.worker
                    and e.pid != killed.pid), None)
        return new if new is not None and _tasks_once(driver, new, lambda tasks: tasks.active)() else None

    return wait_for(found, 90, f"an executor in place of {killed.executor_id} on worker {killed.worker}",
                    interval_s=0.2, state=lambda: f"{cluster.executors()}\n{cluster.describe()}")


def _tasks_once(driver: ClusterDriver, executor: Executor,
                condition: Callable[[ExecutorTasks], bool]) -> Callable[[], ExecutorTasks | None]:
    """For ``wait_for``: ``executor``'s tasks as the driver says them, once they meet ``condition``."""
    def met() -> ExecutorTasks | None:
        tasks = driver.executors().get(executor.executor_id)
        return tasks if tasks is not None and condition(tasks) else None

    return met


def _a_task_ended(before: ExecutorTasks, now: ExecutorTasks) -> bool:
    return now.failed > before.failed or now.completed > before.completed


def _when_running_a_task(driver: ClusterDriver, executor: Executor) -> ExecutorTasks:
    """Wait until the driver says ``executor`` runs a task; its tasks then."""
    return wait_for(_tasks_once(driver, executor, lambda tasks: tasks.running > 0), 90,
                    f"executor {executor.executor_id} running a task", interval_s=0.01, state=driver.describe)


def _kill_executor_mid_task(cluster: SparkCluster, driver: ClusterDriver, executor: Executor) -> tuple[Executor, int]:
    """SIGKILL ``executor``'s JVM as it runs a task. A task may end between the driver's word and the kill: when
    the driver, dropping the executor, has no task of it lost or still running (its UI counts the lost task as
    either, as the task's end comes before or after the executor's removal), its replacement is killed the same
    way. Returns the executor last killed and how many kills it took."""
    for kills in range(1, KILLS + 1):
        seen = _when_running_a_task(driver, executor)
        os.kill(executor.pid, signal.SIGKILL)
        dropped = wait_for(_tasks_once(driver, executor, lambda tasks: not tasks.active), 60,
                           f"the driver to drop executor {executor.executor_id}", state=driver.describe)
        if dropped.failed > seen.failed or dropped.running > 0:
            return executor, kills
        executor = _relaunched(cluster, driver, executor)
    raise AssertionError(f"{KILLS} executor kills, none of them during a task: {driver.executors()}")


def _kill_python_workers_mid_task(driver: ClusterDriver, executor: Executor) -> tuple[int, int]:
    """SIGKILL ``executor``'s Python workers as it runs a task, again if the driver then counts a task done on it
    before one lost (the kill fell between tasks: the executor starts a new daemon for the next). Returns how
    many Python processes the last kill took and how many kills it took."""
    for kills in range(1, KILLS + 1):
        wait_for(executor.python_workers, 60, f"Python workers under executor {executor.executor_id}")
        before = _when_running_a_task(driver, executor)
        pythons = executor.python_workers()
        for process in pythons:
            process.send_signal(signal.SIGKILL)
        after = wait_for(_tasks_once(driver, executor, partial(_a_task_ended, before)), 60,
                         f"a task of executor {executor.executor_id} to end", state=driver.describe)
        if after.failed > before.failed:
            return len(pythons), kills
    raise AssertionError(f"{KILLS} kills of executor {executor.executor_id}'s Python workers, none during a task: "
                         f"{driver.executors()}")


@pytest.mark.parametrize("coordinator", ["broker", "delta"])
def test_executor_and_python_workers_killed_mid_stream(spark: SparkSession, kafka: KafkaUnderTest,
                                                       spark_cluster: SparkCluster,  # noqa: F811
                                                       cluster_driver: ClusterDriver,  # noqa: F811
                                                       tmp_path: Path, coordinator: str) -> None:
    kafka.require_apache("the cluster's run is costly: once, on the broker a behaviour counts on")
    topic = kafka.new_topic(PARTITIONS)
    setup = (DeltaSetup if coordinator == "delta" else StreamSetup)(kafka, topic, kafka.new_group(), tmp_path)
    started = time.monotonic()
    produced = kafka.produce_numbered(topic, FIRST_RECORDS, PARTITIONS)
    doomed, survivor = _executors(spark_cluster, cluster_driver.app_id)
    with cluster_driver.run(setup.options(**OPTIONS), setup.sink, setup.checkpoint) as query:
        query.wait_for_rows(1, 120, "the first batch in the sink")
        producer = SteadyProducer(kafka, topic, first=FIRST_RECORDS)
        try:
            killed, executor_kills = _kill_executor_mid_task(spark_cluster, cluster_driver, doomed)
            query.wait_for_rows(query.status()["rows"] + 1, 120, "a batch after the executor's kill")
            pythons, python_kills = _kill_python_workers_mid_task(cluster_driver, survivor)
            query.wait_for_rows(query.status()["rows"] + 1, 120, "a batch after the Python workers' kill")
        finally:
            produced |= producer.stop()
        wait_for(lambda: query.status()["rows"] >= len(produced), 180, f"{len(produced)} rows read",
                 interval_s=0.1, state=lambda: f"{_sink_against(spark, setup, produced)}\n{cluster_driver.describe()}")

        status = query.status()
        assert status["active"] and status["exception"] is None, status
        relaunched = _relaunched(spark_cluster, cluster_driver, killed)
        stopped = query.stop()
    assert stopped["exception"] is None, stopped
    rows = setup.sink_rows(spark)
    assert_exactly_once(rows, produced)
    print(f"\n{coordinator}: {len(produced)} records exactly once in {time.monotonic() - started:.0f} s, "
          f"{status['batch'] + 1} batches; executor {killed.executor_id} killed mid-task ({executor_kills} kill(s); "
          f"relaunched as {relaunched.executor_id}), {pythons} Python processes of executor {survivor.executor_id} "
          f"mid-task ({python_kills} kill(s)); delivery counts {sorted({dc for _, _, dc in rows})}; "
          f"counters {setup.progress()}")
