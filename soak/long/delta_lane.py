"""The long soak's delta lane: a ``coordinator=delta`` query and a DeltaShareConsumer worker sharing one Delta group.

Its own topic, group and ``groupLocation``, its own producer, and the soak's pieces for the rest:
the query is a SoakQuery into a BatchSink with query_options' delta variant, the group's settings
are delta_group_settings' (the worker asks for the same ones, so whichever joins first creates the
group as the other expects it), and the end is soak.run.account's, the worker's records counting
as another member's (those of a commit that raised as its unanswered ACCEPTs). The worker runs in
a process of its own (soak/long/worker.py) and is started again whenever it ends; each end is
kept, with the last line its stderr had, for the verdict. A thread of the lane's own starts the
query and the worker again within a second of their end, whatever the broker lane is doing (its
loop stands still while a broker restarts): a failed query's next run takes over the epochs Spark
runs again only while their locks last, so the lane's group has Kafka's default lock duration
(30 s), not the broker lane's short one. The cluster's faults reach the lane through the cluster,
not through a fault of its own.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import IO

from pyspark.sql import SparkSession

from sharegroup_testing.kafka_peers import KafkaUnderTest
from soak.long.tally import SinkTally, WorkerTally
from soak.producer import NumberedProducer
from soak.query import PYTHON_ERROR, SoakQuery
from soak.report import SoakReport
from soak.run import SoakSettings, account, delta_group_settings, query_options
from soak.sink import BatchSink
from state_store import StateStore

__all__ = ["DeltaLane", "WorkerProcess"]

#: Records a worker's poll takes at most: a few of the query's tasks' worth, so both share the queue.
WORKER_MAX_POLL_RECORDS = 100
#: How long a worker may take to leave the group on SIGTERM before it is killed.
WORKER_STOP_S = 60.0
#: The lane's group's lock duration: Kafka's default, within which a failed query's next run takes over its epochs.
DELTA_LOCK_MS = 30_000
#: How often the lane's thread looks whether the query or the worker ended.
KEEP_RUNNING_EVERY_S = 0.5


class WorkerProcess:
    """The worker's process (``python -m soak.long.worker``), started again whenever it ended."""

    def __init__(self, config: dict[str, str], topic: str, out: Path, log: Path):
        self._command = [sys.executable, "-m", "soak.long.worker", json.dumps(config), topic, str(out)]
        self._log_path = log
        self._log: IO[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        #: each end the soak did not ask for: exit code and the last line of stderr
        self.exits: list[str] = []

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        if self._log is None:
            self._log = self._log_path.open("a", encoding="utf-8")
        self._process = subprocess.Popen(self._command, stdout=self._log, stderr=self._log,
                                         cwd=Path(__file__).parents[2])
        self.starts += 1

    def ensure_running(self) -> None:
        """Start the worker again if it ended, noting how it ended."""
        if self._process is None or self._process.poll() is None:
            return
        self.exits.append(f"exit {self._process.returncode}: {self._last_log_line()}")
        self.start()

    def _last_log_line(self) -> str:
        """The exception that ended the worker: the last Python exception's line in its log (librdkafka's complaints
        about a killed broker may follow it), else the last line."""
        lines = [line.strip() for line in self._log_path.read_text(errors="replace").splitlines() if line.strip()]
        cause = next((line for line in reversed(lines) if PYTHON_ERROR.match(line)), lines[-1] if lines else None)
        return "(no output)" if cause is None else cause[:300]

    def stop(self) -> None:
        """SIGTERM: the worker finishes its poll, commits and leaves the group."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(WORKER_STOP_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
                self.exits.append(f"did not stop within {WORKER_STOP_S:.0f} s of SIGTERM: killed")
        if self._log is not None:
            self._log.close()
            self._log = None


class DeltaLane:
    """The lane's query, worker and producer under ``work``; built, started, kept running and accounted for."""

    def __init__(self, spark: SparkSession, kafka: KafkaUnderTest, work: Path, settings: SoakSettings):
        settings = dataclasses.replace(settings, lock_ms=DELTA_LOCK_MS)
        self.settings = settings
        self.topic = kafka.new_topic(settings.partitions, prefix="soak-delta")
        self.group = f"g-delta-{uuid.uuid4().hex[:8]}"
        self.state = work / "state"
        self.group_location = work / "group"
        self.checkpoint = work / "checkpoint"
        self.sink = BatchSink(work / "sink")
        self.query = SoakQuery(spark, query_options(kafka, self.topic, self.group, self.state, settings,
                                                    group_location=self.group_location), self.checkpoint, self.sink)
        self.producer = NumberedProducer(kafka.config(), self.topic, settings.partitions, settings.records_per_s)
        config = {"bootstrap.servers": kafka.bootstrap_servers, "group.id": self.group,
                  "group.location": str(self.group_location), "max.poll.records": str(WORKER_MAX_POLL_RECORDS),
                  **delta_group_settings(settings)}
        worker_out = work / "worker.txt"
        self.worker = WorkerProcess(config, self.topic, worker_out, work / "worker.log")
        self.sink_tally = SinkTally(self.sink, self.checkpoint)
        self.worker_tally = WorkerTally(worker_out)
        self._started = time.monotonic()
        self._turn = threading.Lock()  # the lane's thread and the drain take turns
        self._stopping = threading.Event()
        self._keeper = threading.Thread(target=self._keep_running_until_stopped, name="delta-lane", daemon=True)

    def start(self) -> None:
        self._started = time.monotonic()
        self.query.start()
        self.worker.start()
        self.producer.start()
        self._keeper.start()

    def keep_running(self) -> None:
        """One turn: the query and the worker started again if either ended."""
        with self._turn:
            if not self._stopping.is_set():
                self.query.ensure_running()
                self.worker.ensure_running()

    def _keep_running_until_stopped(self) -> None:
        while not self._stopping.wait(KEEP_RUNNING_EVERY_S):
            self.keep_running()

    def stop_producing(self) -> None:
        if self.producer.is_alive():
            self.producer.finish()

    def update(self) -> None:
        """Read what the sink committed and the worker wrote since the last update."""
        self.sink_tally.update()
        self.worker_tally.update()

    def drain(self, timeout_s: float) -> None:
        """Keep the lane running until every delivered record is in the sink or with the worker, or time is up."""
        self.stop_producing()
        delivered = self.producer.delivered_numbers()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.keep_running()
            self.update()
            if not delivered.count_missing(self.sink_tally.numbers, self.worker_tally.numbers,
                                           self.worker_tally.unknown):
                return
            time.sleep(1.0)

    def stop(self) -> None:
        """Stop everything of the lane, whatever state it is in."""
        with self._turn:
            self._stopping.set()
        self.query.stop()
        self.worker.stop()
        self.stop_producing()

    def report(self) -> SoakReport:
        """soak.run.account's end of the lane, the worker's records counting as another member's."""
        self.worker_tally.update()
        return account(self.settings, Counter(), self.producer, self.sink, self.worker_tally.numbers.to_set(),
                       self.worker_tally.unknown.to_set(), self.query, StateStore(str(self.state)), self.group,
                       time.monotonic() - self._started)
