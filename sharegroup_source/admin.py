"""Describe share groups, and reset or delete their offsets, without ever joining one.

A location is either a Delta-coordinated group's ``groupLocation`` (kind ``delta``: the whole
group state is in Delta) or a broker-coordinated query's ``stateLocation`` (kind ``broker``: the
broker keeps the share-partitions, the query's ledger says what the query holds and settled).
Describing tells which.

What Kafka's own group admin learnt, applied to share groups:

- Never a member (KAFKA-3853, KIP-88): describing reads Delta tables, Metadata and ListOffsets
  only. A share-group member is assigned partitions and takes records, so a describe that joined
  would take work away from the group it describes. A group with no running member is described
  like any other: its offsets are in its state, not in a member.
- Many at once (KIP-709, KIP-699): one call describes N groups; a group that cannot be read
  (missing, corrupt, unreadable, its cluster unreachable) gets its own ``error`` and the others
  are still described; log offsets are looked up once for every partition of every group.
- Only an empty group is reset (KIP-932): a member holding records would settle them against
  state that no longer exists.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from sharegroup_source.coordinators.delta.log_bounds import LogBounds
from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka_clients import admin_config
from state_store import UNSETTLED, DeadLetters, EpochStatus, LedgerEntry, RecordState, SharePartition, StateStore
from state_store.delta_table import local_path
from state_store.errors import StateStoreError
from state_store.group import GroupStore, MemberInfo
from state_store.redaction import redact_location

__all__ = ["SESSION_TIMEOUT_MS", "GroupDescription", "GroupNotEmptyError", "MemberDescription",
           "PartitionDescription", "PartitionReset", "ResetPlan", "delete_offsets", "describe_groups",
           "describe_table", "parse_topic_spec", "reset_offsets", "reset_table", "to_arrow"]

#: A member not seen for this long, holding no live lock, is gone: Kafka's default
#: ``group.share.session.timeout.ms``. Delta members heartbeat every third of the lock duration.
SESSION_TIMEOUT_MS = 45_000
#: How long a Kafka request of the admin may take before its cluster counts as unreachable.
KAFKA_TIMEOUT_S = 15.0

Key = tuple[str, int]
Bounds = Mapping[Key, tuple[int, int]]
_SETTLED_STATES = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class GroupNotEmptyError(RuntimeError):
    """A reset or delete was refused: members of the group hold records or were seen lately."""


@dataclass(frozen=True)
class MemberDescription:
    """A member that holds live locks or was seen within SESSION_TIMEOUT_MS (``last_seen`` None: not known)."""

    member_id: str
    kind: str  # query or worker
    host: str | None
    last_seen: datetime | None
    records_held: int

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemberDescription:
        return cls(**{**data, "last_seen": _parse_time(data["last_seen"])})


@dataclass(frozen=True)
class PartitionDescription:
    """One share-partition; a None is a number this location's state does not know.

    ``acquired``, ``available``, ``acknowledged`` and ``archived`` count the in-flight records
    (SPSO to SPEO) by state, so they sum to SPEO - SPSO. ``lag``: records from the SPSO (or the
    log start, if later) to the log end that are neither acknowledged nor archived yet.
    ``ack_failed`` (broker kind only): records of epochs whose acknowledgement failed.
    """

    topic: str
    partition: int
    spso: int | None
    speo: int | None
    log_start_offset: int | None
    log_end_offset: int | None
    lag: int | None
    acquired: int
    available: int | None
    acknowledged: int
    archived: int | None
    max_delivery_count: int
    oldest_lock_deadline: datetime | None
    error: str | None = None
    ack_failed: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartitionDescription:
        return cls(**{**data, "oldest_lock_deadline": _parse_time(data["oldest_lock_deadline"])})


@dataclass(frozen=True)
class GroupDescription:
    """One location: its group, or the one ``error`` that kept it from being described.

    ``state`` is ``Empty`` or ``Stable`` for a delta group, None for a broker one (the broker
    knows). ``note`` says what is left out and why. ``unsettled_epochs``: broker kind only.
    """

    location: str
    group_id: str | None = None
    kind: str | None = None
    state: str | None = None
    error: str | None = None
    note: str | None = None
    members: tuple[MemberDescription, ...] = ()
    dead_letter_count: int | None = None
    unsettled_epochs: int | None = None
    partitions: tuple[PartitionDescription, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601 strings, partitions and members as lists of objects."""
        return _jsonable(asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupDescription:
        return cls(**{**data, "members": tuple(MemberDescription.from_dict(m) for m in data["members"]),
                      "partitions": tuple(PartitionDescription.from_dict(p) for p in data["partitions"])})


@dataclass(frozen=True)
class PartitionReset:
    """What a reset does to one share-partition; ``start_offset`` None: the group has no state there yet."""

    topic: str
    partition: int
    start_offset: int | None
    new_start_offset: int
    discarded: int  # in-flight records whose state and delivery counts the reset drops


@dataclass(frozen=True)
class ResetPlan:
    """A reset, planned (``executed`` False: nothing changed) or committed as ``version`` of ``share_state``."""

    location: str
    group_id: str
    to: str
    executed: bool
    partitions: tuple[PartitionReset, ...]
    version: int | None = None


# -- describing ------------------------------------------------------------------------------------
def describe_groups(locations: Iterable[str], *, bootstrap_servers: str | None = None,
                    kafka_config: Mapping[str, Any] | None = None,
                    storage_options: dict[str, str] | None = None) -> list[GroupDescription]:
    """Describe every location, in order; see the module's docstring.

    ``bootstrap_servers`` (or ``bootstrap.servers`` in ``kafka_config``, which holds any other
    client settings such as security ones) is the cluster the groups read; without it log
    offsets and lag are not looked up. ``storage_options`` go to delta-rs for object stores.
    """
    now_ms = _now_ms()
    found = [_read_one(location, storage_options) for location in locations]
    keys = {key for read in found if not isinstance(read, GroupDescription) for key in read.share_partitions()}
    offsets = _log_offsets(keys, _kafka_config(bootstrap_servers, kafka_config))
    return [read if isinstance(read, GroupDescription) else read.describe(offsets, now_ms) for read in found]


@dataclass(frozen=True)
class _LogOffsets:
    """Log start and end per partition, looked up once for every group of a describe."""

    bounds: Bounds
    asked: bool  # False: no bootstrap servers were given
    error: str | None = None  # the cluster could not be asked

    def of(self, key: Key) -> tuple[tuple[int | None, int | None], str | None]:
        """(log start, log end) of ``key``, and the partition's error if the cluster lacks it."""
        if key in self.bounds:
            return self.bounds[key], None
        lacking = self.asked and self.error is None
        return (None, None), (f"{key[0]}[{key[1]}] is not in the cluster (topic or partition deleted)"
                              if lacking else None)

    def notes(self) -> list[str]:
        return [] if self.asked else ["no bootstrap servers given: log offsets and lag were not looked up"]


def _log_offsets(keys: set[Key], config: dict[str, Any] | None) -> _LogOffsets:
    if config is None or not keys:
        return _LogOffsets({}, config is not None)
    try:
        return _LogOffsets(_Cluster(config).bounds(keys), True)
    except (ClusterError, KafkaException) as error:
        return _LogOffsets({}, True, str(error))


class _DeltaGroup:
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

    def describe(self, offsets: _LogOffsets, now_ms: int) -> GroupDescription:
        for sp in self.partitions.values():
            sp.expire_locks(now_ms)  # a read copy: locks as of now, as the next acquisition sees them
        members = _live_members(self.members, self.partitions, now_ms)
        return GroupDescription(
            self.location, self.group.group_id, "delta", state="Stable" if members else "Empty",
            error=offsets.error if self.partitions else None, note="; ".join(offsets.notes()) or None,
            members=tuple(members), dead_letter_count=self.dead_letters,
            partitions=tuple(_delta_partition(key, sp, offsets) for key, sp in sorted(self.partitions.items())))


def _delta_partition(key: Key, sp: SharePartition, offsets: _LogOffsets) -> PartitionDescription:
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
        oldest_lock_deadline=_time(min(deadlines, default=None)), error=error)


