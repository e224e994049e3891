"""Reading what a location holds, for describe: a delta group's ``groupLocation`` or a broker-mode
query's ``stateLocation`` (its ledger, member and dead letters).

A location is read without Kafka; a delta group's log offsets are looked up afterwards, once for
every group of the call; a query's ledger is joined with its group's broker view when there is one.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import KafkaException

from sharegroup_source.admin.cluster import Cluster
from sharegroup_source.admin.model import (
    SESSION_TIMEOUT_MS,
    GroupDescription,
    Key,
    MemberDescription,
    PartitionDescription,
    time_of_ms,
)
from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.group_configs import GroupConfig
from sharegroup_source.kafka.share_protocol import NO_SHARE_GROUP_ADMIN
from state_store import UNSETTLED, DeadLetters, EpochStatus, LedgerEntry, RecordState, SharePartition, StateStore
from state_store.errors import StateStoreError
from state_store.group import SETTING_OPTIONS, GroupStore, MemberInfo
from state_store.redaction import redact_location
from state_store.table_files import local_path

__all__ = ["DeltaGroup", "LogOffsets", "QueryLedger", "live_members", "log_offsets", "read_location"]

Bounds = Mapping[Key, tuple[int, int]]
_SETTLED_STATES = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(frozen=True)
class LogOffsets:
    """Log start and end per partition, looked up once for every group of a describe."""

    bounds: Bounds
    asked: bool  # False: no bootstrap servers were given
    error: str | None = None  # the cluster could not be asked
    refused: Mapping[str, str] = field(default_factory=dict)  # topic -> why the principal may not DESCRIBE it

    def of(self, key: Key) -> tuple[tuple[int | None, int | None], str | None]:
        """(log start, log end) of ``key``, and the partition's error if the cluster lacks it or refuses its topic."""
        if key in self.bounds:
            return self.bounds[key], None
        if key[0] in self.refused:
            return (None, None), self.refused[key[0]]
        lacking = self.asked and self.error is None
        return (None, None), (f"{key[0]}[{key[1]}] is not in the cluster (topic or partition deleted)"
                              if lacking else None)

    def notes(self) -> list[str]:
        return [] if self.asked else ["no bootstrap servers given: log offsets and lag were not looked up"]


def log_offsets(keys: set[Key], config: dict[str, Any] | None) -> LogOffsets:
    if config is None or not keys:
        return LogOffsets({}, config is not None)
    try:
        cluster = Cluster(config)
        refused = cluster.refusals({topic for topic, _ in keys})
        return LogOffsets(cluster.bounds(keys), True, refused={topic: str(error) for topic, error in refused.items()})
    except (ClusterError, KafkaException) as error:
        return LogOffsets({}, True, str(error))


class DeltaGroup:
    """A Delta-coordinated group's tables as read for one describe."""

    def __init__(self, group: GroupStore, location: str, storage_options: dict[str, str] | None):
        self.group = group
        self.location = location
        self.partitions = group.share_state.partitions()
        self.members = group.members()
        self.dead_letters = DeadLetters.open(group.location, "dead_letters",
                                             storage_options=storage_options).table.snapshot().row_count()

    def share_partitions(self) -> list[Key]:
        return sorted(self.partitions)

    def describe(self, offsets: LogOffsets, now_ms: int) -> GroupDescription:
        for sp in self.partitions.values():
            sp.expire_locks(now_ms)  # a read copy: locks as of now, as the next acquisition sees them
        members = live_members(self.members, self.partitions, now_ms)
        return GroupDescription(
            self.location, self.group.group_id, "delta", state="Stable" if members else "Empty",
            error=offsets.error if self.partitions else None, note="; ".join(offsets.notes()) or None,
            members=tuple(members), dead_letter_count=self.dead_letters,
            partitions=tuple(_delta_partition(key, sp, offsets) for key, sp in sorted(self.partitions.items())),
            settings=self.settings())

    def settings(self) -> tuple[GroupConfig, ...]:
        """The group's settings row, by config name: every one is the group's own (source ``group``), which its
        first member wrote and ``sharegroup configure`` alters; no broker has a say."""
        settings = self.group.settings
        return tuple(GroupConfig(option, str(getattr(settings, name)), "group")
                     for option, name in sorted(SETTING_OPTIONS.items()))


