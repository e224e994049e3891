"""A stop during ``foreachBatch``: what the connector's sinks raise into Spark is short, and says it was a stop.

``query.stop()`` interrupts the batch's Spark job, and the py4j call waiting for it fails with a
``Py4JJavaError`` whose text carries the JVM's whole stack trace, often several thousand lines
with its causes. py4j hands the Python traceback of the foreachBatch function to the JVM as
text, and Spark decides whether the query failed or was stopped by matching that text against
its ``PROXY_ERROR`` pattern (``StreamExecution.isInterruptionException``):
``Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)(java.lang.InterruptedException|...)``.
Java's regex engine recurses once per character of that alternation, so a long enough text
overflows the stream thread's stack, and a plain stop ends in a ``StackOverflowError``.

A stop shows in the JVM exception either as an interruption or, for a job the stop cancelled
(``toArrow`` and ``collect`` wait for their job in another thread), as a ``SparkException``
``[SPARK_JOB_CANCELLED] Job N cancelled Query [...] was stopped``, with no interruption in its
causes: Spark's pattern would not take that for a stop even where it did not overflow (seen on
Spark 4.2: a 7,066-character traceback of 82 lines overflowed the stream thread).

So the connector's foreachBatch code (``DeltaBatchWriter``, ``acknowledge``) turns a call the stop
interrupted into :class:`BatchInterruptedError`: one line that holds the two markers Spark looks
for, and no chained traceback. Anything else is raised as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from py4j.protocol import Py4JJavaError

from sharegroup_source.errors import BatchInterruptedError

__all__ = ["INTERRUPTIONS", "short_on_stop"]

#: The JVM exceptions Spark takes for a stop (``StreamExecution.isInterruptionException``).
INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                 "java.nio.channels.ClosedByInterruptException")
#: How deep a cause chain is searched for an interruption: Spark wraps a job's failure a few times.
_MAX_CAUSES = 16
#: A job a query's stop cancelled: ``[SPARK_JOB_CANCELLED] Job 3 cancelled Query [id = ..., runId = ...] was stopped``.
_JOB_CANCELLED, _BY_A_STOP = "[SPARK_JOB_CANCELLED]", "was stopped"


@contextmanager
def short_on_stop() -> Iterator[None]:
    """Raise :class:`BatchInterruptedError` instead of a ``Py4JJavaError`` that an interruption caused."""
    try:
        yield
    except Py4JJavaError as error:
        stop = _stop_in(error.java_exception)
        if stop is None:
            raise
        call = str(error.errmsg).strip().rstrip(".")
        raise BatchInterruptedError(
            f"the query was stopped while this batch ran ({stop}): py4j.protocol.Py4JJavaError: {call}: "
            f"{INTERRUPTIONS[0]}; Spark runs the batch again when the query starts again") from None


def _stop_in(java_exception: Any) -> str | None:
    """What in a JVM exception's cause chain says a stop interrupted the call, if anything; None also when the JVM
    cannot say (the gateway going away with the stop): not known to be a stop."""
    try:
        cause, seen = java_exception, 0
        while cause is not None and seen < _MAX_CAUSES:
            name, message = str(cause.getClass().getName()), str(cause.getMessage() or "")
            if name in INTERRUPTIONS:
                return name
            if _JOB_CANCELLED in message and _BY_A_STOP in message:
                return message.splitlines()[0][:200]
            cause, seen = cause.getCause(), seen + 1
    except Exception:
        return None
    return None
