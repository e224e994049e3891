"""Helpers to run ``format("sharegroup")`` queries in tests and read what they produced."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from sharegroup_source.options import SourceOptions
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from state_store import UNSETTLED, StateStore


def worker_holding_an_epoch(options: dict[str, str]) -> subprocess.Popen:
    """A driver-side worker as Spark runs it (tests/sigterm_child.py), once it ledgered and returned epoch 1."""
    tests = Path(__file__).parent
    worker = subprocess.Popen([sys.executable, str(tests / "sigterm_child.py"), json.dumps(options)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tests.parent)
    line = worker.stdout.readline().strip()
    if line != "holding an epoch":
        worker.kill()
        raise AssertionError(f"the worker did not get to hold an epoch; it said {line!r}")
    return worker


@dataclass
class StreamSetup:
    """One query's names and folders: its topic, share group, state, checkpoint and sink.

    ``storage`` holds the delta-rs storage options of a state location on an object store.
    """

    kafka: KafkaUnderTest
    topic: str
    group: str
    root: Path
    storage: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def sink(self) -> Path:
        return self.root / "sink"

    def options(self, **extra: Any) -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": self.kafka.bootstrap_servers,
            "kafka.group.id": self.group,
            "subscribe": self.topic,
            "stateLocation": str(self.state),
            "pollTimeoutMs": "500",
            **{f"stateStorage.{k}": v for k, v in self.storage.items()},
            **{k: str(v) for k, v in extra.items()},
        }

    def source_options(self, **extra: Any) -> SourceOptions:
        """The parsed options, for tests that call the driver in Spark's order without Spark."""
        return SourceOptions.parse(self.options(**extra))

    def read_stream(self, spark: SparkSession, **extra: Any) -> DataFrame:
        return spark.readStream.format("sharegroup").options(**self.options(**extra)).load()

    def file_sink(self, spark: SparkSession, available_now: bool = True, **extra: Any) -> StreamingQuery:
        writer = (self.read_stream(spark, **extra).writeStream.format("parquet")
                  .option("path", str(self.sink)).option("checkpointLocation", str(self.checkpoint)))
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")
        return writer.start()

    def batch_sink(self, spark: SparkSession, handler: Callable[[DataFrame, int], DataFrame | None] | None = None,
                   available_now: bool = True, processing_time: str = "0 seconds", **extra: Any) -> StreamingQuery:
        """foreachBatch writing one parquet folder per batch id: rewriting a batch replaces it.

        ``handler`` runs first; the DataFrame it returns is written instead of the whole batch.
        Without ``available_now`` the trigger is ``processing_time``.
        """

        def write(frame: DataFrame, batch_id: int) -> None:
            chosen = handler(frame, batch_id) if handler is not None else None
            (frame if chosen is None else chosen).write.mode("overwrite").parquet(
                str(self.sink / f"batch={batch_id}"))

        writer = (self.read_stream(spark, **extra).writeStream.foreachBatch(write)
                  .option("checkpointLocation", str(self.checkpoint)))
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=processing_time)
        return writer.start()

    def sink_rows(self, spark: SparkSession) -> list[tuple[int, bytes, int]]:
        """(partition, value, deliveryCount) of every row in the sink, duplicates kept."""
        if (self.sink / "_spark_metadata").is_dir():  # a file sink: Spark reads what its metadata log committed
            try:
                frame = spark.read.parquet(str(self.sink))
            except AnalysisException as error:
                if error.getCondition() == "UNABLE_TO_INFER_SCHEMA":
                    return []  # the log has no file yet
                raise
        else:
            # foreachBatch folders: one is complete once it has _SUCCESS, one being written is skipped. The
            # sink folder exists a moment before its first batch folder (Hadoop makes one level at a time).
            batches = sorted(str(d) for d in self.sink.glob("batch=*") if (d / "_SUCCESS").exists())
            if not batches:
                return []
            frame = spark.read.option("basePath", str(self.sink)).parquet(*batches)
        rows = frame.select("partition", "value", "deliveryCount").collect()
        return [(r.partition, bytes(r.value), r.deliveryCount) for r in rows]

    def state_store(self) -> StateStore:
        return StateStore(str(self.state), storage_options=self.storage)

    def progress(self) -> dict[str, int]:
        """The source's counters summed over its runs, from the ``progress`` state table."""
        return self.state_store().progress.totals(self.group)

    def wait_until_member_left(self, timeout_s: float = 60.0) -> None:
        """Wait for the query's member to leave the group (Spark stops its worker asynchronously).

        A member joining before that would share the partitions with it, and on one partition
        get nothing at all, so what it reads would say nothing about the group. A stop may take the
        share consumer's close, which waits up to 30 s for the broker (``CLOSE_TIMEOUT_S`` in
        share_client.py), and its settle and progress row on top: a wait of just 30 s failed once
        beside the compatibility lane on the 2 cores (2026-11-29).
        """
        progress = self.state_store().progress

        def member() -> str:  # a member whose process is gone died without leaving: the stop never finished
            run = progress.member_in_group(self.group)
            return "none" if run is None else (f"run {run.run_id} (pid {run.pid}, process "
                                               f"{'gone' if run.process_is_gone() else 'alive'})")

        wait_for(lambda: progress.member_in_group(self.group) is None, timeout_s, "the query's member to leave",
                 state=member)

    def leftovers_for_a_fresh_member(self, timeout_s: float = 60.0) -> list[tuple[int, bytes, int]]:
        """What a new member of the group still gets, as (partition, value, delivery count).

        Once the query's member left, a marker record is produced to every partition; the new
        member polls (accepting everything) until it has every marker. A share-partition hands
        out records from its lowest available offset, so by then it has also had every earlier
        record still waiting in the group: what it got besides the markers is what was left.
        """
        from sharegroup_source.acks import Ack
        from sharegroup_source.coordinators.broker.share_client import ShareClient

        self.wait_until_member_left()
        marker = f"marker-{uuid.uuid4().hex}".encode()
        got: list[tuple[int, bytes, int]] = []
        with ShareClient(self.kafka.config(**{"group.id": self.group}), [self.topic]) as client:
            partitions = client.partitions[self.topic]
            self.kafka.produce(self.topic, [(p, None, marker) for p in range(partitions)])

            def every_marker_arrived() -> bool:
                records = client.poll(0.5)
                got.extend((r.partition(), r.value(), r.delivery_count()) for r in records)
                client.acknowledge(Ack(r.topic(), r.partition(), r.offset()) for r in records)
                if records:
                    client.commit()
                return sum(value == marker for _, value, _ in got) == partitions

            wait_for(every_marker_arrived, timeout_s, f"a marker on each of {partitions} partitions", interval_s=0,
                     state=lambda: f"{len(got)} records got: {got[:5]}")
        return [record for record in got if record[1] != marker]

    def every_epoch_acked(self) -> bool:
        """Every epoch ACKED: also one whose acknowledgement failed, once all its records came back
        from the broker and were acknowledged. Nothing of the query's is left in the group then."""
        return {entry.status for entry in self.ledger_entries()} == {"ACKED"}

    def every_epoch_settled(self) -> bool:
        """No epoch is held: a stop now releases nothing back to the group.

        A batch reaches the sink before its epoch is acknowledged (at the next trigger), so a
        test that stops the query once its sink is complete must also wait for this.
        """
        return all(entry.status not in UNSETTLED for entry in self.ledger_entries())

    def describe(self, spark: SparkSession) -> str:
        """What a failing wait reports: rows in the sink, the counters, each epoch's status."""
        epochs = [(e.epoch, e.status, e.record_count) for e in self.ledger_entries()]
        return f"{len(self.sink_rows(spark))} rows in the sink, counters {self.progress()}, epochs {epochs}"

    def ledger_entries(self) -> list:
        return self.state_store().ledger.entries(self.group)


@contextmanager
def burning_cpu() -> Iterator[None]:
    """A process burning one core meanwhile: the machine as loaded as a busy cluster node's."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        burner.kill()
        burner.wait()


@contextmanager
def spark_connect_port() -> Iterator[None]:
    """Holds the machine's Spark Connect port while a child's local server runs.

    ``remote("local[2]")`` binds Spark Connect's fixed port 15002 and its client connects there
    (pyspark takes a free port only under ``SPARK_TESTING``, which also turns on Spark's test-only
    checks): two suites on one machine take turns instead of one failing with a BindException.
    """
    with open(Path(tempfile.gettempdir()) / "sharegroup-spark-connect-15002.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