def _live_members(members: Sequence[MemberInfo], partitions: Mapping[Key, SharePartition],
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
                              _time(known[m].last_seen_ms) if m in known else None, held[m]) for m in live]


class _BrokerQuery:
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

    def describe(self, offsets: _LogOffsets, now_ms: int) -> GroupDescription:
        unsettled = [e for e in self.entries if e.status in UNSETTLED]
        held = sum(e.record_count for e in unsettled)
        members = () if self.member is None else (
            MemberDescription(self.member.run_id, "query", self.member.host, None, held),)
        note = ("the broker keeps this group's share-partitions (SPSO, SPEO, lag, available and archived "
                "records) and its other members, and the Python Kafka client has no share-group admin API, so "
                "they are left empty here; ask the broker: kafka-share-groups --bootstrap-server B --describe "
                f"--group {self.group_id} --offsets. Shown is what this query's ledger knows")
        return GroupDescription(
            self.location, self.group_id, "broker", state=None, error=offsets.error if self.entries else None,
            note="; ".join([note, *offsets.notes()]), members=members, dead_letter_count=self.dead_letters,
            unsettled_epochs=len(unsettled),
            partitions=tuple(_broker_partition(key, self.entries, offsets) for key in self.share_partitions()))


def _broker_partition(key: Key, entries: Sequence[LedgerEntry], offsets: _LogOffsets) -> PartitionDescription:
    counts: Counter[EpochStatus] = Counter()
    deadlines: list[int] = []
    max_delivery = 0
    for entry in entries:
        for r in entry.ranges:
            if (r.topic, r.partition) != key:
                continue
            counts[entry.status] += r.record_count
            max_delivery = max(max_delivery, 1, *(count for _, count in r.redelivered))
            if entry.status in UNSETTLED and entry.lock_deadline_ms is not None:
                deadlines.append(entry.lock_deadline_ms)
    (log_start, log_end), error = offsets.of(key)
    return PartitionDescription(
        *key, spso=None, speo=None, log_start_offset=log_start, log_end_offset=log_end, lag=None,
        acquired=sum(counts[s] for s in UNSETTLED), available=None, acknowledged=counts[EpochStatus.ACKED],
        archived=None, max_delivery_count=max_delivery, oldest_lock_deadline=_time(min(deadlines, default=None)),
        error=error, ack_failed=counts[EpochStatus.ACK_FAILED])


