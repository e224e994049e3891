"""Records one ShareFetch acquired beyond the read limit: the next epochs' records.

A share fetch may acquire far more than ``max.poll.records`` (on Apache Kafka the limit is
soft: one poll returned 1,667 records per partition with the limit at 500). Giving the
surplus back would cost each of those records a delivery attempt, every batch, until the
broker archives them at the delivery-count limit. So the surplus stays acquired here, and the
next epochs are cut from it before the consumer polls again (an explicit-mode consumer may
not poll before its last poll is fully acknowledged anyway). Records that sat here past half
their lock would risk expiring inside a batch: those are given back instead, once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from confluent_kafka import Message

from sharegroup_source.schema import record_bytes

__all__ = ["Backlog", "epoch_size"]


def epoch_size(records: Sequence[Message], limit: int | None, max_bytes: int | None) -> int:
    """How many of ``records``, from the front, make the next epoch: at most ``limit`` records and
    ``max_bytes`` bytes (maxRecordsPerTrigger, maxBytesPerTrigger), but at least one."""
    cut = len(records) if limit is None else min(limit, len(records))
    if max_bytes is not None:
        size = 0
        for at, record in enumerate(records[:cut]):
            size += record_bytes(record)
            if size > max_bytes and at > 0:
                return at
    return cut


class Backlog:
    def __init__(self, lock_duration_ms: int):
        self._records: list[Message] = []
        self._lock_duration_ms = lock_duration_ms
        self.acquired_at_ms = 0

    def __len__(self) -> int:
        return len(self._records)

    def keep(self, records: Sequence[Message], acquired_at_ms: int) -> None:
        """Hold the surplus of the poll made at ``acquired_at_ms`` (the backlog is empty then)."""
        assert not self._records, "a consumer polls only once its previous poll is settled"
        self._records = list(records)
        self.acquired_at_ms = acquired_at_ms

    def fresh(self, now_ms: int | None = None) -> bool:
        """Still well inside the lock: safe to emit in a batch."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return now_ms - self.acquired_at_ms < self._lock_duration_ms / 2

    def take(self, limit: int | None, max_bytes: int | None = None) -> list[Message]:
        """The next epoch (see :func:`epoch_size`)."""
        cut = epoch_size(self._records, limit, max_bytes)
        taken, self._records = self._records[:cut], self._records[cut:]
        return taken

    def give_back(self) -> list[Message]:
        """Everything held, for a RELEASE: the backlog is empty afterwards."""
        records, self._records = self._records, []
        return records
