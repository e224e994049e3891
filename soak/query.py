"""The Spark query under soak: started from its checkpoint again whenever it ends.

Faults that end the query (a failing batch, a killed driver-side worker) announce it first, so
that every failure the soak did not cause is reported as unexpected, with its message. Faults and
restarts all run on the soak's main thread, so the bookkeeping needs no lock.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from soak.sink import BatchSink

__all__ = ["RUNNER_MARK", "SoakQuery"]

#: How the driver-side Python worker of a Python streaming source shows up in a command line.
RUNNER_MARK = "python_streaming_source_runner"


class SoakQuery:
    def __init__(self, spark: SparkSession, options: dict[str, str], checkpoint: Path, sink: BatchSink):
        self._spark, self._options, self._checkpoint, self._sink = spark, options, checkpoint, sink
        self._query: StreamingQuery | None = None
        self._expected_failures = 0
        self.starts = 0
        self.expected_failures_seen = 0
        self.unexpected_failures: list[str] = []

    def start(self) -> None:
        frame = self._spark.readStream.format("sharegroup").options(**self._options).load()
        self._query = (frame.writeStream.foreachBatch(self._sink).option("checkpointLocation", str(self._checkpoint))
                       .trigger(processingTime="1 second").start())
        self.starts += 1

    def expect_failure(self, cancel: bool = False) -> None:
        """The next failure is one a fault causes on purpose (``cancel``: the fault did not happen after all)."""
        self._expected_failures += -1 if cancel else 1

    def ensure_running(self) -> None:
        """Start the query again from its checkpoint if it ended, noting whether its end was expected."""
        if self._query is None or self._query.isActive:
            return
        error = self._query.exception()
        if error is not None:
            if self._expected_failures:
                self._expected_failures -= 1
                self.expected_failures_seen += 1
            else:
                self.unexpected_failures.append(str(error).strip().splitlines()[0][:300])
        self.start()

    def restart(self) -> None:
        """Stop (as a user would, possibly mid-batch) and start again from the checkpoint."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self._query is not None:
            self._query.stop()

    def kill_source_worker(self) -> int:
        """SIGKILL the query's driver-side Python worker (no chance to release anything); returns how many."""
        killed = 0
        for process in psutil.Process(os.getpid()).children(recursive=True):
            try:
                if RUNNER_MARK in " ".join(process.cmdline()):
                    process.send_signal(signal.SIGKILL)
                    killed += 1
            except psutil.Error:
                continue
        return killed