def _read_one(location: str, storage_options: dict[str, str] | None) -> _DeltaGroup | _BrokerQuery | GroupDescription:
    """The location's state, or its description with the error that kept it from being read.

    Any failure is caught: it belongs to this location alone, and the others must still be described.
    """
    shown = redact_location(location)
    try:
        return _open(location, shown, storage_options)
    except Exception as error:  # one group's failure is that group's error (KIP-709), whatever it is
        return GroupDescription(shown, error=_message(error))


def _open(location: str, shown: str, storage_options: dict[str, str] | None) -> _DeltaGroup | _BrokerQuery:
    """A group's ``groupLocation`` if it has group settings, else a query's ``stateLocation`` if it has a ledger."""
    try:
        group = GroupStore.existing(location, storage_options=storage_options)
    except StateStoreError as not_a_group:
        return _broker_query(location, shown, storage_options, not_a_group)
    return _DeltaGroup(group, shown, storage_options)


def _broker_query(location: str, shown: str, storage_options: dict[str, str] | None,
                  not_a_group: StateStoreError) -> _BrokerQuery:
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
    return _BrokerQuery(store, shown, groups[0])


def _message(error: BaseException) -> str:
    return str(error) if isinstance(error, StateStoreError | ClusterError) else f"{type(error).__name__}: {error}"


# -- resetting and deleting --------------------------------------------------------------------------
def reset_offsets(location: str, *, to: str | int | datetime, topics: Iterable[str] | None = None,
                  execute: bool = False, bootstrap_servers: str | None = None,
                  kafka_config: Mapping[str, Any] | None = None,
                  storage_options: dict[str, str] | None = None) -> ResetPlan:
    """Plan, and with ``execute`` commit, a reset of a delta group's share-partitions.

    ``to``: ``"earliest"``, ``"latest"``, an offset (kept within the log) or a datetime (the first
    record at or after it; naive means UTC). ``topics``: ``"T"`` (every partition of T) or
    ``"T:0,2"``; default every share-partition the group has. A reset discards the in-flight
    state and delivery counts and starts each share-partition at its new offset, all in one
    compare-and-swap commit. Raises GroupNotEmptyError, naming the members, while any member
    holds records or was seen within SESSION_TIMEOUT_MS (a dry run too, as Kafka's tool does).
    """
    group, shown = _delta_group(location, storage_options)
    config = _kafka_config(bootstrap_servers, kafka_config)
    if config is None:
        raise ValueError("a reset looks the new offsets up in the log: give bootstrap servers")
    cluster = _Cluster(config)
    now_ms = _now_ms()
    check = _refusal(group, now_ms)
    current = group.share_state.partitions()
    check(current)
    keys = _targets(current, topics, cluster)
    offsets = _new_offsets(to, keys, cluster)

    def apply(partitions: Mapping[Key, SharePartition]) -> tuple[PartitionReset, ...]:
        check(partitions)  # on the version the commit is planned on: no member took records meanwhile
        resets = []
        for key, offset in sorted(offsets.items()):
            before = partitions[key].spso if key in current else None
            resets.append(PartitionReset(*key, before, offset, partitions[key].reset(offset)))
        return tuple(resets)

    target = _describe_target(to)
    if not execute:
        share_config = group.settings.share_config
        fresh = {key: SharePartition(offset, share_config) for key, offset in offsets.items() if key not in current}
        return ResetPlan(shown, group.group_id, target, False, apply({**current, **fresh}))
    resets, version = group.share_state.update_all(apply, offsets)
    return ResetPlan(shown, group.group_id, target, True, resets, version)


