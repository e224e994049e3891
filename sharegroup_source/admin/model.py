"""What the admin answers: group, member, partition and reset descriptions, and config changes, the same for
every kind of group.

A ``delta`` group is described from its Delta tables; a ``broker`` group by its Kafka coordinator
(and, given a query's ``stateLocation``, joined with that query's ledger). A None is a number the
source of the description does not know.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa

from sharegroup_source.kafka.group_configs import ConfigChange, GroupConfig

__all__ = ["SESSION_TIMEOUT_MS", "ConfigPlan", "GroupDescription", "Key", "MemberDescription", "PartitionDescription",
           "PartitionReset", "ResetPlan", "as_utc", "current_ms", "iso_time", "shown_time", "time_of_ms", "to_arrow"]

#: A member not seen for this long, holding no live lock, is gone: Kafka's default
#: ``group.share.session.timeout.ms``. Delta members heartbeat every third of the lock duration.
SESSION_TIMEOUT_MS = 45_000


Key = tuple[str, int]


@dataclass(frozen=True)
class MemberDescription:
    """A member of the group: for a delta group, one that holds live locks or was seen within
    SESSION_TIMEOUT_MS (``last_seen`` None: not known); for a broker group, one its coordinator lists,
    with its client id and assigned share-partitions (``records_held`` known for this query only)."""

    member_id: str
    kind: str  # query, worker (delta) or consumer (broker: any share consumer), query if it is this ledger's
    host: str | None
    last_seen: datetime | None
    records_held: int | None
    client_id: str | None = None
    assignment: tuple[tuple[str, int], ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemberDescription:
        return cls(**{**data, "last_seen": _parse_time(data["last_seen"]),
                      "assignment": tuple(tuple(a) for a in data.get("assignment", ()))})


@dataclass(frozen=True)
class PartitionDescription:
    """One share-partition; a None is a number this location's state does not know.

    ``acquired``, ``available``, ``acknowledged`` and ``archived`` count the in-flight records
    (SPSO to SPEO) by state, so they sum to SPEO - SPSO. ``lag``: records from the SPSO (or the
    log start, if later) to the log end that are neither acknowledged nor archived yet.
    ``ack_failed`` (broker kind only): records of epochs whose acknowledgement failed. A broker
    group's ``spso`` and ``lag`` are its coordinator's (DescribeShareGroupOffsets, as Kafka's tool
    prints them); its ledger counts (``acquired``, ``acknowledged``) only with a query's stateLocation.
    """

    topic: str
    partition: int
    spso: int | None
    speo: int | None
    log_start_offset: int | None
    log_end_offset: int | None
    lag: int | None
    acquired: int | None
    available: int | None
    acknowledged: int | None
    archived: int | None
    max_delivery_count: int | None
    oldest_lock_deadline: datetime | None
    error: str | None = None
    ack_failed: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartitionDescription:
        return cls(**{**data, "oldest_lock_deadline": _parse_time(data["oldest_lock_deadline"])})


@dataclass(frozen=True)
class GroupDescription:
    """One location: its group, or the one ``error`` that kept it from being described.

    ``state`` is ``Empty`` or ``Stable`` for a delta group, the coordinator's (``Empty``, ``Stable``,
    ``Dead``) for a broker one. ``location`` is None for a broker group described by its id only.
    ``note`` says what is left out and why. ``unsettled_epochs``: the ledger's, for a broker-mode
    query's stateLocation. ``coordinator``: a broker group's coordinator, ``host:port (node id)``.
    ``settings``: the group's share-group configs, each with its source (``group``: set for this group;
    ``broker``, ``default``: not set for it, so the broker's value applies); a delta group's are its
    settings row's.
    """

    location: str | None
    group_id: str | None = None
    kind: str | None = None
    state: str | None = None
    error: str | None = None
    note: str | None = None
    members: tuple[MemberDescription, ...] = ()
    dead_letter_count: int | None = None
    unsettled_epochs: int | None = None
    partitions: tuple[PartitionDescription, ...] = ()
    coordinator: str | None = None
    settings: tuple[GroupConfig, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601 strings, partitions, members and settings as lists of objects."""
        return _jsonable(asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupDescription:
        return cls(**{**data, "members": tuple(MemberDescription.from_dict(m) for m in data["members"]),
                      "partitions": tuple(PartitionDescription.from_dict(p) for p in data["partitions"]),
                      "settings": tuple(GroupConfig(**s) for s in data.get("settings", ()))})


@dataclass(frozen=True)
class PartitionReset:
    """What a reset does to one share-partition; ``start_offset`` None: the group has no state there yet."""

    topic: str
    partition: int
    start_offset: int | None
    new_start_offset: int
    discarded: int | None  # in-flight records whose state and delivery counts the reset drops (None: broker group)


@dataclass(frozen=True)
class ResetPlan:
    """A reset, planned (``executed`` False: nothing changed) or done: a delta group's committed as ``version``
    of its ``share_state``; a broker group's (``location`` None) by its coordinator."""

    location: str | None
    group_id: str
    to: str
    executed: bool
    partitions: tuple[PartitionReset, ...]
    version: int | None = None


@dataclass(frozen=True)
class ConfigPlan:
    """A change of a group's settings, planned (``executed`` False: nothing changed) or done; ``changes`` holds
    only the settings whose value differs (none: the group already is as asked). A broker group's (``kind``
    ``broker``, ``location`` None) is its coordinator's; a delta group's was one commit of its settings row."""

    group_id: str
    location: str | None
    kind: str
    changes: tuple[ConfigChange, ...]
    executed: bool


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


# -- times ---------------------------------------------------------------------------------------------
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def time_of_ms(ms: int | None) -> datetime | None:
    """Epoch milliseconds as an exact UTC datetime (a float division would round some)."""
    return None if ms is None else _EPOCH + timedelta(milliseconds=ms)


def as_utc(when: datetime) -> datetime:
    """``when`` in UTC; a naive datetime means UTC already."""
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def shown_time(when: datetime | None) -> str | None:
    """A time as the tables print it, or None."""
    return None if when is None else iso_time(when)


def iso_time(when: datetime) -> str:
    """To the second, in UTC: how the tables print times (naive means UTC)."""
    return as_utc(when).isoformat(timespec="seconds").replace("+00:00", "Z")


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


def current_ms() -> int:
    """Now, in epoch milliseconds (the state tables' clock)."""
    return int(time.time() * 1000)

