"""What the suite's object-store servers share (the S3 server, Azurite): a life as a context, an outage as a block.

Each server keeps its data across :meth:`StoreServer.down` and :meth:`StoreServer.up` on the same port, so a
test can take the store away under a running query and give the same store back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple, TypeVar

__all__ = ["CommitCounts", "StoreServer"]

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
