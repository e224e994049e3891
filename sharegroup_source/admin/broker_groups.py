"""Share groups whose coordinator is the Kafka broker (``coordinator=broker``), through Kafka's own admin protocol.

Describing N groups costs one ListGroups per broker (only for all groups), one FindCoordinator for
the groups not listed, one ShareGroupDescribe per coordinator, DescribeShareGroupOffsets one per
group but all in flight at once (Kafka 4.3.1 answers a many-group one seconds late), one
ListOffsets per partition leader (:mod:`sharegroup_source.kafka.share_protocol`), and one DescribeConfigs
for the groups' settings (:mod:`sharegroup_source.kafka.group_configs`). Never a member.
Resets and deletes go to the coordinator, which refuses them while the group has members
(NON_EMPTY_GROUP): its reason is passed on with the members it names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sharegroup_source.admin.cluster import Cluster, describe_target, new_offsets, topic_keys
from sharegroup_source.admin.model import (
    GroupDescription,
    Key,
    MemberDescription,
    PartitionDescription,
    PartitionReset,
    ResetPlan,
)
from sharegroup_source.errors import ClusterError, GroupNotEmptyError
from sharegroup_source.kafka.group_configs import GroupConfig, describe_group_configs
from sharegroup_source.kafka.settings import QUERY_CLIENT_ID
from sharegroup_source.kafka.share_protocol import KAFKA_TIMEOUT_S, ShareGroupProtocol
from sharegroup_source.kafka.share_requests import LATEST, Coordinator, DescribedShareGroup, Failed, StartOffset

__all__ = ["delete_broker_groups", "delete_broker_offsets", "describe_broker_groups", "reset_broker_offsets"]

#: How long a describe waits for the groups' settings. librdkafka sends a group's DescribeConfigs to one broker and
#: asks no other: on a cluster with a frozen node not fenced yet, that one is the frozen node at times (seen: 3
#: calls in 8 with two of three nodes frozen), which never answers. Settings are the part of a description a
#: group can go without, so that costs a few seconds and a note, not the call.
SETTINGS_TIMEOUT_S = 5.0


def describe_broker_groups(group_ids: Iterable[str], config: Mapping[str, Any], *, all_groups: bool = False,
                           requests: Counter[str] | None = None) -> list[GroupDescription]:
    """Each of ``group_ids`` (and, with ``all_groups``, every share group of the cluster) as its coordinator
    describes it, in order of id; a group the cluster cannot describe (missing, not a share group, not
    authorized, its coordinator gone) has its own ``error``. A broker that could not list its groups is an
    error entry of its own (``group_id`` None). ``requests``, if given, counts the requests sent, by API."""
    wanted = list(dict.fromkeys(group_ids))
    try:
        protocol = ShareGroupProtocol(config, KAFKA_TIMEOUT_S)
    except ClusterError as error:
        if all_groups and not wanted:
            return [GroupDescription(None, error=str(error))]
        return [GroupDescription(None, g, "broker", error=str(error)) for g in wanted]
    with protocol:
        try:
            described = _describe(protocol, wanted, all_groups)
        finally:
            if requests is not None:
                requests.update(protocol.requests)
    return _with_settings(described, config)


def _describe(protocol: ShareGroupProtocol, wanted: list[str], all_groups: bool) -> list[GroupDescription]:
    unlisted: list[GroupDescription] = []
    if all_groups:
        listed, failed = protocol.list_share_groups()
        wanted = sorted(set(wanted) | set(listed))
        unlisted = [GroupDescription(None, error=f"broker {node} did not list its share groups: {error}")
                    for node, error in sorted(failed.items())]
    described = protocol.describe(wanted)
    offsets = protocol.start_offsets([g for g in wanted if not isinstance(described[g], Failed)])
    keys = {key for answer in offsets.values() if not isinstance(answer, Failed) for key in answer}
    keys |= {key for group in described.values() if not isinstance(group, Failed)
             for member in group.members for key in member.assignment}
    log_ends = protocol.log_offsets(keys, LATEST) if keys else {}
    brokers = protocol.brokers()
    coordinators = protocol.coordinators()
    return unlisted + [_description(g, described[g], offsets.get(g), log_ends, brokers.get(coordinators.get(g, -1)))
                       for g in wanted]


def _with_settings(descriptions: list[GroupDescription], config: Mapping[str, Any]) -> list[GroupDescription]:
    """The described groups with their settings, read in one DescribeConfigs for all. Settings a group's
    description can go without: where they cannot be read (no DESCRIBE_CONFIGS ACL on the group) its note
    says why, and the rest of it stands."""
    ids = [d.group_id for d in descriptions if d.group_id is not None and d.error is None]
    configs = describe_group_configs(config, ids, SETTINGS_TIMEOUT_S)
    return [_with_configs(d, configs[d.group_id]) if d.group_id in configs else d for d in descriptions]


def _with_configs(description: GroupDescription, configs: Mapping[str, GroupConfig] | ClusterError
                  ) -> GroupDescription:
    if isinstance(configs, ClusterError):
        return replace(description, note=f"its settings could not be read: {configs}")
    return replace(description, settings=tuple(configs.values()))


def _description(group_id: str, described: DescribedShareGroup | Failed,
                 offsets: dict[Key, StartOffset] | Failed | None, log_ends: Mapping[Key, int | Failed],
                 coordinator: Coordinator | None) -> GroupDescription:
    shown = None if coordinator is None else str(coordinator)
    if isinstance(described, Failed):
        return GroupDescription(None, group_id, "broker", error=_group_error(group_id, described), coordinator=shown)
    if isinstance(offsets, Failed) or offsets is None:
        return GroupDescription(None, group_id, "broker", state=described.state, coordinator=shown,
                                error=f"its start offsets could not be read: {offsets}")
    members = tuple(MemberDescription(m.member_id, _kind(m.client_id), m.host.lstrip("/"), None, None, m.client_id,
                                      m.assignment) for m in described.members)
    keys = sorted(set(offsets) | {key for m in described.members for key in m.assignment})
    return GroupDescription(None, group_id, "broker", state=described.state, members=members, coordinator=shown,
                            partitions=tuple(_partition(key, offsets.get(key), log_ends.get(key)) for key in keys))


def _kind(client_id: str) -> str:
    """``query`` for a query's share consumer, known by the client id the source gives it; else ``consumer``."""
    return "query" if client_id == QUERY_CLIENT_ID else "consumer"


