"""The Spark query under soak: started from its checkpoint again whenever it ends.

A failing batch says in its message that it was injected, and a killed driver-side worker is
announced before Spark can notice it, so every failure the soak did not cause is reported as
unexpected, with its message (tests/test_soak.py fails on any). One thread at a time keeps a query
running (the soak's main thread; the long soak's delta lane takes turns with its own thread under a
lock), so the bookkeeping needs no lock of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from soak.sink import INJECTED_MARK, BatchSink

__all__ = ["PYTHON_ERROR", "SoakQuery"]

#: A Python exception's line inside a failure's message (``state_store.errors.StateStoreError: ...``): what went
#: wrong, where Spark's plan, printed after it, says nothing of it.
PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failure)\b")

class SoakQuery:
    def __init__(self, spark: SparkSession, options: dict[str, str], checkpoint: Path, sink: BatchSink):
        self._spark, self._options, self._checkpoint, self._sink = spark, options, checkpoint, sink
        self._query: StreamingQuery | None = None
        self._noted: StreamingQuery | None = None  # the last query whose end was accounted for
        self._expected_failures = 0
        self.starts = 0
        self.expected_failures_seen = 0
        self.unexpected_failures: list[str] = []
        #: the whole message of each unexpected failure (the Python traceback is in its middle)
        self.unexpected_details: list[str] = []

    def start(self) -> None:
        frame = self._spark.readStream.format("sharegroup").options(**self._options).load()
        self._query = (frame.writeStream.foreachBatch(self._sink).option("checkpointLocation", str(self._checkpoint))
                       .trigger(processingTime="1 second").start())
        self.starts += 1

    def expect_failure(self, cancel: bool = False) -> None:
        """The query's next failure is one a fault causes on purpose (``cancel``: the fault did not happen
        after all). A failing batch needs no announcement: its message says it was injected."""
        self._expected_failures += -1 if cancel else 1

    def ensure_running(self) -> None:
        """Start the query again from its checkpoint if it ended, noting whether its end was expected."""
        if self._query is None or self._query.isActive:
            return
        self._note_end()
        self.start()

    def status(self) -> str:
        """Spark's word on the running query (what its trigger is doing) and its last batch, for a stall's report."""
        if self._query is None:
            return "not started"
        progress = self._query.lastProgress
        last = f", last batch {progress['batchId']} ({progress['numInputRows']} rows)" if progress else ""
        return f"{'active' if self._query.isActive else 'ended'}: {self._query.status['message']}{last}"

    def restart(self) -> None:
        """Stop (as a user would, possibly mid-batch) and start again from the checkpoint."""
        self.stop()
        self.start()

    def stop(self) -> None:
        """Stop the query; a failure it met first (a stop does not clear it) is noted like any other."""
        if self._query is not None:
            self._query.stop()
            self._note_end()

    def _note_end(self) -> None:
        """Count the ended query's failure, once, as caused by a fault or not.

        A query that ended without failing can no longer fail from a fault announced for it (a
        killed worker that Spark had not called yet): that announcement is dropped, so it cannot
        pass a later, real failure off as expected.
        """
        if self._query is None or self._query is self._noted:
            return
        self._noted = self._query
        error = self._query.exception()
        if error is None:
            self._expected_failures = 0
            return
        message = str(error).strip()
        if INJECTED_MARK in message:
            self.expected_failures_seen += 1
        elif self._expected_failures > 0:
            self._expected_failures -= 1
            self.expected_failures_seen += 1
        else:
            lines = [line.strip() for line in message.splitlines() if line.strip()] or [repr(error)]
            # the first line names Spark's error class, the Python exception's line (else the last) what caused it
            cause = next((line for line in reversed(lines[1:]) if PYTHON_ERROR.match(line)), lines[-1])
            shown = lines[0][:200] + (f" ... {cause[:200]}" if len(lines) > 1 else "")
            self.unexpected_failures.append(shown)
            self.unexpected_details.append(message)