def _delta_partition(key: Key, sp: SharePartition, offsets: LogOffsets) -> PartitionDescription:
    (log_start, log_end), error = offsets.of(key)
    lag = None
    if log_start is not None and log_end is not None:
        low = max(sp.spso, log_start)
        lag = max(0, log_end - low - sp.count(*_SETTLED_STATES, start=low))
    deadlines = [b.lock_deadline_ms for b in sp.batches if b.state is RecordState.ACQUIRED and b.lock_deadline_ms]
    return PartitionDescription(
        *key, spso=sp.spso, speo=sp.speo, log_start_offset=log_start, log_end_offset=log_end, lag=lag,
        acquired=sp.count(RecordState.ACQUIRED), available=sp.count(RecordState.AVAILABLE),
        acknowledged=sp.count(RecordState.ACKNOWLEDGED), archived=sp.count(RecordState.ARCHIVED),
        max_delivery_count=max((b.delivery_count for b in sp.batches), default=0),
        oldest_lock_deadline=time_of_ms(min(deadlines, default=None)), error=error)


def live_members(members: Sequence[MemberInfo], partitions: Mapping[Key, SharePartition],
                  now_ms: int) -> list[MemberDescription]:
    """Members holding live locks (expire them first) or seen within SESSION_TIMEOUT_MS and not left."""
    held: Counter[str] = Counter()
    for sp in partitions.values():
        held.update(sp.holders())
    known = {m.member_id: m for m in members}
    seen = {m.member_id for m in members
            if m.left_at_ms is None and m.last_seen_ms >= now_ms - SESSION_TIMEOUT_MS}
    live = sorted(seen | set(held), key=lambda m: (known[m].joined_at_ms if m in known else 0, m))
    return [MemberDescription(m, known[m].kind if m in known else "unknown", known[m].host if m in known else None,
                              time_of_ms(known[m].last_seen_ms) if m in known else None, held[m]) for m in live]


class QueryLedger:
    """A broker-coordinated query's state as read for one describe: its ledger, member and dead letters."""

    def __init__(self, store: StateStore, location: str, group_id: str):
        self.location = location
        self.group_id = group_id
        self.entries = store.ledger.entries(group_id)
        if self.entries and all(e.lock_deadline_ms is None for e in self.entries):
            raise StateStoreError("this is the stateLocation of a query on coordinator=delta, whose locks the "
                                  "group renews: describe its groupLocation, where the group's state is")
        self.member = store.progress.member_in_group(group_id)
        self.dead_letters = store.dead_letters.table.snapshot().row_count()

    def share_partitions(self) -> list[Key]:
        return sorted({(r.topic, r.partition) for e in self.entries for r in e.ranges})

    def describe(self, broker: GroupDescription | None) -> GroupDescription:
        """The ledger's view joined with ``broker``, the coordinator's description of the query's group
        (its state, members, SPSO, lag and log ends); without it, what the ledger knows and why."""
        unsettled = [e for e in self.entries if e.status in UNSETTLED]
        ours = {e.member_id for e in self.entries}
        held = sum(e.record_count for e in unsettled)
        if broker is None or broker.error is not None:
            members: tuple[MemberDescription, ...] = () if self.member is None else (
                MemberDescription(self.member.run_id, "query", self.member.host, None, held),)
            why = "no bootstrap servers given" if broker is None else f"the broker could not say: {broker.error}"
            note: str | None = f"{why}; shown is what this query's ledger knows"
            by_key: dict[Key, PartitionDescription] = {}
            state = coordinator = None
            settings: tuple[GroupConfig, ...] = ()
            # a cluster without the API (the embedded broker) is no failure of this group: its ledger is described
            error = None if broker is None or NO_SHARE_GROUP_ADMIN in (broker.error or "") else broker.error
        else:
            members = tuple(replace(m, kind="query", records_held=held) if m.member_id in ours else m
                            for m in broker.members)
            note, state, coordinator, error = broker.note, broker.state, broker.coordinator, None
            settings = broker.settings
            by_key = {(p.topic, p.partition): p for p in broker.partitions}
        keys = sorted(set(by_key) | set(self.share_partitions()))
        return GroupDescription(
            self.location, self.group_id, "broker", state=state, error=error, note=note, members=members,
            dead_letter_count=self.dead_letters, unsettled_epochs=len(unsettled), coordinator=coordinator,
            partitions=tuple(_ledger_partition(key, self.entries, by_key.get(key)) for key in keys),
            settings=settings)


