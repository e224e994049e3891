"""Records one ShareFetch acquired beyond the read limit: the next epochs' records.

A share fetch may acquire far more than ``max.poll.records`` (on Apache Kafka the limit is
soft: one poll returned 1,667 records per partition with the limit at 500). Giving the
surplus back would cost each of those records a delivery attempt, every batch, until the
broker archives them at the delivery-count limit. So the surplus stays acquired here, and the
next epochs are cut from it before the consumer polls again (an explicit-mode consumer may
not poll before its last poll is fully acknowledged anyway), as many a batch as ``pacing``
says lets them all go inside their lock.
"""

from __future__ import annotations

import pyarrow as pa

from sharegroup_source.schema import NO_RECORDS, row_bytes

__all__ = ["Backlog", "epoch_size"]


def epoch_size(records: pa.Table, limit: int | None, max_bytes: int | None) -> int:
    """How many rows of ``records``, from the front, make the next epoch: at most ``limit`` records and
    ``max_bytes`` bytes (maxRecordsPerTrigger, maxBytesPerTrigger), but at least one."""
    cut = records.num_rows if limit is None else min(limit, records.num_rows)
    if max_bytes is not None:
        size = 0
        for at, weight in enumerate(row_bytes(records.slice(0, cut))):
            size += weight
            if size > max_bytes and at > 0:
                return at
    return cut


class Backlog:
    """Acquired records (an output table) not yet in an epoch, with when they were acquired."""

    def __init__(self) -> None:
        self._records = NO_RECORDS
        self.acquired_at_ms = 0

    def __len__(self) -> int:
        return self._records.num_rows

    def keep(self, records: pa.Table, acquired_at_ms: int) -> None:
        """Hold the surplus of the acquisition made at ``acquired_at_ms`` (the backlog is empty then)."""
        assert not self, "a member acquires again only once its previous acquisition is settled"
        self._records = records
        self.acquired_at_ms = acquired_at_ms

    @property
    def records(self) -> pa.Table:
        """What waits, in the order the next epochs take it."""
        return self._records

    def take(self, count: int) -> pa.Table:
        """The next epoch: the first ``count`` records."""
        taken, self._records = self._records.slice(0, count), self._records.slice(count)
        return taken

    def give_back(self) -> pa.Table:
        """Everything held, for a RELEASE: the backlog is empty afterwards."""
        records, self._records = self._records, NO_RECORDS
        return records
