"""The connector's one-line errors as a user meets them: logged at ERROR first, raised with a short traceback.

Spark wraps what a Python source raises into its own error (``PYTHON_DATA_SOURCE_ERROR``,
``STREAM_FAILED``): 15 to 25 lines of Spark's frames with the connector's line last. Every Spark
entry point of the source (the data source's construction at ``load()``, the stream reader's calls
on the driver) goes through :func:`reported`, so a connector error also reaches the driver's log as
one ``sharegroup: <Type>: <message>`` line, printed before Spark's report. The exception itself
goes on without its Python frames and the chain of what caused it, which its message already
says: the Python traceback inside Spark's report is then a few lines, not one per frame of the
planner, the coordinator and the store. The whole story stays in the log at DEBUG.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from sharegroup_source.errors import CONNECTOR_ERRORS

__all__ = ["reported"]

log = logging.getLogger("sharegroup_source")

P = ParamSpec("P")
R = TypeVar("R")


def reported(call: Callable[P, R]) -> Callable[P, R]:
    """``call``, a Spark entry point, with its connector errors logged at ERROR and raised without their frames.

    Other exceptions (a bug, Spark's own) pass untouched: their frames are what explains them.
    """

    @functools.wraps(call)
    def entry_point(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return call(*args, **kwargs)
        except CONNECTOR_ERRORS as error:
            log.debug("%s failed", call.__qualname__, exc_info=True)
            log.error("sharegroup: %s: %s", type(error).__name__, error)
            raise error.with_traceback(None) from None

    return entry_point
