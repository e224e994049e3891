"""A driver in client mode on a standalone Spark cluster, running the ``format("sharegroup")`` queries it is told to.

tests/spark_cluster.py runs it as a child process (:class:`tests.spark_cluster.ClusterDriver`): a JVM has one
SparkContext, and the test session's own is ``local[2]``. One driver serves the module's tests one after another,
so only the first pays for the session, the executors' start and their Python workers' (15-20 s on 2 cores).
Arguments: the ``spark://`` URL of the master, and the port of the driver's UI, whose REST API tells the test which
executor runs a task.

It reads one JSON command a line on stdin: ``{"start": {"options": ..., "sink": ..., "checkpoint": ...}}`` starts
a query reading the source into a parquet file sink (Spark's exactly-once sink), ``{"stop": true}`` stops it; the
end of stdin stops the session. It prints one line per event on stdout, :data:`MARK` then JSON: ``started`` (the
application's id and UI address), then for each query, numbered from 1 in ``query``: ``status`` every half
second (whether it is active, its last batch, rows so far, its exception), ``ended`` if it ended by itself (the
test fails on it) and ``stopped`` once told to stop. Spark's own logging goes to stderr.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from sharegroup_testing.spark import QUIET_LOG4J2

#: What starts each of this script's lines on stdout, so the test tells them from anything else printed there.
MARK = "spark-cluster-query "
STATUS_INTERVAL_S = 0.5


def say(event: str, **fields: Any) -> None:
    print(MARK + json.dumps({"event": event, **fields}), flush=True)


def session(master: str, ui_port: int) -> SparkSession:
    """Client mode on ``master``: one 1-core executor on each worker, relaunched by its worker when it dies.

    No ``spark.jars``: the parquet sink needs neither Delta nor Spark's Kafka source, and executors fetching
    them from the driver would cost each relaunch seconds. The executors' JVMs take the driver's options
    (``SPARK_SUBMIT_OPTS``: tests/conftest.py sets C1 and the serial collector); their Python is the driver's
    ``PYSPARK_PYTHON``, set by the test.
    """
    jvm_options = f"-Dlog4j2.configurationFile={QUIET_LOG4J2} {os.environ.get('SPARK_SUBMIT_OPTS', '')}".strip()
    return (SparkSession.builder.master(master).appName("sharegroup-cluster-test")
            .config("spark.executor.cores", "1")
            .config("spark.executor.memory", "768m")
            .config("spark.executor.extraJavaOptions", jvm_options)
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={QUIET_LOG4J2}")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.port", str(ui_port))
            .config("spark.ui.showConsoleProgress", "false")
            # the UI's REST API shows a task's start at once, not up to 100 ms later: the test kills on it
            .config("spark.ui.liveUpdate.period", "0")
            .config("spark.sql.streaming.stopTimeout", "60s")
            # as the suite's local session and conf/spark-defaults.conf: no .crc file beside each checkpoint file
            .config("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
            .getOrCreate())


class Query:
    """One query of the driver, and the rows of each of its batches.

    The rows are gathered from the query's recent progress, which holds the last 100 batches only and is read
    every half second, so no batch is missed.
    """

    def __init__(self, spark: SparkSession, number: int, options: dict[str, str], sink: str, checkpoint: str):
        self.number = number
        self.rows: dict[int, int] = {}
        self.query: StreamingQuery = (
            spark.readStream.format("sharegroup").options(**options).load()
            .writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
            .trigger(processingTime="0 seconds").start())

    def report(self) -> bool:
        """Say ``status``, or ``ended`` when the query ended by itself; whether it still runs."""
        self.rows.update((p["batchId"], p["numInputRows"]) for p in self.query.recentProgress)
        active = self.query.isActive
        say("status" if active else "ended", query=self.number, active=active, batch=max(self.rows, default=None),
            rows=sum(self.rows.values()), exception=self.exception())
        return active

    def stop(self) -> None:
        self.query.stop()
        say("stopped", query=self.number, exception=self.exception())

    def exception(self) -> str | None:
        error = self.query.exception()
        return None if error is None else str(error)[:2000]


def _read_commands(commands: queue.Queue[dict[str, Any] | None]) -> None:
    """stdin's lines as commands; its end as None (the test is done, or gone)."""
    for line in sys.stdin:
        commands.put(json.loads(line))
    commands.put(None)


def main(master: str, ui_port: int) -> None:
    spark = session(master, ui_port)
    commands: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=_read_commands, args=(commands,), daemon=True).start()
    running: Query | None = None
    started = 0
    try:
        say("started", app=spark.sparkContext.applicationId, ui=spark.sparkContext.uiWebUrl)
        while True:
            try:
                command = commands.get(timeout=STATUS_INTERVAL_S)
            except queue.Empty:
                if running is not None and not running.report():
                    running = None
                continue
            if command is None:
                break
            if running is not None:  # a new query, or the word to stop: either way this one stops
                running.stop()
                running = None
            if "start" in command:
                started += 1
                running = Query(spark, started, **command["start"])
    finally:
        if running is not None:
            running.stop()
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
