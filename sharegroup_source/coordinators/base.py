"""What the micro-batch driver needs of whoever holds the queue's acquisition locks.

The driver owns the epoch lifecycle (ledger, admission, planning, settling) and nothing
Kafka-specific: it asks a coordinator for records and tells it how each one is settled. The
``broker`` coordinator is a share-group member of the Kafka broker; a coordinator that keeps
the share group's state in a Delta table implements the same few calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from sharegroup_source.acks import AckRun
from state_store import OffsetRange

__all__ = ["Coordinator", "Failures", "Outcome", "Settled"]

#: Share-partitions whose acknowledgements did not take, with the reason: their records come back
Failures = dict[tuple[str, int], str]


class Outcome(Protocol):
    """What became of acknowledgements handed to a coordinator (a ``concurrent.futures.Future`` is one)."""

    def done(self) -> bool:
        """Whether the coordinator settled them."""
        ...

    def result(self) -> Failures:
        """The share-partitions whose acknowledgements did not take; waits for them to be settled."""
        ...


@dataclass(frozen=True)
class Settled:
    """The outcome of acknowledgements settled before ``acknowledge`` returned."""

    failures: Failures

    def done(self) -> bool:
        return True

    def result(self) -> Failures:
        return self.failures


class Coordinator(Protocol):
    """A member of the share group, acquiring and settling records for one query run."""

    @property
    def member_id(self) -> str:
        """Names the member in the ledger and the progress table."""
        ...

    @property
    def partitions(self) -> Mapping[str, int]:
        """Partition count of every subscribed topic."""
        ...

    @property
    def lock_duration_ms(self) -> int | None:
        """How long an acquired record stays locked; None when the member renews its locks while it lives."""
        ...

    @property
    def delivery_limit(self) -> int:
        """The group's ``share.delivery.count.limit``: a record acquired this many times is archived, unprocessed,
        when it is given back or its lock runs out; so the driver never gives such a record back."""
        ...

    def acquires_at_most(self, max_records: int | None) -> int:
        """The most records one ``acquire(max_records)`` may bring: what the driver must emit within the lock."""
        ...

    def starts_at(self) -> str | None:
        """Where the group starts in a share-partition it never fetched (``share.auto.offset.reset``): ``latest``
        or ``earliest``; None when it cannot tell. Asked only to explain an empty first acquisition."""
        ...

    @property
    def next_run_takes_over(self) -> bool:
        """Whether the query's next run can take over this run's locks (``take_over``): a stop then leaves the
        epochs Spark runs again locked for it, rather than giving their records to other members first."""
        ...

    def take_over(self, unsettled: Sequence[OffsetRange]) -> None:
        """The ledger fenced the query's earlier runs: where ``next_run_takes_over``, this member becomes the
        holder of what they still hold of ``unsettled`` (the records of their epochs Spark runs again), and the
        rest they hold goes back to the group at once. Called only once the checkpoint was accepted, so a run
        that is refused takes nothing from a live one."""
        ...

    def acquire(self, max_records: int | None, wait_s: float) -> pa.Table:
        """Records newly acquired for this member, waiting at most ``wait_s`` for some.

        An output table with headers (``epoch`` 0, ``deliveryCount`` as the group counted it),
        in acquisition order; or, from a coordinator whose executors read the records themselves,
        their positions only (``schema.POSITIONS``). ``max_records`` is a hint: a coordinator may
        acquire more (a broker's fetch is not bounded exactly) and the driver keeps the surplus
        acquired. Every record returned must be acknowledged before the next call.
        """
        ...

    def acquire_ahead(self, max_records: int | None) -> None:
        """Spark is about to run a batch: settle what ``acknowledge`` was given and start acquiring the next batch
        meanwhile, where the coordinator can (the next ``acquire`` with the same ``max_records`` returns what it
        got). The driver calls it once an epoch is ledgered, never under AvailableNow (records taken ahead past
        its target would spend a delivery)."""
        ...

    def archived(self) -> pa.Table:
        """Positions (``schema.POSITIONS``) the group archived at its delivery-count limit since the last call,
        where the coordinator can tell: the driver dead-letters them, since nobody will get them again."""
        ...

    def lost_unread(self) -> int:
        """Records that left the log before the group processed them, found since the last call, which the member
        went on without (``failOnDataLoss=false``; under ``true`` it raises DataLossError where it finds them)."""
        ...

    def acknowledge(self, acks: Sequence[AckRun]) -> Outcome:
        """Settle runs of records this member holds (a RELEASE gives them back); the outcome says what did not take.

        Settled in call order, at the latest with the next ``acquire`` or ``acquire_ahead``, or when the
        outcome is waited for: a coordinator may let them ride on its next acquisition (the delta
        coordinator does, so the settle's commit leaves the batch's path and costs no commit of its own).
        """
        ...

    def close(self, keep: Sequence[OffsetRange] = ()) -> None:
        """Leave the group, giving back what is held but ``keep`` (only where ``next_run_takes_over``): the records
        of the epochs Spark runs again, locked for the query's next run until their locks run out."""
        ...
