"""Records the log lost before the group processed them, and what a member does about it (``failOnDataLoss``).

Retention, or DeleteRecords, moves a partition's log start; records below it that nobody in the
share group had processed are gone. Spark's own Kafka source fails the query there ("Some data may
have been lost") unless ``failOnDataLoss=false``, and so does this one: a coordinator finds such
records before its group moves past them (the Delta coordinator in the very commit that would move
its share-partition's start, which then is not committed; the broker coordinator by asking the
group's start offsets and lag before its member fetches again), and hands them to ``DataLoss``.
Under ``failOnDataLoss=true`` that raises, naming each topic, partition and range, and since the
group did not move, every restart fails the same way until the option says otherwise; under
``false`` it logs the loss once and counts it for the progress table's ``lost_unread``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from sharegroup_source.errors import DataLossError

__all__ = ["DataLoss", "LostRange"]

log = logging.getLogger(__name__)

#: How many ranges a message names before it says how many more there are.
_SHOWN = 5


@dataclass(frozen=True)
class LostRange:
    """Offsets ``first..last`` of ``topic[partition]`` that left the log unprocessed: all of them (``count`` None),
    or ``count`` records among them (a broker group tells its unprocessed records by number, not by offset)."""

    topic: str
    partition: int
    first: int
    last: int
    count: int | None = None

    @property
    def records(self) -> int:
        return self.last - self.first + 1 if self.count is None else self.count

    def __str__(self) -> str:
        span = f"offsets {self.first}-{self.last}"
        return f"{self.topic}[{self.partition}] {span}" if self.count is None else (
            f"{self.topic}[{self.partition}] {self.count} record(s) of {span}")


class DataLoss:
    """``failOnDataLoss`` for one member: ``fail`` raises DataLossError on a loss; else it is logged and counted.
    ``member`` names the member in the message ("the query", "worker w-1")."""

    def __init__(self, fail: bool, member: str = "the query"):
        self.fail = fail
        self._member = member
        self._lost = 0
        self._lock = threading.Lock()  # a Delta member finds them in its own thread

    def refuse(self, lost: Sequence[LostRange]) -> None:
        """Under ``fail``, raise DataLossError naming ``lost``: called before the group moves past them."""
        if lost and self.fail:
            raise DataLossError(f"{_said(lost)}; set failOnDataLoss=false to go on without them (the progress "
                                "table's lost_unread counts them)")

    def found(self, lost: Sequence[LostRange]) -> None:
        """Records that left the log unprocessed: raised under ``fail``, else logged (one line) and counted."""
        self.refuse(lost)
        if lost:
            log.warning("%s goes on without them: %s", self._member, _said(lost))
            with self._lock:
                self._lost += sum(r.records for r in lost)

    def drain(self) -> int:
        """Records skipped since the last call (under ``failOnDataLoss=false``)."""
        with self._lock:
            lost, self._lost = self._lost, 0
        return lost


def _said(lost: Sequence[LostRange]) -> str:
    shown = ", ".join(map(str, lost[:_SHOWN])) + (f" and {len(lost) - _SHOWN} more" if len(lost) > _SHOWN else "")
    return (f"{sum(r.records for r in lost)} record(s) left the log before the share group processed them "
            f"({shown}): retention or DeleteRecords moved the log start past them")
