"""What the driver's JVM logs when a query stops cleanly: kept off the user's console where it says nothing.

A script runs with Spark's default log4j2 profile unless it passes the package's quiet configuration
(``sharegroup_source/conf/log4j2.properties``); that profile prints every WARN. Spark's DAGScheduler warns
``Failed to cancel job group ... Cannot find active jobs for it`` at every clean stop of a query (the stop cancels
the query's job group after its last batch ended), which reads as a fault. The driver's log4j is reachable
through the session's Py4J gateway, so the package drops that one message (a regular-expression filter on the
root logger's configuration; every other line of every logger stays) once per SparkContext, and at Ctrl-C quiets
the few loggers whose warnings are about the stop itself (:func:`quiet_stop_noise`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CANCEL_WARNING", "STOP_NOISE", "drop_cancel_warning", "quiet_stop_noise"]

#: Spark's warning at every clean stop, as a log4j2 RegexFilter matches it (the whole message)
CANCEL_WARNING = "Failed to cancel job group .*"
#: Spark's and Hadoop's warnings at a stop between two batches, each about the stop itself: the query's job group
#: has no job left to cancel; the stop's interrupt ended the chmod of a checkpoint file; the batch in progress,
#: which the stop waited for, ran past its trigger
STOP_NOISE = ("org.apache.spark.scheduler.DAGScheduler", "org.apache.hadoop.util.Shell",
              "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
              "org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor")
#: set on a SparkContext whose JVM has the filter
_FILTERED = "_sharegroup_cancel_warning_dropped"


def drop_cancel_warning(context: Any) -> None:
    """Drop :data:`CANCEL_WARNING` from the driver's log, once for ``context`` (a classic SparkContext).

    Nothing happens where the JVM's logging is not log4j 2 core (another backend): the line then stays, and the
    operating page says how to keep it out.
    """
    if getattr(context, _FILTERED, False) or getattr(context, "_jvm", None) is None:
        return
    try:
        log4j = context._jvm.org.apache.logging.log4j
        results = log4j.core.Filter.Result
        logging_context = log4j.LogManager.getContext(False)
        root = logging_context.getConfiguration().getRootLogger()
        root.addFilter(log4j.core.filter.RegexFilter.createFilter(CANCEL_WARNING, None, False, results.DENY,
                                                                  results.NEUTRAL))
        logging_context.updateLoggers()
    except Exception:  # not log4j 2 core: the warning stays
        return
    setattr(context, _FILTERED, True)


def quiet_stop_noise(context: Any) -> None:
    """The loggers of :data:`STOP_NOISE` go to ERROR where they are below it: the script is stopping, and their
    warnings say only that."""
    try:
        log4j = context._jvm.org.apache.logging.log4j
        for name in STOP_NOISE:
            if not log4j.LogManager.getLogger(name).getLevel().isMoreSpecificThan(log4j.Level.ERROR):
                log4j.core.config.Configurator.setLevel(name, log4j.Level.ERROR)
    except Exception:  # not log4j 2 core: the lines stay, as documented
        return
