"""One member of a Delta-coordinated share group: a query run's driver, or a plain Python worker.

The group's ``share_state`` table is the share-partition leader. Every transition a member
makes (acquire, settle, renew, release) is ONE compare-and-swap commit covering every
subscribed partition: read version v, run KIP-932's state machine, commit onto v, or re-read
and retry. So any number of members, in any number of processes and hosts, never hold one
record at the same time, and a batch costs one commit however many partitions it spans (its
acquisition carries the settle of the batch before).

While a member lives, a renewer thread extends the locks it knows it holds (KIP-1222's RENEW,
``holdings.py``), so a batch slower than the lock duration keeps its records; a member that dies
stops renewing, and its locks expire after the lock duration, as on a broker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sharegroup_source.coordinators.base import Failures
from sharegroup_source.coordinators.delta.holdings import Holdings
from sharegroup_source.kafka.metadata import LogBounds, partition_counts
from state_store import AckType, AcquiredRecords, InvalidRecordStateError, RecordState, SharePartition
from state_store.group import GroupStore
from state_store.maintenance import BackgroundMaintenance

__all__ = ["Acks", "GroupMember", "Held"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Key = tuple[str, int]
#: What a member of a Delta-coordinated group needs of Kafka, said with any authorization error.
NEEDS = "coordinator=delta needs READ on each subscribed TOPIC and no GROUP ACL"
#: Ranges to settle per share-partition: (first, last, how).
Acks = Mapping[Key, Sequence[tuple[int, int, AckType]]]
#: Maintenance (compaction, vacuum, the checkpoint and log cleanup) of the group's tables, in the background, by
#: the member whose commit lands a ``share_state`` version that is a multiple of this: counted on the table, not
#: per member, so a group whose members all live shorter than this many commits is kept small too (its commits
#: make no checkpoint of their own, see state_store/delta_table.py).
MAINTAIN_EVERY_COMMITS = 200


@dataclass(frozen=True)
class Held:
    """Records of one share-partition a member acquired, or the group archived, as one run."""

    topic: str
    partition: int
    records: AcquiredRecords


class GroupMember:
    """Acquires and settles for ``member_id``; ``kind`` is ``query`` or ``worker`` in the members table."""

    def __init__(self, group: GroupStore, member_id: str, kind: str, kafka_config: Mapping[str, str],
                 topics: Sequence[str]):
        self.group = group
        self.member_id = member_id
        self._kind = kind
        self.partitions = partition_counts(kafka_config, topics, needs=NEEDS)
        self._bounds = LogBounds(kafka_config, needs=NEEDS)
        self._keys = [(t, p) for t, n in sorted(self.partitions.items()) for p in range(n)]
        self._turn = 0  # which partition an acquisition serves first: each in turn
        self._archived: list[Held] = []
        self._holdings = Holdings()
        self._maintenance = BackgroundMaintenance(
            lambda: group.for_another_thread().maintain(),
            f"group {group.group_id}")
        self._lock = threading.Lock()  # the caller's calls and the renewer take turns
        self._archived_lock = threading.Lock()  # draining them never waits for a commit under way
        self._closed = threading.Event()
        group.join(member_id, kind)
        self._renewer = threading.Thread(target=self._renew_while_alive, name=f"renew-{member_id}", daemon=True)
        self._renewer.start()

    # -- transitions, one commit each ---------------------------------------------------------
    def acquire(self, max_records: int, settling: Sequence[Acks] = ()) -> tuple[list[Failures], list[Held]]:
        """Settle each of ``settling``, then lock up to ``max_records`` records (none at 0) across the subscribed
        partitions for this member, in ONE commit: acknowledgements ride on the next acquisition, as a
        ShareFetch request carries them on a broker. Returns each settle's failures, and what was locked.

        A share-partition where any range of a settle is not held (its lock expired and another member
        took it) fails whole for that settle, as KIP-932's acknowledgement does. Each partition gets a
        fair share of the acquisition first and the rest goes to whoever has more, starting with a
        different partition each time, so one busy partition cannot starve the others. The same commit
        renews what the member already holds.
        """
        settles = [_settlement(self.member_id, acks) for acks in settling]
        acquisition, initial = self._acquisition(max_records) if max_records > 0 else (None, {})

        def change(sps: dict[Key, SharePartition], now_ms: int) -> tuple[list[Failures], list[Held]]:
            return ([settle(sps, now_ms) for settle in settles],
                    acquisition(sps, now_ms) if acquisition is not None else [])

        failures, held = self._commit(change, initial)
        for acks in settling:  # first: this commit may have acquired again what its settles released
            self._holdings.remove(acks)
        for h in held:
            self._holdings.add((h.topic, h.partition), h.records.first, h.records.last)
        return failures, held

    def _acquisition(self, max_records: int) -> tuple[Callable[[dict[Key, SharePartition], int], list[Held]],
                                                      dict[Key, int]]:
        """``acquire``'s change, on the log bounds read now, and where a share-partition new to the group starts."""
        bounds = self._bounds.of(self.partitions)
        order = self._keys[self._turn:] + self._keys[:self._turn]
        self._turn = (self._turn + 1) % len(self._keys)
        reset_to_earliest = self.group.settings.auto_offset_reset == "earliest"
        initial = {key: bounds[key][0] if reset_to_earliest else bounds[key][1] for key in self._keys}

        def change(sps: dict[Key, SharePartition], now_ms: int) -> list[Held]:
            taken: list[Held] = []
            budget = max_records
            fair = max(1, max_records // len(order))
            for share in (fair, max_records):
                for key in order:
                    if budget <= 0:
                        break
                    low, high = bounds[key]
                    for run in sps[key].acquire(self.member_id, min(share, budget), now_ms, high,
                                                log_start_offset=low):
                        taken.append(Held(*key, run))
                        budget -= run.last - run.first + 1
            return taken

        return change, initial

    def take_over(self, prefix: str) -> int:
        """Give back what earlier members whose ids start with ``prefix`` hold (a restarted query's
        earlier runs, fenced by the ledger): their records return at once, not on lock expiry."""
        def change(sps: dict[Key, SharePartition], now_ms: int) -> int:
            earlier = {b.member_id for sp in sps.values() for b in sp.batches
                       if b.state is RecordState.ACQUIRED and b.member_id and b.member_id.startswith(prefix)
                       and b.member_id != self.member_id}
            return sum(sp.release_member(member, now_ms) for sp in sps.values() for member in earlier)

        released = self._commit(change)
        if released:
            log.info("member %s took back %d record(s) its query's earlier run held", self.member_id, released)
        return released

    def release_all(self) -> int:
        """Give back everything this member holds, what it was never told of included."""
        released = self._commit(lambda sps, now_ms: sum(sp.release_member(self.member_id, now_ms)
                                                        for sp in sps.values()))
        self._holdings.clear()
        return released

    def archived(self) -> list[Held]:
        """Records the group archived at its delivery-count limit in this member's commits, since the last call:
        nobody will be given them again, so the member that saw it dead-letters them."""
        with self._archived_lock:
            drained, self._archived = self._archived, []
        return drained

    def close(self) -> None:
        """Stop renewing, give back what is held, and leave the members table; once."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._renewer.join(timeout=30)
        try:
            self.release_all()
        finally:
            self.group.leave(self.member_id)
            self._maintenance.join(timeout_s=30)

    # -- internals ------------------------------------------------------------------------------
    def _commit(self, change: Callable[[dict[Key, SharePartition], int], T],
                initial: Mapping[Key, int] | None = None) -> T:
        """Run ``change`` on every share-partition in one compare-and-swap commit (retried from a fresh read
        when another member won), renewing the locks this member knows it holds and noting what the limit archived.
        ``initial``: where a share-partition that has no state yet starts (only an acquisition creates one)."""
        def planned(sps: dict[Key, SharePartition]) -> tuple[T, list[Held]]:
            now_ms = int(time.time() * 1000)
            result = change(sps, now_ms)
            for key, sp in sps.items():
                sp.renew_member(self.member_id, self._holdings.of(key), now_ms)
            archived = [Held(t, p, run) for (t, p), sp in sps.items() for run in sp.archived_at_limit()]
            return result, archived

        with self._lock:
            (result, archived), version = self.group.share_state.update_all(planned, initial or {})
            with self._archived_lock:
                self._archived += archived
            if version is not None and version % MAINTAIN_EVERY_COMMITS == 0:
                self._maintenance.request()
        return result

    def _renew_while_alive(self) -> None:
        """Renew three times per lock duration, and say the member is alive."""
        interval_s = self.group.settings.lock_duration_ms / 3000
        while not self._closed.wait(interval_s):
            try:
                self._commit(lambda sps, now_ms: None)
                with self._lock:  # the group's tables are one thread's at a time
                    self.group.heartbeat(self.member_id)
                    adopted = self.group.refresh_settings()
                if adopted is not None:
                    log.info("member %s adopted the group's altered settings: %s", self.member_id, adopted)
            except Exception as error:  # the next round tries again; locks last a whole duration
                log.warning("member %s could not renew its locks: %s", self.member_id, error)


def _settlement(member_id: str, acks: Acks) -> Callable[[dict[Key, SharePartition], int], Failures]:
    """A settle's change: each share-partition's ranges all or nothing."""
    def change(sps: dict[Key, SharePartition], now_ms: int) -> Failures:
        failures: Failures = {}
        for key, ranges in acks.items():
            try:
                sps[key].acknowledge(member_id, ranges, now_ms)
            except InvalidRecordStateError as error:
                failures[key] = str(error)
        return failures

    return change
