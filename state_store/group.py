"""The Delta coordinator's group state: one root, ``groupLocation``, shared by every member of a share group.

With ``coordinator=delta`` no broker keeps the share group, so its three parts live here:

- ``settings``: one row, the group's lock duration, delivery-count limit, in-flight window and
  auto.offset.reset. KIP-932 makes these the group's, not a member's: members that obeyed
  different limits would archive, or hand out again, the same record differently. The first
  member writes the row; every later member adopts it. ``alter`` changes it (a query's
  ``groupConfig.*`` options, ``sharegroup configure``), and live members adopt the new row at
  their next heartbeat, as a broker's members follow an altered group config.
- ``share_state``: the share-partition leader (see state_store.share_state).
- ``members``: who is in the group (queries and plain workers), for describing the group and
  telling live members from gone ones. Append-only, the latest row per member wins, so a
  heartbeat is one small append; maintenance folds the rows.

Every table is internal state (no time travel), written by compare-and-swap commits.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from datetime import timedelta
from typing import Any

import pyarrow as pa

from state_store.delta_table import StateTable
from state_store.errors import GroupSettingsError, StateStoreError
from state_store.redaction import redact_location
from state_store.share_partition import ShareConfig
from state_store.share_state import SHARE_STATE_SCHEMA, ShareStateTable
from state_store.table_cache import Snapshot
from state_store.table_commit import Write

__all__ = ["AUTO_OFFSET_RESETS", "MEMBERS_KEPT", "MEMBERS_SCHEMA", "MEMBER_KINDS", "SETTINGS_SCHEMA",
           "SETTING_OPTIONS", "GroupSettings", "GroupStore", "MemberInfo"]

AUTO_OFFSET_RESETS = ("latest", "earliest")
MEMBER_KINDS = ("query", "worker")
#: Maintenance drops members not seen for this long: left ones, and ones whose process died.
MEMBERS_KEPT = timedelta(days=1)

#: The option that sets each GroupSettings field (KIP-932's group config names, without ``group.``).
SETTING_OPTIONS = {
    "share.record.lock.duration.ms": "lock_duration_ms",
    "share.delivery.count.limit": "delivery_count_limit",
    "share.partition.max.record.locks": "max_record_locks",
    "share.auto.offset.reset": "auto_offset_reset",
}


@dataclass(frozen=True)
class GroupSettings:
    """The group configuration every member obeys (defaults are Apache Kafka's)."""

    lock_duration_ms: int = 30_000  # share.record.lock.duration.ms
    delivery_count_limit: int = 5  # share.delivery.count.limit
    max_record_locks: int = 2000  # share.partition.max.record.locks
    auto_offset_reset: str = "latest"  # share.auto.offset.reset

    def __post_init__(self) -> None:
        if self.auto_offset_reset not in AUTO_OFFSET_RESETS:
            raise ValueError(f"share.auto.offset.reset must be one of {AUTO_OFFSET_RESETS}, "
                             f"got {self.auto_offset_reset!r}")
        for option, name in SETTING_OPTIONS.items():
            if name != "auto_offset_reset" and getattr(self, name) < 1:
                raise ValueError(f"{option} must be at least 1, got {getattr(self, name)}")

    @property
    def share_config(self) -> ShareConfig:
        return ShareConfig(delivery_attempt_limit=self.delivery_count_limit, max_record_locks=self.max_record_locks,
                           lock_duration_ms=self.lock_duration_ms)


SETTINGS_SCHEMA = pa.schema([
    pa.field("group_id", pa.string(), nullable=False),
    pa.field("lock_duration_ms", pa.int64(), nullable=False),
    pa.field("delivery_count_limit", pa.int32(), nullable=False),
    pa.field("max_record_locks", pa.int32(), nullable=False),
    pa.field("auto_offset_reset", pa.string(), nullable=False),
    pa.field("created_at_ms", pa.int64(), nullable=False),
])

MEMBERS_SCHEMA = pa.schema([
    pa.field("member_id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("host", pa.string()),
    pa.field("pid", pa.int64()),
    pa.field("joined_at_ms", pa.int64(), nullable=False),
    pa.field("last_seen_ms", pa.int64(), nullable=False),
    pa.field("left_at_ms", pa.int64()),
    pa.field("commit_version", pa.int64(), nullable=False),  # the latest row per member wins
])


@dataclass(frozen=True)
class MemberInfo:
    """A member as its latest row describes it; ``left_at_ms`` None while it has not left."""

    member_id: str
    kind: str
    host: str | None
    pid: int | None
    joined_at_ms: int
    last_seen_ms: int
    left_at_ms: int | None


class GroupStore:
    """The Delta tables of one share group under ``location``; build it with ``open`` or ``existing``.

    An instance caches what it read and is meant for one thread; other threads and processes use
    their own instances and coordinate through Delta's compare-and-swap commits.
    """

    def __init__(self, location: str, group_id: str, settings: GroupSettings, settings_table: StateTable,
                 storage_options: dict[str, str] | None):
        self.location = location
        self.location_shown = redact_location(location)
        self.group_id = group_id
        self.settings = settings
        self._settings = settings_table
        self.share_state = ShareStateTable(_table(location, "share_state", SHARE_STATE_SCHEMA, storage_options),
                                           settings.share_config)
        self._members = _table(location, "members", MEMBERS_SCHEMA, storage_options)
        self._storage_options = storage_options

    @classmethod
    def open(cls, location: str, group_id: str, requested: Mapping[str, int | str], *,
             storage_options: dict[str, str] | None = None) -> GroupStore:
        """Join the group at ``location`` as one of its members, creating the group if it is new.

        ``requested`` holds the settings this member set explicitly, by option name; the others
        adopt the group's. Raises GroupSettingsError if the location holds another group or the
        group's settings differ from a requested one.
        """
        if not group_id:
            raise ValueError("the share group id is empty")
        asked = _requested_fields(requested)
        root = _root(location)
        settings_table = _table(root, "settings", SETTINGS_SCHEMA, storage_options)
        row = _create_or_read(settings_table, group_id, replace(GroupSettings(), **asked))
        store = cls(root, row["group_id"], _settings_of(row), settings_table, storage_options)
        store._check(group_id, asked)
        return store

    @classmethod
    def existing(cls, location: str, *, storage_options: dict[str, str] | None = None) -> GroupStore:
        """The group at ``location``, for describing it; opening it writes nothing.

        Raises StateStoreError if no group was ever created there.
        """
        root = _root(location)
        settings_table = _table(root, "settings", SETTINGS_SCHEMA, storage_options)
        rows = settings_table.snapshot().rows()
        if not rows:
            raise StateStoreError(f"no share group at {redact_location(root)}: it has no group settings; a group "
                                  "is created by its first member (coordinator=delta with this groupLocation)")
        row = _first(rows)
        return cls(root, row["group_id"], _settings_of(row), settings_table, storage_options)

    def alter(self, changes: Mapping[str, int | str]) -> dict[str, tuple[int | str, int | str]]:
        """Set the settings named in ``changes`` (by option name, ``share.record.lock.duration.ms``...) in one
        compare-and-swap commit; returns option -> (old, new) for those that changed, and adopts them. A
        ValueError names an unknown option or a value out of range; nothing is written then."""
        asked = _requested_fields(changes)
        changed: dict[str, tuple[int | str, int | str]] = {}

        def plan(snapshot: Snapshot) -> Write | None:
            row = _first(snapshot.rows())
            current = _settings_of(row)
            new = replace(current, **asked)
            changed.clear()
            changed.update({option: (getattr(current, name), getattr(new, name)) for option, name in
                            SETTING_OPTIONS.items() if getattr(current, name) != getattr(new, name)})
            if not changed:
                return None
            updated = pa.Table.from_pylist([{**row, **asdict(new)}], schema=SETTINGS_SCHEMA)
            return Write(updated, mode="overwrite")

        self._settings.commit(plan)
        self.refresh_settings()
        return dict(changed)

    def refresh_settings(self) -> GroupSettings | None:
        """Adopt the group's settings row as it is now (another member or an admin may have altered it); returns
        the new settings when they changed, else None."""
        rows = self._settings.snapshot().rows()
        latest = _settings_of(_first(rows)) if rows else self.settings
        if latest == self.settings:
            return None
        self.settings = latest
        self.share_state.config = latest.share_config
        return latest

    def for_another_thread(self) -> GroupStore:
        """The same group on table instances of its own: an instance is one thread's."""
        return GroupStore.existing(self.location, storage_options=self._storage_options)

    # -- members -----------------------------------------------------------------------------
    def join(self, member_id: str, kind: str) -> None:
        """Record that ``member_id`` (a ``query`` or a ``worker``) joined, from this host and process."""
        if kind not in MEMBER_KINDS:
            raise ValueError(f"member kind must be one of {MEMBER_KINDS}, got {kind!r}")
        host, pid = socket.gethostname(), os.getpid()
        self._record(member_id, lambda _, now: MemberInfo(member_id, kind, host, pid, now, now, None))

    def heartbeat(self, member_id: str) -> None:
        """Record that ``member_id`` is alive; raises StateStoreError if it has not joined or has left."""
        self._record(member_id, lambda latest, now: replace(self._present(member_id, latest), last_seen_ms=now))

    def leave(self, member_id: str) -> None:
        """Record that ``member_id`` left; nothing is written if it is unknown or left already."""
        self._record(member_id, lambda latest, now: None if latest is None or latest.left_at_ms is not None
                     else replace(latest, last_seen_ms=now, left_at_ms=now))

    def members(self) -> list[MemberInfo]:
        """Every member the table knows, left ones included, in the order they joined."""
        latest = _latest_members(self._members.snapshot().rows()).values()
        return sorted(latest, key=lambda m: (m.joined_at_ms, m.member_id))

    def maintain(self) -> None:
        """Fold each member's rows into its latest, drop members gone for MEMBERS_KEPT, compact and vacuum
        every table."""
        self._settings.maintain()
        self.share_state.maintain()
        self._members.maintain(_fold_members)

    # -- internals ---------------------------------------------------------------------------
    def _check(self, group_id: str, asked: Mapping[str, Any]) -> None:
        if self.group_id != group_id:
            raise GroupSettingsError(
                f"{self.location_shown} holds share group '{self.group_id}', not '{group_id}': a group location "
                f"belongs to one group; give '{group_id}' a groupLocation of its own")
        conflicts = [f"{option}={getattr(self.settings, name)}; this member asks for {asked[name]}"
                     for option, name in SETTING_OPTIONS.items()
                     if name in asked and asked[name] != getattr(self.settings, name)]
        if conflicts:
            values = "the group's value" if len(conflicts) == 1 else "the group's values"
            raise GroupSettingsError(f"group '{self.group_id}' at {self.location_shown} has "
                                     f"{', and '.join(conflicts)}: use {values} or a new groupLocation")

    def _present(self, member_id: str, latest: MemberInfo | None) -> MemberInfo:
        if latest is None or latest.left_at_ms is not None:
            state = "never joined" if latest is None else "left"
            raise StateStoreError(f"member {member_id} of group '{self.group_id}' at {self.location_shown} "
                                  f"{state}: it must join before it heartbeats")
        return latest

    def _record(self, member_id: str, update: Callable[[MemberInfo | None, int], MemberInfo | None]) -> None:
        """Append the member's next row, made by ``update`` from its latest one; None appends nothing."""
        def plan(snapshot: Snapshot) -> Write | None:
            row = update(_latest_members(snapshot.rows()).get(member_id), _now_ms())
            if row is None:
                return None
            data = {**asdict(row), "commit_version": snapshot.next_version}
            return Write(pa.Table.from_pylist([data], schema=MEMBERS_SCHEMA))

        self._members.commit(plan)


def _root(location: str) -> str:
    if not location or not location.strip():
        raise StateStoreError("the group location is empty: set groupLocation to a path or URI")
    return location if "://" in location else os.path.abspath(location)


def _table(root: str, name: str, schema: pa.Schema, storage_options: dict[str, str] | None) -> StateTable:
    return StateTable(root, name, schema, storage_options=storage_options)  # internal state's retention


def _requested_fields(requested: Mapping[str, int | str]) -> dict[str, Any]:
    """The member's explicit settings by GroupSettings field; a ValueError names an unknown option."""
    unknown = sorted(set(requested) - set(SETTING_OPTIONS))
    if unknown:
        raise ValueError(f"unknown group settings {unknown}: the group settings are {list(SETTING_OPTIONS)}")
    return {SETTING_OPTIONS[option]: value for option, value in requested.items()}


def _create_or_read(table: StateTable, group_id: str, settings: GroupSettings) -> dict[str, Any]:
    """The group's settings row: the one already there, or ``settings`` written as the first.

    A compare-and-swap commit, so of two members creating the group at once one writes the row
    and the other, retried on the new version, reads it.
    """
    found: list[dict[str, Any]] = []
    new = {"group_id": group_id, **asdict(settings), "created_at_ms": _now_ms()}

    def plan(snapshot: Snapshot) -> Write | None:
        found[:] = snapshot.rows()
        return None if found else Write(pa.Table.from_pylist([new], schema=SETTINGS_SCHEMA))

    table.commit(plan)
    return _first(found) if found else new


def _first(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The settings row that was written first: the group's, should a hand-made write have added more."""
    return min(rows, key=lambda r: r["created_at_ms"])


def _settings_of(row: Mapping[str, Any]) -> GroupSettings:
    return GroupSettings(**{f.name: row[f.name] for f in fields(GroupSettings)})


def _latest_members(rows: Iterable[dict[str, Any]]) -> dict[str, MemberInfo]:
    names = [f.name for f in fields(MemberInfo)]
    latest: dict[str, MemberInfo] = {}
    for row in sorted(rows, key=lambda r: r["commit_version"]):
        latest[row["member_id"]] = MemberInfo(**{name: row[name] for name in names})
    return latest


def _fold_members(snapshot: Snapshot) -> pa.Table | None:
    """Each member's latest row, for members seen within MEMBERS_KEPT; None when that changes nothing."""
    rows = snapshot.rows()
    since = _now_ms() - MEMBERS_KEPT // timedelta(milliseconds=1)
    latest = {r["member_id"]: r for r in sorted(rows, key=lambda r: r["commit_version"])}
    kept = [r for r in latest.values() if r["last_seen_ms"] >= since]
    return None if len(kept) == len(rows) else pa.Table.from_pylist(kept, schema=MEMBERS_SCHEMA)


def _now_ms() -> int:
    return int(time.time() * 1000)