def delete_offsets(location: str, topic: str, *, storage_options: dict[str, str] | None = None) -> list[int]:
    """Remove ``topic``'s share-partitions from a delta group in one commit; returns their partitions.

    The group forgets where it was in the topic: a member subscribing to it again starts at
    ``share.auto.offset.reset``. Refused as a reset is (GroupNotEmptyError); a ValueError when the
    group has no state for ``topic``.
    """
    group, shown = _delta_group(location, storage_options)
    removed, _ = group.share_state.remove_topic(topic, _refusal(group, _now_ms()))
    if not removed:
        known = sorted({t for t, _ in group.share_state.partitions()})
        raise ValueError(f"share group '{group.group_id}' at {shown} has no state for topic {topic!r} "
                         f"(its topics: {', '.join(known) or 'none'})")
    return removed


def _delta_group(location: str, storage_options: dict[str, str] | None) -> tuple[GroupStore, str]:
    shown = redact_location(location)
    try:
        return GroupStore.existing(location, storage_options=storage_options), shown
    except StateStoreError as error:
        raise StateStoreError(f"{error}. Offsets are reset and deleted here for coordinator=delta groups only; "
                              "a broker-coordinated group's are the broker's: kafka-share-groups --reset-offsets "
                              "or --delete-offsets") from None


def _refusal(group: GroupStore, now_ms: int) -> Callable[[Mapping[Key, SharePartition]], None]:
    """A check raising GroupNotEmptyError, naming the members, if any holds live locks in the share-partitions
    it is given or was seen within SESSION_TIMEOUT_MS (members as read now)."""
    members = group.members()

    def check(partitions: Mapping[Key, SharePartition]) -> None:
        for sp in partitions.values():
            sp.expire_locks(now_ms)
        live = _live_members(members, partitions, now_ms)
        if live:
            named = "; ".join(f"{m.member_id} ({m.kind} on {m.host or 'an unknown host'}, holds {m.records_held} "
                              f"records, last seen {_shown_time(m.last_seen)})" for m in live)
            raise GroupNotEmptyError(
                f"share group '{group.group_id}' at {group.location_shown} is not empty: {named}. KIP-932 resets "
                f"and deletes the offsets of an empty group only: stop its members (a member that died counts "
                f"until its locks expire and {SESSION_TIMEOUT_MS // 1000} s passed since it was last seen)")

    return check


def _targets(current: Mapping[Key, SharePartition], topics: Iterable[str] | None, cluster: _Cluster) -> list[Key]:
    if topics is None:
        if not current:
            raise ValueError("the group has no share-partitions yet: name the topics to reset")
        return sorted(current)
    counts = cluster.partitions
    keys: set[Key] = set()
    for spec in topics:
        topic, partitions = parse_topic_spec(spec)
        if topic not in counts:
            raise ValueError(f"topic {topic!r} is not in the cluster")
        bad = [p for p in partitions or () if not 0 <= p < counts[topic]]
        if bad:
            raise ValueError(f"topic {topic!r} has partitions 0-{counts[topic] - 1}, not {bad}")
        keys.update((topic, p) for p in (partitions if partitions is not None else range(counts[topic])))
    return sorted(keys)


def parse_topic_spec(spec: str) -> tuple[str, tuple[int, ...] | None]:
    """``"T"`` -> (T, None): every partition; ``"T:0,2"`` -> (T, (0, 2))."""
    topic, colon, listed = spec.partition(":")
    if not topic or (colon and not listed):
        raise ValueError(f"topic {spec!r}: expected TOPIC or TOPIC:PARTITION[,PARTITION...]")
    try:
        return topic, tuple(int(p) for p in listed.split(",")) if colon else None
    except ValueError:
        raise ValueError(f"topic {spec!r}: partitions must be integers") from None


