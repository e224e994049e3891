"""The micro-batch driver's parts for unit tests, without Spark or Kafka: a real state store, and a share-group
member in memory.

``FakeCoordinator`` answers as ``coordinators.base.Coordinator`` does: each ``acquire`` hands out the next
table a test queued, and each ``acknowledge`` is recorded with an outcome the test shapes (share-partitions
that fail; settled at once, or only once the outcome is waited for).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from sharegroup_source.acks import AckRun
from sharegroup_source.coordinators.base import Failures, Settled
from sharegroup_source.driver.acknowledger import Acknowledger
from sharegroup_source.driver.epoch_book import EpochBook
from sharegroup_source.driver.run_context import RunContext
from sharegroup_source.schema import NO_RECORDS, POSITIONS, arrow_schema
from state_store import OffsetRange, SourceCounters, StateStore
from state_store.maintenance import BackgroundMaintenance


class Deferred:
    """An outcome the coordinator settles only when it is waited for (as the delta coordinator's may be)."""

    def __init__(self, failures: Failures):
        self.failures = failures
        self.settled = False

    def done(self) -> bool:
        return self.settled

    def result(self) -> Failures:
        self.settled = True
        return self.failures


class FakeCoordinator:
    member_id = "fake-member"
    next_run_takes_over = False  # the book is told apart (driver_parts' hand_over)

    def __init__(self, partitions: Mapping[str, int] | None = None, lock_duration_ms: int | None = 30_000,
                 delivery_limit: int = 5):
        self.partitions = dict(partitions or {"t": 2})
        self.lock_duration_ms = lock_duration_ms
        self.delivery_limit = delivery_limit
        self.acquisitions: deque[pa.Table] = deque()  # what the next acquire calls return, in order
        self.acquire_calls = 0
        self.acknowledged: list[list[AckRun]] = []  # each acknowledge call's runs
        self.failing: dict[tuple[str, int], str] = {}  # share-partitions whose acknowledgements fail
        self.deferred = False  # outcomes settle only when waited for
        self.archived_positions = POSITIONS.empty_table()  # what the next archived call returns
        self.taken_over: list[OffsetRange] = []  # what take_over was given
        self.kept: list[OffsetRange] = []  # what close was told to keep locked

    def starts_at(self) -> str | None:
        return None

    def acquires_at_most(self, max_records: int | None) -> int:
        return 2_000 * sum(self.partitions.values())

    def take_over(self, unsettled: Sequence[OffsetRange]) -> None:
        self.taken_over = list(unsettled)

    def acquire(self, max_records: int | None, wait_s: float) -> pa.Table:
        self.acquire_calls += 1
        return self.acquisitions.popleft() if self.acquisitions else NO_RECORDS

    def acquire_ahead(self, max_records: int | None) -> None:
        pass

    def archived(self) -> pa.Table:
        archived, self.archived_positions = self.archived_positions, POSITIONS.empty_table()
        return archived

    def lost_unread(self) -> int:
        return 0

    def acknowledge(self, acks: Sequence[AckRun]) -> Settled | Deferred:
        self.acknowledged.append(list(acks))
        failures = {key: reason for key, reason in self.failing.items()
                    if any((a.topic, a.partition) == key for a in acks)}
        return Deferred(failures) if self.deferred else Settled(failures)

    def close(self, keep: Sequence[OffsetRange] = ()) -> None:
        self.kept = list(keep)

    def runs(self) -> list[tuple[str, int, int, int, str]]:
        """Every run acknowledged so far, as (topic, partition, first, last, type)."""
        return [(a.topic, a.partition, a.first, a.last, str(a.type)) for call in self.acknowledged for a in call]


def records(topic: str, partition: int, offsets: Iterable[int], delivery_count: int = 1) -> pa.Table:
    """Acquired records as a coordinator returns them: the output schema with headers, epoch 0, value ``v<offset>``."""
    offsets = list(offsets)
    n = len(offsets)
    schema = arrow_schema(include_headers=True)
    return pa.table({
        "key": pa.array([None] * n, pa.binary()), "value": [b"v%d" % o for o in offsets], "topic": [topic] * n,
        "partition": pa.array([partition] * n, pa.int32()), "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")), "timestampType": pa.array([0] * n, pa.int32()),
        "headers": pa.array([[]] * n, schema.field("headers").type),
        "deliveryCount": pa.array([delivery_count] * n, pa.int32()), "epoch": pa.array([0] * n, pa.int64()),
    }, schema=schema)


@dataclass
class Parts:
    """One run's epoch book and acknowledger over a fake member, on a real state store (query ``q``)."""

    store: StateStore
    coordinator: FakeCoordinator
    counters: SourceCounters
    run: RunContext
    acks: Acknowledger
    book: EpochBook
    maintenance: BackgroundMaintenance[None]

    def status(self, epoch: int) -> str | None:
        """The epoch's status in the ledger, as another reader sees it."""
        entry = StateStore(self.store.location).ledger.get("q", epoch)
        return None if entry is None else str(entry.status)


def driver_parts(root: Path, run_id: str = "run-1", lock_duration_ms: int | None = 30_000,
                 maintain_every: int = 1000, maintain: Callable[[], object] = lambda: None,
                 hand_over: bool = False) -> Parts:
    """A started run at ``root / "state"``: its fence is in the ledger and its book read what earlier runs left
    (and, with ``hand_over``, took their unsettled epochs over, as the delta coordinator's runs do)."""
    store = StateStore(str(root / "state"))
    coordinator, counters = FakeCoordinator(lock_duration_ms=lock_duration_ms), SourceCounters()
    run = run_context(store, counters, run_id=run_id, lock_duration_ms=lock_duration_ms)
    acks = Acknowledger(coordinator, run, _never_read)  # type: ignore[arg-type]
    maintenance = BackgroundMaintenance(lambda: None, lambda _: maintain(), "test state")
    book = EpochBook(run, acks, hand_over=hand_over, maintenance=maintenance, maintain_every=maintain_every)
    store.ledger.fence("q", run_id)
    book.read_ledger()
    coordinator.take_over(book.take_over_unsettled())
    return Parts(store, coordinator, counters, run, acks, book, maintenance)


def run_context(store: StateStore, counters: SourceCounters | None = None, *, group_id: str = "q",
                run_id: str = "run-1", lock_duration_ms: int | None = 30_000) -> RunContext:
    """Run ``run_id`` of query ``group_id`` (a cluster at 127.0.0.1:9092, its state shown as /the/state)."""
    return RunContext(group_id, run_id, store, counters or SourceCounters(), lock_duration_ms, "127.0.0.1:9092",
                      "/the/state")


def _never_read(positions: pa.Table) -> pa.Table:
    raise AssertionError(f"the driver holds every payload here: nothing is read back ({positions})")
