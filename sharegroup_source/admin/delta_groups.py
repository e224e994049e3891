"""Resetting and deleting a Delta-coordinated group's offsets: one compare-and-swap commit on its
``share_state``, refused while a member holds records or was seen lately (KIP-932: empty groups only);
and altering its settings: one commit of its ``settings`` row, which live members adopt at their next
heartbeat, so a group with members is configured as a broker group is."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from sharegroup_source.admin.cluster import Cluster, describe_target, new_offsets, topic_keys
from sharegroup_source.admin.model import (
    SESSION_TIMEOUT_MS,
    ConfigPlan,
    Key,
    PartitionReset,
    ResetPlan,
    current_ms,
    shown_time,
)
from sharegroup_source.admin.state_locations import live_members
from sharegroup_source.errors import GroupNotEmptyError, OptionError
from sharegroup_source.kafka.group_configs import (
    DELTA_GROUP_CONFIGS,
    SHARE_GROUP_CONFIGS,
    ConfigChange,
    check_config_key,
)
from state_store import SharePartition
from state_store.errors import StateStoreError
from state_store.group import SETTING_OPTIONS, GroupSettings, GroupStore
from state_store.redaction import redact_location

__all__ = ["configure_delta_group", "delete_delta_offsets", "reset_delta_offsets"]


def reset_delta_offsets(location: str, *, to: str | int | datetime, topics: Iterable[str] | None,
                        execute: bool, config: Mapping[str, Any],
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
    cluster = Cluster(config)
    now_ms = current_ms()
    check = _refusal(group, now_ms)
    current = group.share_state.partitions()
    check(current)
    keys = topic_keys(current, topics, cluster)
    offsets = new_offsets(to, keys, cluster)

    def apply(partitions: Mapping[Key, SharePartition]) -> tuple[PartitionReset, ...]:
        check(partitions)  # on the version the commit is planned on: no member took records meanwhile
        resets = []
        for key, offset in sorted(offsets.items()):
            before = partitions[key].spso if key in current else None
            resets.append(PartitionReset(*key, before, offset, partitions[key].reset(offset)))
        return tuple(resets)

    target = describe_target(to)
    if not execute:
        share_config = group.settings.share_config
        fresh = {key: SharePartition(offset, share_config) for key, offset in offsets.items() if key not in current}
        return ResetPlan(shown, group.group_id, target, False, apply({**current, **fresh}))
    resets, version = group.share_state.update_all(apply, offsets)
    return ResetPlan(shown, group.group_id, target, True, resets, version)


def delete_delta_offsets(location: str, topic: str, *, execute: bool,
                         storage_options: dict[str, str] | None = None) -> list[int]:
    """Remove ``topic``'s share-partitions from a delta group in one commit (a dry run without ``execute``);
    returns their partitions.

    The group forgets where it was in the topic: a member subscribing to it again starts at
    ``share.auto.offset.reset``. Refused as a reset is (GroupNotEmptyError); a ValueError when the
    group has no state for ``topic``.
    """
    group, shown = _delta_group(location, storage_options)
    refusal = _refusal(group, current_ms())
    if execute:
        removed, _ = group.share_state.remove_topic(topic, refusal)
    else:
        current = group.share_state.partitions()
        refusal(current)
        removed = sorted(p for t, p in current if t == topic)
    if not removed:
        known = sorted({t for t, _ in group.share_state.partitions()})
        raise ValueError(f"share group '{group.group_id}' at {shown} has no state for topic {topic!r} "
                         f"(its topics: {', '.join(known) or 'none'})")
    return removed


def configure_delta_group(location: str, set_: Mapping[str, str], delete: Iterable[str], *, execute: bool,
                          storage_options: dict[str, str] | None = None) -> ConfigPlan:
    """Plan, and with ``execute`` commit, new settings for a delta group: ``set_`` by config name, ``delete``
    back to the default (Apache Kafka's, as for a new group).

    Only the group's settings row's configs (DELTA_GROUP_CONFIGS) are taken; any other key, and a value a
    group cannot have, is a ValueError naming it, and nothing is written. The commit is one compare-and-swap
    of the row, so the changes returned are those it made, even if an admin altered the row meanwhile.
    """
    group, shown = _delta_group(location, storage_options, "configured")
    where = f"share group '{group.group_id}' at {shown}"
    wanted = {_delta_key(key, where): value for key, value in set_.items()}
    removed = [_delta_key(key, where) for key in delete]
    both = sorted(set(wanted) & set(removed))
    if both:
        raise OptionError(f"{where}: {', '.join(both)} both set and deleted")
    typed = {key: _typed(key, value, where) for key, value in {**wanted, **dict.fromkeys(removed)}.items()}
    asked: dict[str, Any] = {SETTING_OPTIONS[key]: value for key, value in typed.items()}
    try:  # GroupSettings refuses what no group may have (a lock of 0 ms...)
        replace(group.settings, **asked)
    except ValueError as error:
        raise OptionError(f"{where}: {error}") from None
    if execute:
        done = group.alter(typed)
        changes = [ConfigChange(key, str(done[key][0]), str(done[key][1])) for key in typed if key in done]
    else:
        changes = [ConfigChange(key, str(old), str(value)) for key, value in typed.items()
                   if (old := getattr(group.settings, SETTING_OPTIONS[key])) != value]
    return ConfigPlan(group.group_id, shown, "delta", tuple(changes), execute)


def _delta_key(key: str, where: str) -> str:
    """``key`` as DELTA_GROUP_CONFIGS names it; a share-group config a delta group lacks is named as such."""
    if key in SHARE_GROUP_CONFIGS and key not in DELTA_GROUP_CONFIGS:
        raise OptionError(f"{where}: {key} is a config of coordinator=broker share groups (its broker applies it); "
                          f"a coordinator=delta group has {', '.join(DELTA_GROUP_CONFIGS)}")
    return check_config_key(key, where, DELTA_GROUP_CONFIGS)


def _typed(key: str, value: str | None, where: str) -> int | str:
    """``value`` as the settings row holds it; None: the default, what a new group has (Apache Kafka's)."""
    name = SETTING_OPTIONS[key]
    if value is None:
        default: int | str = getattr(GroupSettings(), name)
        return default
    if name == "auto_offset_reset":
        return value
    try:
        return int(value)
    except ValueError:
        raise OptionError(f"{where}: {key}={value!r} is not an integer") from None


def _delta_group(location: str, storage_options: dict[str, str] | None, done: str = "reset"
                 ) -> tuple[GroupStore, str]:
    shown = redact_location(location)
    try:
        return GroupStore.existing(location, storage_options=storage_options), shown
    except StateStoreError as error:
        raise StateStoreError(f"{error}. A LOCATION is a coordinator=delta group's groupLocation; a "
                              f"coordinator=broker group is {done} by its id: --group G") from None


def _refusal(group: GroupStore, now_ms: int) -> Callable[[Mapping[Key, SharePartition]], None]:
    """A check raising GroupNotEmptyError, naming the members, if any holds live locks in the share-partitions
    it is given or was seen within SESSION_TIMEOUT_MS (members as read now)."""
    members = group.members()

    def check(partitions: Mapping[Key, SharePartition]) -> None:
        for sp in partitions.values():
            sp.expire_locks(now_ms)
        live = live_members(members, partitions, now_ms)
        if live:
            named = "; ".join(f"{m.member_id} ({m.kind} on {m.host or 'an unknown host'}, holds {m.records_held} "
                              f"records, last seen {shown_time(m.last_seen)})" for m in live)
            raise GroupNotEmptyError(
                f"share group '{group.group_id}' at {group.location_shown} is not empty: {named}. KIP-932 resets "
                f"and deletes the offsets of an empty group only: stop its members (a member that died counts "
                f"until its locks expire and {SESSION_TIMEOUT_MS // 1000} s passed since it was last seen)")

    return check


