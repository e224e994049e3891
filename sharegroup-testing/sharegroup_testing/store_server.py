"""What the suite's object-store servers share (the S3 server, Azurite, the GCS server): a life as a context, an
outage as a block, and the command channel of a server run as a child process.

Each server keeps its data across :meth:`StoreServer.down` and :meth:`StoreServer.up` on the same port, so a
test can take the store away under a running query and give the same store back.
"""

from __future__ import annotations

import json
import select
import subprocess
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

__all__ = ["ChildChannel", "CommitCounts", "StoreServer"]

_Server = TypeVar("_Server", bound="StoreServer")


class CommitCounts(NamedTuple):
    """Delta commits the store answered: ``commits`` stored, ``conflicts`` refused (the version existed)."""

    commits: int
    conflicts: int


class StoreServer(ABC):
    """An object-store server on loopback the suite starts, takes down and brings back."""

    @abstractmethod
    def start(self: _Server) -> _Server:
        """Start the server (once; again is a no-op) and return it."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the server for good and drop its data."""

    @abstractmethod
    def down(self) -> None:
        """An outage: clients meet a refused connection; the data stays."""

    @abstractmethod
    def up(self) -> None:
        """The end of an outage: the same port, the same data."""

    @abstractmethod
    def counts(self, bucket: str | None = None) -> CommitCounts:
        """Delta commits stored and refused, in one bucket (container) or in all."""

    @contextmanager
    def outage(self) -> Iterator[None]:
        """``with store.outage():`` the store is down inside the block and up again after it."""
        self.down()
        try:
            yield
        finally:
            self.up()

    def __enter__(self: _Server) -> _Server:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ChildChannel:
    """Commands to a server run as a child process, which answers each with one JSON line on its stdout:
    ``{"ok": value}`` or ``{"error": text}``. ``what`` names the server in errors ("the S3 server")."""

    def __init__(self, what: str, error: type[Exception], log_path: Path):
        self.what, self._error, self._log_path = what, error, log_path
        self.process: subprocess.Popen[bytes] | None = None
        self._exchange = threading.Lock()  # one command and its answer at a time

    def reply(self, timeout_s: float) -> Any:
        """The child's next answer (its first one says it is ready)."""
        process = self.process
        if process is None or process.stdout is None:
            raise self._error(f"{self.what} is not running")
        ready, _, _ = select.select([process.stdout], [], [], timeout_s)
        line = process.stdout.readline() if ready else b""
        if not line:
            state = "exited" if process.poll() is not None else f"did not answer within {timeout_s:.0f}s"
            raise self._error(f"{self.what} {state}; see {self._log_path}")
        reply = json.loads(line)
        if "error" in reply:
            raise self._error(f"{self.what.removeprefix('the ')}: {reply['error']}; see {self._log_path}")
        return reply["ok"]

    def command(self, name: str, argument: Any = None, timeout_s: float = 30.0) -> Any:
        with self._exchange:
            process = self.process
            if process is None or process.stdin is None:
                raise self._error(f"{self.what} is not running")
            process.stdin.write(json.dumps([name, argument]).encode() + b"\n")
            process.stdin.flush()
            return self.reply(timeout_s)

    def close(self) -> None:
        """End the child: its stdin closing is its cue to exit; killed if it does not within 5 s."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.stdin is not None:
            with suppress(OSError):  # a child that died already
                process.stdin.close()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