def _new_offsets(to: str | int | datetime, keys: Sequence[Key], cluster: _Cluster) -> dict[Key, int]:
    """Each share-partition's new start offset, kept within its log."""
    bounds = cluster.bounds(set(keys))
    gone = [f"{topic}[{partition}]" for topic, partition in keys if (topic, partition) not in bounds]
    if gone:
        raise ValueError(f"{', '.join(gone)} not in the cluster (deleted?): delete-offsets the topic, or name "
                         "the topics to reset")
    if to == "earliest":
        wanted = {key: bounds[key][0] for key in keys}
    elif to == "latest":
        wanted = {key: bounds[key][1] for key in keys}
    elif isinstance(to, datetime):  # no record that late: the log end
        found = cluster.offsets_at(keys, to)
        wanted = {key: offset if offset >= 0 else bounds[key][1] for key, offset in found.items()}
    elif isinstance(to, int) and not isinstance(to, bool):
        wanted = dict.fromkeys(keys, to)
    else:
        raise ValueError(f"reset to {to!r}: expected 'earliest', 'latest', an offset or a datetime")
    return {key: min(max(offset, bounds[key][0]), bounds[key][1]) for key, offset in wanted.items()}


def _describe_target(to: str | int | datetime) -> str:
    if isinstance(to, datetime):
        return _iso(to)
    return f"offset {to}" if isinstance(to, int) else str(to)


