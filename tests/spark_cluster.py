"""A Spark standalone cluster on loopback, for the tests that kill executors under a running query.

``local[N]`` runs the tasks in the driver's JVM: there is no executor to lose. Here a master and two
workers run as the operator's ``sbin`` scripts would start them, each its own JVM
(``bin/spark-class org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker`` from pyspark's own
SPARK_HOME), on 127.0.0.1 and free ports, 1 core and 1 GiB a worker, their work folders under the test's
temporary folder. A worker runs each of its executors as a child JVM (``CoarseGrainedExecutorBackend``), which
runs its Python workers (``pyspark.daemon`` and the workers it forks); a worker relaunches an executor that died.

The queries' driver cannot share the test session's JVM (one SparkContext a JVM, and that one is ``local[2]``), so
it runs in a child process, tests/spark_cluster_query.py, through :class:`ClusterDriver`.

Every process started here carries :data:`MARK_ENV` in its environment, which executors and Python workers
inherit: whatever outlived the processes that started it (a Python daemon whose executor was SIGKILLed is no
one's child any more) is found by it and killed when the cluster or the driver stops.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil
import pyspark
import pytest

from sharegroup_testing.apache_kafka import free_port, orphan_guard
from sharegroup_testing.kafka_peers import wait_for
from tests.spark_cluster_query import MARK

__all__ = ["ClusterDriver", "DriverQuery", "Executor", "ExecutorTasks", "SparkCluster", "cluster_driver",
           "spark_cluster"]

#: Set to a folder of this run in every process the cluster or a query starts, and inherited by their children.
MARK_ENV = "SHAREGROUP_TEST_SPARK_CLUSTER"
SPARK_HOME = Path(pyspark.__file__).parent
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
#: Starting a JVM on the 2 cores beside the suite's others takes seconds: waits are generous, never a fixed sleep.
START_TIMEOUT_S = 90.0


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"({path}: {error})"


def _get_json(url: str) -> Any:
    """A Spark UI's JSON answer; None while the UI does not answer it whole (starting, or busy on loaded cores)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)
    except (OSError, ValueError, http.client.HTTPException):
        return None


def kill_marked(value: str) -> None:
    """SIGKILL every process whose :data:`MARK_ENV` is ``value``: this run's, no one else's."""
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and process.environ().get(MARK_ENV) == value:
                process.kill()
        except psutil.Error:  # gone meanwhile, or another user's
            continue


@dataclass(frozen=True)
class Executor:
    """One executor JVM: its worker (by index), process id, and the executor id the driver knows it by."""

    worker: int
    pid: int
    executor_id: str
    app_id: str

    def python_workers(self) -> list[psutil.Process]:
        """The Python processes under this executor: the ``pyspark.daemon`` and the workers it forked."""
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []
        found = []
        for child in children:
            try:
                if "python" in Path(child.exe()).name:
                    found.append(child)
            except psutil.Error:
                continue
        return found


@dataclass(frozen=True)
class ExecutorTasks:
    """What the driver says of one executor: whether it has it still, and its tasks running, done and lost."""

    active: bool
    running: int
    completed: int
    failed: int