def _group_error(group_id: str, error: Failed) -> str:
    if error.code == "GROUP_ID_NOT_FOUND":
        return f"no share group '{group_id}' in the cluster ({error})"
    if error.code == "GROUP_AUTHORIZATION_FAILED":
        return f"not authorized to DESCRIBE GROUP {group_id} ({error})"
    return str(error)


def _partition(key: Key, offset: StartOffset | None, log_end: int | Failed | None) -> PartitionDescription:
    errors = [str(e) for e in (offset.error if offset else None, log_end) if isinstance(e, Failed)]
    return PartitionDescription(
        *key, spso=offset.start_offset if offset else None, speo=None, log_start_offset=None,
        log_end_offset=log_end if isinstance(log_end, int) else None, lag=offset.lag if offset else None,
        acquired=None, available=None, acknowledged=None, archived=None, max_delivery_count=None,
        oldest_lock_deadline=None, error="; ".join(errors) or None)


# -- resetting and deleting ----------------------------------------------------------------------------------
def reset_broker_offsets(group_id: str, *, to: str | int | datetime, topics: Iterable[str] | None,
                         execute: bool, config: Mapping[str, Any]) -> ResetPlan:
    """Plan, and with ``execute`` apply (AlterShareGroupOffsets), new start offsets for a broker group.

    A dry run is refused (GroupNotEmptyError) while the coordinator lists members; an executed reset is
    refused by the coordinator itself then, and its reason is raised as GroupNotEmptyError."""
    with ShareGroupProtocol(config, KAFKA_TIMEOUT_S) as protocol:
        current = _start_offsets(protocol, group_id, missing_ok=topics is not None)
        if not execute:
            _refuse_if_members(protocol, group_id)
        cluster = Cluster(config)
        keys = topic_keys(current, topics, cluster)
        offsets = new_offsets(to, keys, cluster)
        resets = tuple(PartitionReset(*key, current[key].start_offset if key in current else None, offset, None)
                       for key, offset in sorted(offsets.items()))
        if execute:
            _applied(protocol, group_id, protocol.alter_start_offsets(group_id, offsets), "reset")
        return ResetPlan(None, group_id, describe_target(to), execute, resets)