def _ledger_partition(key: Key, entries: Sequence[LedgerEntry], broker: PartitionDescription | None
                      ) -> PartitionDescription:
    """The broker's share-partition (SPSO, lag, log end), with the ledger's counts of this query's records.

    ACKNOWLEDGED counts offsets, each once: a record delivered again (RELEASEd, its lock run out, the group reset)
    is in several acknowledged epochs, and a count of deliveries would exceed what the log ever held.
    """
    counts: Counter[EpochStatus] = Counter()
    acknowledged: list[tuple[int, int]] = []
    deadlines: list[int] = []
    max_delivery = 0
    for entry in entries:
        for r in entry.ranges:
            if (r.topic, r.partition) != key:
                continue
            counts[entry.status] += r.record_count
            if entry.status is EpochStatus.ACKED:
                acknowledged.extend(r.spans())
            max_delivery = max(max_delivery, 1, *(count for _, count in r.redelivered))
            if entry.status in UNSETTLED and entry.lock_deadline_ms is not None:
                deadlines.append(entry.lock_deadline_ms)
    base = broker or PartitionDescription(*key, spso=None, speo=None, log_start_offset=None, log_end_offset=None,
                                          lag=None, acquired=None, available=None, acknowledged=None, archived=None,
                                          max_delivery_count=None, oldest_lock_deadline=None)
    return replace(base, acquired=sum(counts[s] for s in UNSETTLED), acknowledged=_offsets_in(acknowledged),
                   max_delivery_count=max_delivery, oldest_lock_deadline=time_of_ms(min(deadlines, default=None)),
                   ack_failed=counts[EpochStatus.ACK_FAILED])


def _offsets_in(spans: list[tuple[int, int]]) -> int:
    """How many offsets the inclusive ``spans`` cover together, an offset in several of them once."""
    covered, reached = 0, None
    for start, end in sorted(spans):
        if reached is not None and start <= reached:
            start = reached + 1
        if start <= end:
            covered += end - start + 1
            reached = end
    return covered


def read_location(location: str, storage_options: dict[str, str] | None) -> DeltaGroup | QueryLedger | GroupDescription:
    """The location's state, or its description with the error that kept it from being read.

    Any failure is caught: it belongs to this location alone, and the others must still be described.
    """
    shown = redact_location(location)
    try:
        return _open(location, shown, storage_options)
    except Exception as error:  # one group's failure is that group's error (KIP-709), whatever it is
        return GroupDescription(shown, error=_message(error))


def _open(location: str, shown: str, storage_options: dict[str, str] | None) -> DeltaGroup | QueryLedger:
    """A group's ``groupLocation`` if it has group settings, else a query's ``stateLocation`` if it has a ledger."""
    try:
        group = GroupStore.existing(location, storage_options=storage_options)
    except StateStoreError as not_a_group:
        return _query_ledger(location, shown, storage_options, not_a_group)
    return DeltaGroup(group, shown, storage_options)


def _query_ledger(location: str, shown: str, storage_options: dict[str, str] | None,
                  not_a_group: StateStoreError) -> QueryLedger:
    """The query whose ledger is at ``location``; ``not_a_group`` is why the location is no delta group."""
    store = StateStore(location, storage_options=storage_options)
    ledger = store.ledger.table.snapshot()
    local = local_path(location)
    if ledger.version is None and local is not None and not os.path.exists(local):
        raise StateStoreError("the location does not exist")
    if ledger.version is None:
        raise StateStoreError(f"not a share group's groupLocation ({not_a_group}), nor a query's stateLocation "
                              "(it has no ledger table)")
    groups = sorted({row["query_id"] for piece in ledger.pieces for row in piece.rows(("query_id",))})
    if len(groups) != 1:
        raise StateStoreError(f"{shown} holds the ledgers of {len(groups)} share groups {groups}: a "
                              "stateLocation belongs to one query")
    return QueryLedger(store, shown, groups[0])


def _message(error: BaseException) -> str:
    return str(error) if isinstance(error, StateStoreError | ClusterError) else f"{type(error).__name__}: {error}"