# -- the cluster -------------------------------------------------------------------------------------
class _Cluster:
    """One Kafka cluster through admin clients: Metadata and ListOffsets, nothing that joins a group."""

    def __init__(self, config: Mapping[str, Any]):
        self._config = config
        self._servers = config["bootstrap.servers"]
        self._admin = AdminClient({**admin_config(config),
                                   "socket.connection.setup.timeout.ms": int(KAFKA_TIMEOUT_S * 1000)})

    @cached_property
    def partitions(self) -> dict[str, int]:
        """Every topic's partition count, in one Metadata request."""
        try:
            metadata = self._admin.list_topics(timeout=KAFKA_TIMEOUT_S)
        except KafkaException as error:
            raise ClusterError(f"cannot reach Kafka at bootstrap.servers={self._servers} within "
                               f"{KAFKA_TIMEOUT_S:.0f}s: {error.args[0].str()}") from None
        return {name: len(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}

    def bounds(self, keys: set[Key]) -> dict[Key, tuple[int, int]]:
        """(log start, log end) of the ``keys`` the cluster has: one ListOffsets request per bound for all."""
        counts = self.partitions
        present = {topic: counts[topic] for topic, partition in keys if partition < counts.get(topic, 0)}
        bounds = LogBounds(self._config, KAFKA_TIMEOUT_S).of(present) if present else {}
        return {key: bounds[key] for key in keys if key in bounds}

    def offsets_at(self, keys: Sequence[Key], when: datetime) -> dict[Key, int]:
        """The first offset at or after ``when`` per partition; -1 where no record is that late."""
        spec = OffsetSpec.for_timestamp(int(_utc(when).timestamp() * 1000))
        futures = self._admin.list_offsets({TopicPartition(t, p): spec for t, p in keys},
                                           request_timeout=KAFKA_TIMEOUT_S)
        try:
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
        except KafkaException as error:
            raise ClusterError(f"cannot read offsets by time at bootstrap.servers={self._servers}: "
                               f"{error.args[0].str()}") from None


def _kafka_config(bootstrap_servers: str | None, kafka_config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    config = dict(kafka_config or {})
    if bootstrap_servers:
        config["bootstrap.servers"] = bootstrap_servers
    return config if config.get("bootstrap.servers") else None


# -- output ------------------------------------------------------------------------------------------
_ARROW_GROUP = [pa.field("location", pa.string()), pa.field("group_id", pa.string()), pa.field("kind", pa.string()),
                pa.field("state", pa.string())]
_ARROW_TYPES = {int: pa.int64(), str: pa.string(), datetime: pa.timestamp("us", tz="UTC")}


def to_arrow(descriptions: Iterable[GroupDescription]) -> pa.Table:
    """One row per share-partition, with its group's location, id, kind and state (``.to_pandas()`` for pandas)."""
    partition_fields = [pa.field(f.name, _ARROW_TYPES[_base_type(f.type)]) for f in fields(PartitionDescription)]
    rows = [{"location": d.location, "group_id": d.group_id, "kind": d.kind, "state": d.state, **asdict(p)}
            for d in descriptions for p in d.partitions]
    return pa.Table.from_pylist(rows, schema=pa.schema(_ARROW_GROUP + partition_fields))


def _base_type(annotation: Any) -> type:
    """The type of a field annotated ``int``, ``str | None``, ``datetime | None`` (strings under PEP 563)."""
    name = str(annotation).split("|")[0].strip()
    return {"int": int, "str": str, "datetime": datetime}[name]


_PARTITION_COLUMNS: list[tuple[str, Callable[[GroupDescription, PartitionDescription], Any]]] = [
    ("GROUP", lambda d, p: d.group_id), ("TOPIC", lambda d, p: p.topic), ("PARTITION", lambda d, p: p.partition),
    ("START-OFFSET", lambda d, p: p.spso), ("LAG", lambda d, p: p.lag), ("ACQUIRED", lambda d, p: p.acquired),
    ("AVAILABLE", lambda d, p: p.available), ("ACKNOWLEDGED", lambda d, p: p.acknowledged),
    ("ARCHIVED", lambda d, p: p.archived), ("MAX-DELIVERY-COUNT", lambda d, p: p.max_delivery_count),
    ("LOG-START-OFFSET", lambda d, p: p.log_start_offset), ("LOG-END-OFFSET", lambda d, p: p.log_end_offset),
    ("OLDEST-LOCK-DEADLINE", lambda d, p: _shown_time(p.oldest_lock_deadline)),
]


def describe_table(descriptions: Sequence[GroupDescription]) -> str:
    """Described groups as ``kafka-share-groups --describe`` prints them: groups, share-partitions (its
    GROUP, TOPIC, PARTITION, START-OFFSET, LAG columns first), members, then notes. Failed groups are
    left out: the caller reports their ``error``."""
    described = [d for d in descriptions if d.error is None or d.partitions]
    groups = _table(["GROUP", "KIND", "STATE", "MEMBERS", "DEAD-LETTERS", "LOCATION"],
                    [[d.group_id, d.kind, d.state, len(d.members), d.dead_letter_count, d.location] for d in described])
    partitions = _table([name for name, _ in _PARTITION_COLUMNS],
                        [[cell(d, p) for _, cell in _PARTITION_COLUMNS] for d in described for p in d.partitions])
    members = _table(["GROUP", "MEMBER-ID", "KIND", "HOST", "LAST-SEEN", "RECORDS-HELD"],
                     [[d.group_id, m.member_id, m.kind, m.host, _shown_time(m.last_seen), m.records_held]
                      for d in described for m in d.members])
    notes = [f"{d.group_id}: {p.topic}[{p.partition}]: {p.error}" for d in described for p in d.partitions if p.error]
    notes += [f"{d.group_id}: {d.note}" for d in described if d.note]
    return "\n\n".join(part for part in (groups, partitions, members, "\n".join(notes)) if part)


def reset_table(plan: ResetPlan) -> str:
    """A reset plan as Kafka's tool prints one, and what became of it."""
    rows = [[plan.group_id, r.topic, r.partition, r.start_offset, r.new_start_offset, r.discarded]
            for r in plan.partitions]
    table = _table(["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "NEW-START-OFFSET", "IN-FLIGHT-DISCARDED"], rows)
    done = (f"reset to {plan.to}: committed as version {plan.version} of the group's share_state" if plan.executed
            else f"dry run (reset to {plan.to}): nothing changed; add --execute to reset")
    return f"{table}\n\n{done}"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    """Left-aligned columns, ``-`` where a value is not known; empty when there are no rows."""
    if not rows:
        return ""
    cells = [headers, *[["-" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


# -- times ---------------------------------------------------------------------------------------------
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _time(ms: int | None) -> datetime | None:
    """Epoch milliseconds as an exact UTC datetime (a float division would round some)."""
    return None if ms is None else _EPOCH + timedelta(milliseconds=ms)


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def _shown_time(when: datetime | None) -> str | None:
    return None if when is None else _iso(when)


def _iso(when: datetime) -> str:
    """To the second, in UTC: how the tables print times (naive means UTC)."""
    return _utc(when).isoformat(timespec="seconds").replace("+00:00", "Z")


def _parse_time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _now_ms() -> int:
    return int(time.time() * 1000)