class SparkCluster:
    """A standalone master and ``workers`` workers; ``with SparkCluster(folder) as cluster: cluster.master_url``."""

    def __init__(self, directory: Path, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.directory = directory
        self.worker_count = workers
        self.cores = cores
        self.memory = memory
        self.port, self.ui_port = free_port(), free_port()
        self._processes: list[subprocess.Popen] = []
        self._logs: list[IO[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def _environment(self, name: str) -> dict[str, str]:
        """The daemons' environment: pyspark's SPARK_HOME, an empty conf folder (no spark-env.sh or defaults of the
        machine), scratch space under the cluster's folder, and the JVM options the suite gives its own JVMs."""
        conf = self.directory / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        local = self.directory / name / "local"
        local.mkdir(parents=True, exist_ok=True)
        environment = {key: value for key, value in os.environ.items() if not key.startswith(("SPARK_", "PYSPARK_"))}
        return {**environment, "SPARK_HOME": str(SPARK_HOME), "SPARK_CONF_DIR": str(conf),
                "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_DIRS": str(local), "SPARK_DAEMON_MEMORY": "512m",
                # C1 and the serial collector, as tests/conftest.py gives Spark's JVMs through SPARK_SUBMIT_OPTS
                "SPARK_DAEMON_JAVA_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", ""),
                MARK_ENV: str(self.directory)}

    def _daemon(self, name: str, main_class: str, *args: str) -> subprocess.Popen:
        """A daemon's JVM in a process group of its own, its output in ``<name>.log``; it dies with this thread."""
        log = (self.directory / f"{name}.log").open("ab")
        self._logs.append(log)
        process = subprocess.Popen(
            [*orphan_guard(), str(SPARK_HOME / "bin" / "spark-class"), main_class, *args],
            env=self._environment(name), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self._processes.append(process)
        return process

    def start(self) -> SparkCluster:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.ui_port))
        for index in range(self.worker_count):
            work = self.directory / f"worker-{index}" / "work"
            work.mkdir(parents=True, exist_ok=True)
            self._daemon(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                         "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", str(self.cores),
                         "--memory", self.memory, "--work-dir", str(work), self.master_url)
        wait_for(self._workers_registered, START_TIMEOUT_S, f"{self.worker_count} workers registered with the master",
                 interval_s=0.2, state=self.describe)
        return self

    def _workers_registered(self) -> bool:
        for process in self._processes:
            if process.poll() is not None:
                raise AssertionError(f"a Spark daemon exited with {process.returncode} while starting: "
                                     f"{self.describe()}")
        return self.alive_workers() == self.worker_count

    def alive_workers(self) -> int:
        """How many workers the master's JSON page lists as ALIVE (0 while the master is not answering yet)."""
        page = _get_json(f"{self.ui_url}/json/")
        return sum(worker.get("state") == "ALIVE" for worker in page.get("workers", ())) if page else 0

    def executors(self) -> list[Executor]:
        """The executor JVMs running now, from each worker's child processes."""
        found = []
        for index, worker in enumerate(self._processes[1:]):
            try:
                children = psutil.Process(worker.pid).children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                try:
                    command = child.cmdline()
                except psutil.Error:
                    continue
                if EXECUTOR_CLASS in command:
                    found.append(Executor(index, child.pid, command[command.index("--executor-id") + 1],
                                          command[command.index("--app-id") + 1]))
        return found

    def describe(self) -> str:
        """The master's and the workers' log tails, and each executor's stderr: what a failing test prints."""
        logs = sorted(self.directory.glob("*.log"))
        executor_logs = sorted(self.directory.glob("worker-*/work/app-*/*/stderr"))
        return "\n".join(f"--- {path}:\n{_tail(path)}" for path in [*logs, *executor_logs[-4:]])

    def stop(self) -> None:
        """SIGTERM to each daemon's process group (a worker's executors are in its group; a worker ends its
        executors first), then SIGKILL whatever this cluster started and is still there."""
        for process in reversed(self._processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self._processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        kill_marked(str(self.directory))
        for log in self._logs:
            log.close()

    def __enter__(self) -> SparkCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ClusterDriver:
    """tests/spark_cluster_query.py as a child process: a driver in client mode on ``cluster``, running one query
    at a time (:meth:`run`).

    Its events are read on a thread. Its stderr (Spark's and the connector's log) goes to ``driver.log`` in
    ``directory``. :meth:`close` ends it and kills whatever is left of it (its JVM, that JVM's Python workers).
    """

    def __init__(self, cluster: SparkCluster, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.log_path = directory / "driver.log"
        self.events: list[dict[str, Any]] = []
        self.other_output: list[str] = []
        self._queries = 0
        self._marker = str(directory)
        environment = {key: value for key, value in os.environ.items() if key != "SPARK_HOME"}
        # executors start their Python workers with it: the venv's, which has the package
        environment.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                           **{MARK_ENV: self._marker})
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [*orphan_guard(), sys.executable, "-m", "tests.spark_cluster_query", cluster.master_url, str(free_port())],
            cwd=Path(__file__).parent.parent, env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            started = wait_for(lambda: self.event("started"), START_TIMEOUT_S, "the driver's session",
                               state=self.describe)
        except BaseException:
            self.close()
            raise
        self.app_id: str = started["app"]
        self._api = f"{started['ui']}/api/v1/applications/{self.app_id}"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(MARK):
                self.events.append(json.loads(line[len(MARK):]))
            else:
                self.other_output.append(line.rstrip())

    def event(self, name: str, query: int | None = None) -> dict[str, Any] | None:
        """The latest event called ``name`` (of query number ``query``), or None."""
        return next((event for event in reversed(self.events)
                     if event["event"] == name and event.get("query") == query), None)

    def _send(self, command: dict[str, Any]) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"the driver's process exited with {self.process.returncode}\n{self.describe()}")
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def run(self, options: dict[str, str], sink: Path, checkpoint: Path) -> DriverQuery:
        """Start a query reading the source with ``options`` into a parquet file sink."""
        self._queries += 1
        self._send({"start": {"options": options, "sink": str(sink), "checkpoint": str(checkpoint)}})
        return DriverQuery(self, self._queries)

    def stop_query(self) -> None:
        self._send({"stop": True})

    def executors(self) -> dict[str, ExecutorTasks]:
        """Each executor the driver had (the dead ones too) by id, with its tasks, from the driver's REST API (its
        UI); empty while the UI does not answer."""
        found = _get_json(f"{self._api}/allexecutors") or []
        return {e["id"]: ExecutorTasks(e["isActive"], e["activeTasks"], e["completedTasks"], e["failedTasks"])
                for e in found if e["id"] != "driver"}

    def describe(self) -> str:
        """The last events, anything else the child printed, and its log's tail."""
        return (f"events: {self.events[-3:]}; other output: {self.other_output[-5:]}\n"
                f"--- {self.log_path}:\n{_tail(self.log_path, 40)}")

    def close(self) -> None:
        """The end of stdin stops the session; what is left after 60 s is killed."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.close()
                self.process.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(10)
        kill_marked(self._marker)
        self._log.close()


class DriverQuery:
    """One query of a :class:`ClusterDriver`; ``with`` stops it however the test ended."""

    def __init__(self, driver: ClusterDriver, number: int):
        self.driver = driver
        self.number = number
        self._stopped: dict[str, Any] | None = None

    def status(self) -> dict[str, Any]:
        """The latest ``status``; a query that ended by itself, or a driver that exited, fails the test here."""
        ended = self.driver.event("ended", self.number)
        if ended is not None:
            raise AssertionError(f"the query died: {ended}\n{self.driver.describe()}")
        if self.driver.process.poll() is not None:
            raise AssertionError(f"the driver's process exited with {self.driver.process.returncode}\n"
                                 f"{self.driver.describe()}")
        return self.driver.event("status", self.number) or {"active": False, "batch": None, "rows": 0}

    def wait_for_rows(self, count: int, timeout_s: float, what: str) -> None:
        """Wait until the query's committed batches read ``count`` rows (a batch's progress follows its sink
        commit), failing at once when the query ended."""
        wait_for(lambda: self.status()["rows"] >= count, timeout_s, what, interval_s=0.1,
                 state=self.driver.describe)

    def stop(self, timeout_s: float = 90.0) -> dict[str, Any]:
        """Stop the query; its ``stopped`` event."""
        if self._stopped is None:
            self.driver.stop_query()
            self._stopped = wait_for(lambda: self.driver.event("stopped", self.number), timeout_s,
                                     f"query {self.number} to stop", interval_s=0.1, state=self.driver.describe)
        return self._stopped

    def __enter__(self) -> DriverQuery:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._stopped is None and self.driver.process.poll() is None:
            self.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """One standalone cluster for the session (6-10 s to start): its tests take turns on it (an xdist group)."""
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def cluster_driver(spark_cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDriver]:
    """One driver on the cluster for a module's tests, each running its query in turn."""
    driver = ClusterDriver(spark_cluster, tmp_path_factory.mktemp("cluster-driver"))
    try:
        yield driver
    finally:
        driver.close()
