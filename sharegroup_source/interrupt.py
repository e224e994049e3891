"""Ctrl-C on the user's driver script: a stop that reads as a stop, not forty lines of Py4J traceback.

pyspark's SparkContext puts a SIGINT handler on the driver's main thread that cancels every job and raises
KeyboardInterrupt. Run while the main thread waits in a Py4J call (``query.awaitTermination()``, the last line of
most streaming scripts), its cancel re-enters that call's socket (``RuntimeError: reentrant call inside
<_io.BufferedReader name=3>``) and the script ends in a chained traceback; where the cancel does get through, it
cuts the batch in progress, and Spark prints what that broke.

Importing ``sharegroup_source`` on the main thread (and ``register(spark)``) puts :func:`on_sigint` in place
of both Python's default handler and pyspark's, also of the one a SparkContext started later installs. The
handler has a thread let each active query finish its batch in progress, stop it and print in one line what it
committed, while the main thread waits in the handler: ``awaitTermination()`` then returns as after
``query.stop()``, and the script goes on to its end with a sane Py4J connection (an exception raised in the
call would leave its answer unread, for the script's next call to take as its own). A second Ctrl-C exits at
once, with 130. A handler the script installs itself after that (as ``examples/demo.py`` does) is left alone.
Each SparkContext followed so also has Spark's warning at every clean stop dropped (``spark_logging``).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from sharegroup_source.spark_logging import drop_cancel_warning, quiet_stop_noise

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["on_sigint", "take_ctrl_c"]

#: how long a stop waits for the batch in progress to end before it stops the query anyway
BATCH_PATIENCE_S = 120.0
EXIT_STATUS = 128 + signal.SIGINT
#: Spark's status message while a micro-batch's jobs run (MicroBatchExecution)
RUNNING_A_BATCH = "Processing new data"
_SPARK_CONTEXT_MODULE = "pyspark.core.context"
#: Jupyter's Python kernel, whose interrupt button sends SIGINT
_NOTEBOOK_KERNEL = "ipykernel"
#: pyspark's handler, by name: ``SparkContext._do_init`` defines it as a local function
_SPARKS_HANDLER = "SparkContext._do_init.<locals>.signal_handler"


class _Interrupt:
    """What Ctrl-C is doing, in plain attributes: the handler runs between two bytecodes of the main thread,
    which may hold any lock (stdout's, the logging module's), so it takes none and writes with ``os.write``."""

    #: the first Ctrl-C's stop is under way: the next one exits at once
    stopping = False
    #: the stop found queries and stopped them (else Ctrl-C is pyspark's: jobs cancelled, KeyboardInterrupt)
    stopped_queries = False


_STATE = _Interrupt()


def take_ctrl_c() -> None:
    """Make Ctrl-C on this process's main thread stop its streaming queries cleanly (:func:`on_sigint`), and
    every SparkContext's clean stops quiet (``spark_logging.drop_cancel_warning``).

    Only on the main thread of a process where Ctrl-C still means Python's KeyboardInterrupt or pyspark's
    cancel: Spark's Python workers ignore SIGINT, and a script's own handler stays. Not in a notebook's kernel
    (Jupyter's): its interrupt is a SIGINT meant for the cell that runs, which may have nothing to do with the
    queries running beside it.
    """
    if threading.current_thread() is not threading.main_thread() or _NOTEBOOK_KERNEL in sys.modules:
        return
    _replace_default_handler()
    context = sys.modules.get(_SPARK_CONTEXT_MODULE)
    if context is not None:
        _follow_spark_contexts(context)
        if _active_context() is not None:
            drop_cancel_warning(_active_context())
    elif not any(isinstance(finder, _WhenSparkLoads) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WhenSparkLoads())


def _replace_default_handler() -> None:
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.default_int_handler or getattr(handler, "__qualname__", "") == _SPARKS_HANDLER:
        signal.signal(signal.SIGINT, on_sigint)


def _follow_spark_contexts(context: ModuleType) -> None:
    """Take Ctrl-C back after every SparkContext's start, which installs pyspark's handler; drop the context's
    warning at every clean stop."""
    spark_context: Any = context.SparkContext
    start = spark_context.__init__
    if getattr(start, "_takes_ctrl_c", False):
        return

    @functools.wraps(start)
    def started(self: Any, *args: Any, **kwargs: Any) -> None:
        start(self, *args, **kwargs)
        drop_cancel_warning(self)
        if threading.current_thread() is threading.main_thread():
            _replace_default_handler()

    started._takes_ctrl_c = True  # type: ignore[attr-defined]
    spark_context.__init__ = started


class _WhenSparkLoads(importlib.abc.MetaPathFinder):
    """Imported before pyspark, the package follows SparkContexts once pyspark's context module has loaded."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _SPARK_CONTEXT_MODULE:
            return None
        sys.meta_path.remove(self)  # found by the finders that would have found it
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Following(spec.loader)
        return spec


class _Following(importlib.abc.Loader):
    """pyspark's loader of its context module (a file, or pyspark.zip's importer under spark-submit, which loads
    every other module of the zip too: it is wrapped here, not changed), then :func:`_follow_spark_contexts`."""

    def __init__(self, loader: importlib.abc.Loader):
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _follow_spark_contexts(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_code, resource readers: the loader's own
        return getattr(self._loader, name)


def on_sigint(_signum: int, frame: FrameType | None) -> None:
    """Ctrl-C: stop the active queries between two batches (:func:`_stop_queries`, on a thread) and return.

    The main thread waits in here while the thread stops them, so the script's ``awaitTermination()`` returns
    only once its query stopped, as after ``query.stop()``, and the script goes on to its end; the wait is
    Python's, so a second Ctrl-C gets through and ends the process at once. Without a SparkContext, or with no
    query active, Ctrl-C is what it was: pyspark's cancel of every job, and KeyboardInterrupt unless the main
    thread waits in a Spark call (which the cancel ends with Spark's error).
    """
    if _STATE.stopping:
        _say("sharegroup: Ctrl-C again: exiting now; what no batch committed goes back to the share group")
        os._exit(EXIT_STATUS)
    if _active_context() is None:
        raise KeyboardInterrupt
    _STATE.stopping, _STATE.stopped_queries = True, False
    try:
        stopper = threading.Thread(target=_stop_queries, name="sharegroup-ctrl-c", daemon=True)
        stopper.start()
        while stopper.is_alive():
            stopper.join(0.2)
    finally:
        _STATE.stopping = False
    if not _STATE.stopped_queries and not _in_py4j(frame):
        raise KeyboardInterrupt


def _say(line: str) -> None:
    """One line on stderr, past Python's buffered streams: the main thread, stopped in the handler, may hold
    their lock."""
    os.write(2, f"{line}\n".encode())


def _stop_queries() -> None:
    """Stop every active query of the session after its batch in progress, and say what each committed.

    A query stopped inside a batch has its Spark jobs cancelled, and Spark prints what the cancel broke (a
    killed Python task's BrokenPipeError; under ``foreachBatch`` a StackOverflowError from its own check of the
    cancelled job's message): between two batches, the stop only ends a wait. With no query active, every job
    is cancelled, as pyspark's own handler does.
    """
    try:
        from pyspark.sql import SparkSession

        spark = SparkSession.active()
        queries = list(spark.streams.active)
        if not queries:
            spark.sparkContext.cancelAllJobs()
            return
        _say(f"sharegroup: Ctrl-C: stopping {_named(queries)} after the batch in progress (Ctrl-C again: exit now)")
        quiet_stop_noise(spark.sparkContext)
        for query in queries:
            _stop_between_batches(query)
            _say(f"sharegroup: stopped {_named([query])}: {_committed(query)}")
        _STATE.stopped_queries = True
    except Exception as error:  # the session went away meanwhile
        _say(f"sharegroup: Ctrl-C: the stop did not finish ({type(error).__name__}: {str(error).splitlines()[0]})")


def _active_context() -> object | None:
    context = sys.modules.get(_SPARK_CONTEXT_MODULE)
    return None if context is None else getattr(context.SparkContext, "_active_spark_context", None)


def _named(queries: list[StreamingQuery]) -> str:
    names = [f"query '{query.name}'" if query.name else f"query {query.id}" for query in queries]
    return ", ".join(names) if len(names) < 2 else f"{len(names)} queries ({', '.join(names)})"


def _stop_between_batches(query: StreamingQuery, patience_s: float = BATCH_PATIENCE_S) -> None:
    """Stop ``query`` once it runs no batch's Spark jobs: its trigger idle, or the stream thread planning.

    Back-to-back batches (``availableNow``, a trigger that fell behind) leave the trigger idle for too short a time
    to see, but a stop while the stream thread plans the next batch only ends it: the source's call in progress
    returns, and the interrupt ends the write of the offset log (``spark_logging.STOP_NOISE`` quiets Hadoop's
    warning).
    """
    deadline = time.monotonic() + patience_s
    while query.isActive and time.monotonic() < deadline:
        status = query.status
        if not status["isTriggerActive"] or status["message"] != RUNNING_A_BATCH:
            break
        time.sleep(0.02)
    query.stop()


def _last_committed(query: StreamingQuery) -> int | None:
    """The id of the last batch the query ran to its commit, from its recent progress.

    A trigger that found no data reports progress too, under the id of the batch still to come: a batch that ran
    is told by its ``addBatch`` duration.
    """
    for progress in reversed(query.recentProgress):
        if "addBatch" in progress.get("durationMs", {}):
            return int(progress["batchId"])
    return None


def _committed(query: StreamingQuery) -> str:
    """What a restart goes on from, in words: the last batch the query committed, if its progress names one."""
    exception = query.exception()
    if exception is not None:
        return f"it had failed: {str(exception).splitlines()[0]}"
    last = _last_committed(query)
    if last is None:
        return "its recent progress names no committed batch; the next start goes on from its checkpoint"
    return (f"batch {last} was the last committed; what later batches held goes back to the share group, and the "
            f"next start goes on from there")


def _in_py4j(frame: FrameType | None) -> bool:
    """Whether the main thread, interrupted at ``frame``, waits in a Py4J call (a call into Spark's JVM)."""
    while frame is not None:
        if "py4j" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False
