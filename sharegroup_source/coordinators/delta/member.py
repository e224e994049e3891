"""One member of a Delta-coordinated share group: a query run's driver, or a plain Python worker.

The group's ``share_state`` table is the share-partition leader. Every transition a member
makes (acquire, settle, renew, release) is ONE compare-and-swap commit covering every
subscribed partition: read version v, run KIP-932's state machine, commit onto v, or re-read
and retry. So any number of members, in any number of processes and hosts, never hold one
record at the same time, and a batch costs one commit however many partitions it spans (its
acquisition carries the settle of the batch before).

While a member lives, a renewer thread extends the locks it knows it holds (KIP-1222's RENEW,
``holdings.py``), so a batch slower than the lock duration keeps its records; a member that dies
stops renewing, and its locks expire after the lock duration, as on a broker. A renewal races the
other members' commits like any commit, so a member whose locks are in their last third gets the
table: the others give way until its renewal lands or the lock ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sharegroup_source.coordinators.base import Failures
from sharegroup_source.coordinators.data_loss import DataLoss, LostRange
from sharegroup_source.coordinators.delta.holdings import Holdings
from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.metadata import LogBounds, partition_counts
from sharegroup_source.kafka.topic_watch import TopicWatch
from state_store import AckType, AcquiredRecords, InvalidRecordStateError, RecordState, SharePartition
from state_store.group import GroupStore
from state_store.maintenance import BackgroundMaintenance

__all__ = ["Acks", "GiveWay", "GroupMember", "Held", "Spans", "give_way"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Key = tuple[str, int]
#: What a member of a Delta-coordinated group needs of Kafka, said with any authorization error.
NEEDS = "coordinator=delta needs READ on each subscribed TOPIC and no GROUP ACL"
#: Ranges to settle per share-partition: (first, last, how).
Acks = Mapping[Key, Sequence[tuple[int, int, AckType]]]
#: Where share-partitions without state start, given those that have some (``ShareStateTable.update_all``).
Initial = Callable[[Collection[Key]], Mapping[Key, int]]
#: Offset spans per share-partition: (first, last).
Spans = Mapping[Key, Sequence[tuple[int, int]]]
#: Maintenance (compaction, vacuum, the checkpoint and log cleanup) of the group's tables, in the background, by
#: the member whose commit lands a ``share_state`` version that is a multiple of this: counted on the table, not
#: per member, so a group whose members all live shorter than this many commits is kept small too (its commits
#: make no checkpoint of their own, see state_store/delta_table.py).
MAINTAIN_EVERY_COMMITS = 200
#: How a member reads a partition its topic gained, said in the growth's log line.
READS_NEW = "the member reads the new ones from their earliest offset"
#: How long a commit that gives way to another member's renewal waits before it reads the table again.
GIVE_WAY_PAUSE_S = 0.05
#: How long a log must keep ending below the group's start in it before the member takes the topic for one created
#: again. A leader just elected (a broker killed, or back and made preferred leader again) answers its own high
#: watermark, behind its predecessor's, until its followers fetch from it once: with every replica in sync, for a
#: fetch round, seconds on a busy machine. Below the first acquisition's wait, so an AvailableNow run that starts on
#: a topic created again fails rather than ends idle.
SHORT_LOG_CONFIRM_S = 8.0


@dataclass(frozen=True)
class Held:
    """Records of one share-partition a member acquired, or the group archived, as one run."""

    topic: str
    partition: int
    records: AcquiredRecords


class GroupMember:
    """Acquires and settles for ``member_id``; ``kind`` is ``query`` or ``worker`` in the members table."""

    def __init__(self, group: GroupStore, member_id: str, kind: str, kafka_config: Mapping[str, str],
                 topics: Sequence[str], data_loss: DataLoss | None = None):
        """``data_loss``: what the member does where the log start passed records nobody processed (a worker, by
        default: logs and counts them; a query: as its ``failOnDataLoss`` says)."""
        self.group = group
        self.member_id = member_id
        self._kind = kind
        self.data_loss = data_loss or DataLoss(fail=False, member=f"{kind} {member_id}")
        self.partitions = partition_counts(kafka_config, topics, needs=NEEDS)
        self._watch = TopicWatch(kafka_config, topics, self.partitions, READS_NEW, needs=NEEDS)
        self._bounds = LogBounds(kafka_config, needs=NEEDS)
        self._keys = _keys(self.partitions)
        self._turn = 0  # which partition an acquisition serves first: each in turn
        self._short_since: dict[Key, float] = {}  # a log ending below the group's start: since when, unbroken
        self._archived: list[Held] = []
        self._holdings = Holdings()
        self._maintenance: BackgroundMaintenance[GroupStore] = BackgroundMaintenance(
            group.for_another_thread, GroupStore.maintain, f"group {group.group_id}")
        self._lock = threading.Lock()  # the caller's calls and the renewer take turns
        self._renewed_at_ms = int(time.time() * 1000)  # when the last commit renewed what the member holds
        #: landed commits that found the member's locks unrenewed for two thirds of their duration (they lapse at one)
        self.late_renewals = 0
        #: commits that gave way to another member whose locks were about to lapse
        self.gave_way = 0
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
        acquisition, initial = self._acquisition(max_records) if max_records > 0 else (None, None)

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
                                                      Initial]:
        """``acquire``'s change, on the log bounds read now, and where a share-partition new to the group starts:
        as ``share.auto.offset.reset`` says in a topic new to the group, at the log start in a partition a topic the
        group reads gained (Spark's rule for a new partition: nothing written to it is skipped)."""
        self._follow_growth()
        bounds = self._bounds.of(self.partitions)
        order = self._keys[self._turn:] + self._keys[:self._turn]
        self._turn = (self._turn + 1) % len(self._keys)
        reset_to_earliest = self.group.settings.auto_offset_reset == "earliest"
        keys = list(self._keys)

        def initial(known: Collection[Key]) -> dict[Key, int]:
            read = {topic for topic, _ in known}
            return {key: bounds[key][0] if reset_to_earliest or key[0] in read else bounds[key][1] for key in keys}

        def change(sps: dict[Key, SharePartition], now_ms: int) -> list[Held]:
            taken: list[Held] = []
            budget = max_records
            fair = max(1, max_records // len(order))
            short = {key for key in keys if 0 <= bounds[key][1] < sps[key].spso}  # negative: a leader just elected
            self._short_since = {key: self._short_since.get(key, time.monotonic()) for key in short}
            recreated = sorted(key for key in short if time.monotonic() - self._short_since[key] >= SHORT_LOG_CONFIRM_S)
            if recreated:  # the first partition named, whichever an acquisition served first
                raise _recreated(recreated[0], sps[recreated[0]].spso, bounds[recreated[0]][1])
            for share in (fair, max_records):
                for key in order:
                    if budget <= 0:
                        break
                    low, high = bounds[key]
                    if key in short:  # nothing acquired there until it is told apart
                        continue
                    for run in sps[key].acquire(self.member_id, min(share, budget), now_ms, high,
                                                log_start_offset=low):
                        taken.append(Held(*key, run))
                        budget -= run.last - run.first + 1
            return taken

        return change, initial

    def _follow_growth(self) -> None:
        """The subscribed topics' partitions as they are now (asked again every few seconds): a member reads the
        partitions a topic gained while it runs; a topic deleted under it fails the acquisition, naming it."""
        partitions = self._watch.refresh()
        if partitions != self.partitions:
            self.partitions = partitions
            self._keys = _keys(partitions)

    def take_over(self, prefix: str, keep: Spans) -> tuple[int, int]:
        """Take over from earlier members whose ids start with ``prefix`` (a restarted query's earlier runs, fenced
        by the ledger): what they hold within ``keep`` (per share-partition, the (first, last) spans of the epochs
        Spark runs again) becomes this member's, locked and renewed as its own, so no other member gets those
        records in between; the rest goes back to the group at once, not on lock expiry. Returns the record
        counts (taken over, given back)."""
        def change(sps: dict[Key, SharePartition], now_ms: int) -> tuple[int, int]:
            earlier = {b.member_id for sp in sps.values() for b in sp.batches
                       if b.state is RecordState.ACQUIRED and b.member_id and b.member_id.startswith(prefix)
                       and b.member_id != self.member_id}
            taken = sum(sps[key].hand_over(member, self.member_id, spans, now_ms)
                        for key, spans in keep.items() if key in sps for member in earlier)
            return taken, sum(sp.release_member(member, now_ms) for sp in sps.values() for member in earlier)

        taken, released = self._commit(change)
        for key, spans in keep.items():  # renewing a span it does not hold renews nothing
            for first, last in spans:
                self._holdings.add(key, first, last)
        if taken or released:
            log.info("member %s took over %d record(s) of the epochs Spark runs again from its query's earlier run, "
                     "and gave back %d other record(s) that run held", self.member_id, taken, released)
        return taken, released

    def release_all(self, keep: Spans | None = None) -> int:
        """Give back everything this member holds, what it was never told of included, but the spans of ``keep``."""
        kept = keep or {}
        released = self._commit(lambda sps, now_ms: sum(sp.release_member(self.member_id, now_ms, kept.get(key, ()))
                                                        for key, sp in sps.items()))
        self._holdings.clear()
        return released

    def archived(self) -> list[Held]:
        """Records the group archived at its delivery-count limit in this member's commits, since the last call:
        nobody will be given them again, so the member that saw it dead-letters them."""
        with self._archived_lock:
            drained, self._archived = self._archived, []
        return drained

    def close(self, keep: Spans | None = None) -> None:
        """Stop renewing, give back what is held but the spans of ``keep``, and leave the members table; once.
        What is kept stays locked a lock duration from this commit, for the query's next run to take over."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._renewer.join(timeout=30)
        try:
            self.release_all(keep)
        finally:
            self.group.leave(self.member_id)
            self._maintenance.close(timeout_s=30)

    # -- internals ------------------------------------------------------------------------------
    def _commit(self, change: Callable[[dict[Key, SharePartition], int], T],
                initial: Initial | None = None) -> T:
        """Run ``change`` on every share-partition in one compare-and-swap commit (retried from a fresh read
        when another member won), renewing the locks this member knows it holds and noting what the limit archived.
        ``initial``: where a share-partition that has no state yet starts (only an acquisition creates one)."""
        planned_at_ms = [0]  # the plan that landed: when it renewed the locks
        third_ms = self.group.settings.lock_duration_ms / 3
        asked = time.monotonic()
        give_way_until = asked + third_ms / 1000  # a commit gives way a third of a lock at most, then goes

        def planned(sps: dict[Key, SharePartition]) -> tuple[T, tuple[list[Held], list[LostRange]]]:
            now_ms = planned_at_ms[0] = int(time.time() * 1000)
            if time.monotonic() < give_way_until:
                give_way(sps.values(), self.member_id, now_ms, third_ms)
            result = change(sps, now_ms)
            for key, sp in sps.items():
                sp.renew_member(self.member_id, self._holdings.of(key), now_ms)
            archived = [Held(t, p, run) for (t, p), sp in sps.items() for run in sp.archived_at_limit()]
            lost = [LostRange(t, p, first, last) for (t, p), sp in sps.items() for first, last in sp.lost_unread()]
            self.data_loss.refuse(lost)  # under failOnDataLoss=true this plan is not committed: the group stays
            return result, (archived, lost)

        gave_way = False
        while True:
            with self._lock:
                turn = time.monotonic()
                races = self.group.share_state.table.lost_races
                holding = self._holdings.any()
                try:
                    (result, (archived, lost)), version = self.group.share_state.update_all(planned, initial or {})
                except GiveWay as way:
                    pause_s = way.pause_s
                    if not gave_way:
                        gave_way = True
                        self.gave_way += 1
                        log.info("member %s gives way to member %s, whose locks lapse in %.1f s unless its renewal "
                                 "lands", self.member_id, way.member_id, way.lapse_in_s)
                else:
                    with self._archived_lock:
                        self._archived += archived
                    self.data_loss.found(lost)
                    self._note_renewal(planned_at_ms[0], holding and version is not None, waited_s=turn - asked,
                                       took_s=time.monotonic() - turn,
                                       lost_races=self.group.share_state.table.lost_races - races)
                    if version is not None and version % MAINTAIN_EVERY_COMMITS == 0:
                        self._maintenance.request()
                    return result
            time.sleep(pause_s)  # the member's own renewer may commit meanwhile

    def _note_renewal(self, planned_at_ms: int, renewed: bool, *, waited_s: float, took_s: float,
                      lost_races: int) -> None:
        """Note when the member's locks were last renewed (a commit that wrote nothing held nothing to renew),
        and say so when a commit ``renewed`` locks late: other members see a renewal when it lands, and the
        one before it counted from its plan, so from that plan to this landing the locks were at risk, and
        past a whole lock duration other members could take the records and this member's settles of them
        fail. Two thirds of one is reported. What the commit waited for and lost tells a member starved of
        the table from one starved of the CPU."""
        previous, self._renewed_at_ms = self._renewed_at_ms, planned_at_ms
        exposed_ms = time.time() * 1000 - previous
        lock_ms = self.group.settings.lock_duration_ms
        if not renewed or exposed_ms <= lock_ms * 2 / 3:
            return
        self.late_renewals += 1
        log.warning("member %s renewed its locks %.1f s after the renewal before it was planned (lock duration "
                    "%.1f s%s): this commit waited %.1f s (for the member's other commit, or giving way to another "
                    "member's renewal), then took %.1f s and lost %d compare-and-swap race(s)",
                    self.member_id, exposed_ms / 1000, lock_ms / 1000,
                    ", so they lapsed meanwhile" if exposed_ms > lock_ms else "", waited_s, took_s, lost_races)

    def _renew_while_alive(self) -> None:
        """Renew a third of a lock duration after the member's last commit renewed its locks (every commit of its
        renews them, so a caller committing often makes this one idle), and say the member is alive as often.

        Counted from the last renewal, not from the end of the last round: under load a commit takes seconds,
        and rounds spaced a third apart would let that time, the heartbeat's and the settings' read add up
        past the lock, which then lapses while the member lives.
        """
        said_alive = time.monotonic()
        pause_s = 0.0  # after a failed round: the next waits a third whatever the schedule says
        while True:
            third_ms = self.group.settings.lock_duration_ms / 3
            due_s = (self._renewed_at_ms + third_ms) / 1000 - time.time()
            if self._closed.wait(max(due_s, pause_s)):
                return
            pause_s = 0.0
            try:
                if time.time() * 1000 >= self._renewed_at_ms + third_ms:  # no commit of the caller's renewed since
                    self._commit(lambda sps, now_ms: None)
                if time.monotonic() - said_alive >= third_ms / 1000:
                    said_alive = time.monotonic()
                    with self._lock:  # the group's tables are one thread's at a time
                        self.group.heartbeat(self.member_id)
                        adopted = self.group.refresh_settings()
                    if adopted is not None:
                        log.info("member %s adopted the group's altered settings: %s", self.member_id, adopted)
            except Exception as error:  # the next round tries again; locks last a whole duration
                pause_s = third_ms / 1000
                log.warning("member %s could not renew its locks: %s", self.member_id, error)


class GiveWay(Exception):
    """A plan found another member's locks about to lapse: this commit waits, so that member's renewal lands."""

    def __init__(self, member_id: str, lapse_in_s: float):
        super().__init__(member_id)
        self.member_id = member_id
        self.lapse_in_s = lapse_in_s
        self.pause_s = min(GIVE_WAY_PAUSE_S, lapse_in_s)


def give_way(sps: Iterable[SharePartition], member_id: str, now_ms: int, margin_ms: float) -> None:
    """Raise GiveWay when another member's lock ends within ``margin_ms`` and none of ``member_id``'s does.

    Every commit of a Delta group races every other on one table, so a member's renewal can lose race after
    race to members that commit more often, and its locks lapse while it lives (a broker never makes a RENEW
    wait behind a ShareFetch). A healthy member renews with two thirds of its lock left, so a lock within
    the last third is one whose renewal keeps losing (or whose member died, and then the wait is that third
    once): the others hold off until it lands or the lock ends. A member with locks of its own that close
    goes ahead, so two members never wait for each other.
    """
    lapsing = [(b.lock_deadline_ms, b.member_id) for sp in sps for b in sp.batches
               if b.state is RecordState.ACQUIRED and b.member_id is not None and b.lock_deadline_ms is not None
               and now_ms < b.lock_deadline_ms <= now_ms + margin_ms]
    if lapsing and all(member != member_id for _, member in lapsing):
        deadline, other = min(lapsing)
        raise GiveWay(other, (deadline - now_ms) / 1000)


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


def _recreated(key: Key, spso: int, log_end: int) -> ClusterError:
    """The log of ``key`` ends below the group's start in it: the topic was deleted and created again since the group
    read it (or its log was truncated), so the group's state describes another log."""
    topic, partition = key
    return ClusterError(f"{topic}[{partition}] ends at offset {log_end}, below the offset {spso} the group has read "
                        f"it to: the topic was deleted and created again since (or its log truncated), and the "
                        f"group's state is of the old one; to read the new one from its start, delete the group's "
                        f"offsets for it (sharegroup delete-offsets <groupLocation> --topic {topic} --execute)")


def _keys(partitions: Mapping[str, int]) -> list[Key]:
    """Every share-partition of ``partitions`` (topic -> count), in the order acquisitions take turns over."""
    return [(t, p) for t, n in sorted(partitions.items()) for p in range(n)]
