"""The driver-side Python workers Spark runs for a Python streaming source, found among this
process's children: the soak and the crash tests kill them, the bench samples their memory."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import psutil

__all__ = ["kill_source_workers", "source_workers"]

#: What a streaming source's driver-side Python worker has in its command line.
RUNNER_MARK = "python_streaming_source_runner"


def source_workers() -> Iterator[psutil.Process]:
    """This process's driver-side workers of Python streaming sources (one that ended is passed over)."""
    for process in psutil.Process().children(recursive=True):
        try:
            if RUNNER_MARK in " ".join(process.cmdline()):
                yield process
        except psutil.Error:
            continue


def kill_source_workers() -> int:
    """SIGKILL this process's driver-side workers of Python streaming sources (a crash: nothing is
    released, no member leaves); returns how many."""
    killed = 0
    for process in source_workers():
        try:
            process.send_signal(signal.SIGKILL)
            killed += 1
        except psutil.Error:
            continue
    return killed