def delete_broker_offsets(group_id: str, topic: str, *, execute: bool, config: Mapping[str, Any]) -> list[int]:
    """The partitions of ``topic`` the group has start offsets for, deleted (DeleteShareGroupOffsets) with
    ``execute``: the group forgets where it was there. Refused as a reset is; a ValueError when the group has
    no state for ``topic``."""
    with ShareGroupProtocol(config, KAFKA_TIMEOUT_S) as protocol:
        current = _start_offsets(protocol, group_id, missing_ok=False)
        partitions = sorted(p for t, p in current if t == topic)
        if not partitions:
            known = sorted({t for t, _ in current})
            raise ValueError(f"share group '{group_id}' has no offsets for topic {topic!r} "
                             f"(its topics: {', '.join(known) or 'none'})")
        if execute:
            _applied(protocol, group_id, protocol.delete_start_offsets(group_id, [topic]), "offset delete")
        else:
            _refuse_if_members(protocol, group_id)
        return partitions


def delete_broker_groups(group_ids: Sequence[str], *, execute: bool, config: Mapping[str, Any]
                         ) -> dict[str, str | None]:
    """Each group's error, None where it was (with ``execute``) or would be (dry run) deleted: one DeleteGroups
    per coordinator; the coordinator refuses a group with members (NON_EMPTY_GROUP)."""
    with ShareGroupProtocol(config, KAFKA_TIMEOUT_S) as protocol:
        described = protocol.describe(group_ids)
        if not execute:
            return {g: (_group_error(g, d) if isinstance(d, Failed) else
                        _members_error(g, d) if d.members else None) for g, d in described.items()}
        present = [g for g, d in described.items() if not isinstance(d, Failed)]
        deleted = protocol.delete_groups(present) if present else {}
        return {g: _group_error(g, d) if isinstance(d, Failed) else _deleted(g, deleted[g], d)
                for g, d in described.items()}


def _deleted(group_id: str, refused: Failed | None, described: DescribedShareGroup) -> str | None:
    return None if refused is None else _refusal_text(group_id, refused, described)


def _start_offsets(protocol: ShareGroupProtocol, group_id: str, *, missing_ok: bool) -> dict[Key, StartOffset]:
    answer = protocol.start_offsets([group_id])[group_id]
    if isinstance(answer, Failed):
        raise ClusterError(f"share group '{group_id}': {_group_error(group_id, answer)}")
    if not answer and not missing_ok:
        described = protocol.describe([group_id])[group_id]
        why = _group_error(group_id, described) if isinstance(described, Failed) else "it has no offsets yet"
        raise ValueError(f"share group '{group_id}': {why}; name the topics to reset")
    return answer


def _refuse_if_members(protocol: ShareGroupProtocol, group_id: str) -> None:
    described = protocol.describe([group_id])[group_id]
    if not isinstance(described, Failed) and described.members:
        raise GroupNotEmptyError(_members_error(group_id, described))


def _members_error(group_id: str, described: DescribedShareGroup) -> str:
    named = "; ".join(f"{m.member_id} (client {m.client_id} on {m.host.lstrip('/')})" for m in described.members)
    return (f"share group '{group_id}' is not empty: {named}. Kafka resets and deletes the offsets of an empty "
            "share group only: stop its members")


def _refusal_text(group_id: str, error: Failed, described: DescribedShareGroup) -> str:
    if error.code == "NON_EMPTY_GROUP":
        return f"the coordinator refused: {error}; {_members_error(group_id, described)}"
    return str(error)


def _applied(protocol: ShareGroupProtocol, group_id: str, outcome: Failed | Mapping[Any, Failed | None],
             what: str) -> None:
    """Raise what the coordinator refused: the whole ``what`` (NON_EMPTY_GROUP: GroupNotEmptyError) or parts."""
    if isinstance(outcome, Failed):
        described = protocol.describe([group_id])[group_id]
        if outcome.code == "NON_EMPTY_GROUP" and not isinstance(described, Failed):
            raise GroupNotEmptyError(_refusal_text(group_id, outcome, described))
        raise ClusterError(f"share group '{group_id}': the coordinator refused the {what}: {outcome}")
    failed = {key: error for key, error in outcome.items() if error is not None}
    if failed:
        raise ClusterError(f"share group '{group_id}': the coordinator refused the {what} of "
                           + "; ".join(f"{key}: {error}" for key, error in sorted(failed.items(), key=str)))
