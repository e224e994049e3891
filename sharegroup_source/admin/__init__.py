"""Describe share groups, reset or delete their offsets, and change their settings, without ever joining one.

A group is named by its state or by its id:

- a ``groupLocation`` (kind ``delta``): a Delta-coordinated group, whole in its Delta tables;
- a broker-mode query's ``stateLocation`` (kind ``broker``): the broker's view of the query's group
  joined with what the query's ledger says it holds and settled;
- a group id (kind ``broker``), or every share group of a cluster: asked of its coordinator over
  Kafka's share-group admin protocol (:mod:`.protocol`).

What Kafka's own group admin learnt, applied to share groups:

- Never a member (KAFKA-3853, KIP-88): describing reads Delta tables and asks Kafka's admin APIs
  only. A share-group member is assigned partitions and takes records, so a describe that joined
  would take work away from the group it describes. A group with no running member is described
  like any other.
- Many at once (KIP-709, KIP-699): one call describes N groups with a request per coordinator,
  not per group; a group that cannot be read (missing, not a share group, not authorized, corrupt,
  its cluster unreachable) gets its own ``error`` and the others are still described.
- Only an empty group is reset (KIP-932): a member holding records would settle them against
  state that no longer exists.
- Settings are the group's (KIP-932's group configs), changed while it runs: a broker group's by
  IncrementalAlterConfigs on the GROUP resource, which the broker validates (its reasons are passed
  on); a delta group's in its settings row, which its members re-read at each heartbeat.

Dead letters, the records a group rejected, are listed by :func:`read_dead_letters` from the same locations.

Layout: :mod:`.model` (the answers), :mod:`.state_locations` and :mod:`.delta_groups` (Delta
state), :mod:`.dead_letters`, :mod:`.broker_groups` and :mod:`.protocol` (Kafka's coordinator), :mod:`.cluster` (log
offsets), :mod:`.tables` (text output). ``sharegroup`` (:mod:`sharegroup_source.cli`) is a thin
layer over the functions here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sharegroup_source.admin.broker_groups import (
    delete_broker_groups,
    delete_broker_offsets,
    describe_broker_groups,
    reset_broker_offsets,
)
from sharegroup_source.admin.cluster import parse_topic_spec
from sharegroup_source.admin.dead_letters import DeadLetter, read_dead_letters
from sharegroup_source.admin.delta_groups import configure_delta_group, delete_delta_offsets, reset_delta_offsets
from sharegroup_source.admin.model import (
    SESSION_TIMEOUT_MS,
    ConfigPlan,
    GroupDescription,
    MemberDescription,
    PartitionDescription,
    PartitionReset,
    ResetPlan,
    current_ms,
    to_arrow,
)
from sharegroup_source.admin.state_locations import DeltaGroup, QueryLedger, log_offsets, read_location
from sharegroup_source.admin.tables import config_table, dead_letters_table, describe_table, reset_table
from sharegroup_source.errors import GroupNotEmptyError
from sharegroup_source.kafka.group_configs import alter_group_configs
from sharegroup_source.kafka.settings import with_bootstrap

__all__ = ["SESSION_TIMEOUT_MS", "ConfigPlan", "DeadLetter", "GroupDescription", "GroupNotEmptyError",
           "MemberDescription", "PartitionDescription", "PartitionReset", "ResetPlan", "config_table",
           "configure_group", "dead_letters_table", "delete_groups", "delete_offsets", "describe_groups",
           "describe_table", "parse_topic_spec", "read_dead_letters", "reset_offsets", "reset_table",
           "to_arrow"]


def describe_groups(locations: Iterable[str] = (), *, groups: Iterable[str] = (), all_groups: bool = False,
                    bootstrap_servers: str | None = None, kafka_config: Mapping[str, Any] | None = None,
                    storage_options: dict[str, str] | None = None,
                    requests: Counter[str] | None = None) -> list[GroupDescription]:
    """Describe every location, then every group id (``groups``, and with ``all_groups`` every share group
    of the cluster); see the module's docstring.

    ``bootstrap_servers`` (or ``bootstrap.servers`` in ``kafka_config``, which holds any other client
    settings such as security ones) is the cluster the groups read; without it log offsets, lag and
    broker groups are not looked up. ``storage_options`` go to delta-rs for object stores.
    ``requests``, if given, counts the share-group admin requests sent, by API.
    """
    config = with_bootstrap(kafka_config, bootstrap_servers)
    now_ms = current_ms()
    found = [read_location(location, storage_options) for location in locations]
    deltas = [read for read in found if isinstance(read, DeltaGroup)]
    ledgers = [read for read in found if isinstance(read, QueryLedger)]
    offsets = log_offsets({key for group in deltas for key in group.share_partitions()}, config)
    ids = list(dict.fromkeys([*(ledger.group_id for ledger in ledgers), *groups]))
    if (ids or all_groups) and config is None:
        raise ValueError("broker groups are described by their coordinator: give bootstrap servers")
    broker = describe_broker_groups(ids, config, all_groups=all_groups, requests=requests) if config and (
        ids or all_groups) else []
    by_id = {d.group_id: d for d in broker if d.group_id is not None}
    described = [read.describe(by_id.get(read.group_id)) if isinstance(read, QueryLedger)
                 else read.describe(offsets, now_ms) if isinstance(read, DeltaGroup) else read for read in found]
    return described + [d for d in broker if d.group_id not in {ledger.group_id for ledger in ledgers}]


def reset_offsets(location: str | None = None, *, group: str | None = None, to: str | int | datetime,
                  topics: Iterable[str] | None = None, execute: bool = False, bootstrap_servers: str | None = None,
                  kafka_config: Mapping[str, Any] | None = None,
                  storage_options: dict[str, str] | None = None) -> ResetPlan:
    """Plan, and with ``execute`` apply, new start offsets for a delta group (its ``location``) or a broker
    group (its id, ``group``).

    ``to``: ``"earliest"``, ``"latest"``, an offset (kept within the log) or a datetime (the first
    record at or after it; naive means UTC). ``topics``: ``"T"`` (every partition of T) or
    ``"T:0,2"``; default every share-partition the group has. A delta group's reset discards the
    in-flight state and delivery counts in one compare-and-swap commit; a broker group's is an
    AlterShareGroupOffsets to its coordinator. Raises GroupNotEmptyError, naming the members, while
    any member holds records or is in the group (a dry run too, as Kafka's tool does).
    """
    config = with_bootstrap(kafka_config, bootstrap_servers)
    if config is None:
        raise ValueError("a reset looks the new offsets up in the log: give bootstrap servers")
    if (location is None) == (group is None):
        raise ValueError("reset a delta group by its location or a broker group by its id: one of them")
    if location is None:
        return reset_broker_offsets(group or "", to=to, topics=topics, execute=execute, config=config)
    return reset_delta_offsets(location, to=to, topics=topics, execute=execute, config=config,
                               storage_options=storage_options)


def delete_offsets(location: str | None = None, topic: str = "", *, group: str | None = None, execute: bool = False,
                   bootstrap_servers: str | None = None, kafka_config: Mapping[str, Any] | None = None,
                   storage_options: dict[str, str] | None = None) -> list[int]:
    """The partitions of ``topic`` whose state the group forgets, with ``execute`` (else a dry run): a delta
    group (``location``) in one commit, a broker group (``group``) by DeleteShareGroupOffsets. A member
    subscribing to the topic again starts at ``share.auto.offset.reset``. Refused as a reset is; a
    ValueError when the group has no state for ``topic``."""
    if (location is None) == (group is None):
        raise ValueError("delete offsets of a delta group by its location or a broker group by its id: one of them")
    if location is None:
        config = with_bootstrap(kafka_config, bootstrap_servers)
        if config is None:
            raise ValueError("a broker group's offsets are deleted by its coordinator: give bootstrap servers")
        return delete_broker_offsets(group or "", topic, execute=execute, config=config)
    return delete_delta_offsets(location, topic, execute=execute, storage_options=storage_options)


def delete_groups(groups: Iterable[str], *, execute: bool = False, bootstrap_servers: str | None = None,
                  kafka_config: Mapping[str, Any] | None = None) -> dict[str, str | None]:
    """Delete broker share groups (DeleteGroups, one request per coordinator) with ``execute``, else say what
    would happen: per group None (deleted, or would be) or why not (missing, has members, not authorized)."""
    config = with_bootstrap(kafka_config, bootstrap_servers)
    if config is None:
        raise ValueError("share groups are deleted by their coordinator: give bootstrap servers")
    return delete_broker_groups(list(dict.fromkeys(groups)), execute=execute, config=config)


def configure_group(location: str | None = None, *, group: str | None = None,
                    set: Mapping[str, str | int] | None = None,
                    delete: Iterable[str] = (), execute: bool = False, bootstrap_servers: str | None = None,
                    kafka_config: Mapping[str, Any] | None = None,
                    storage_options: dict[str, str] | None = None) -> ConfigPlan:
    """Plan, and with ``execute`` apply, new settings for a broker group (its id, ``group``) or a delta group
    (its ``location``): ``set`` by config name (``share.record.lock.duration.ms``...), ``delete`` back to the
    default.

    A broker group takes SHARE_GROUP_CONFIGS, each checked by the broker first (a dry run too), so a value
    it refuses is a GroupConfigError with its reason, and nothing changes unless every one passes; a
    principal without ALTER_CONFIGS (or DESCRIBE_CONFIGS) on the group gets an AuthorizationError. A delta
    group takes DELTA_GROUP_CONFIGS in one commit of its settings row. A key that is neither is an
    OptionError naming the closest one. Unlike a reset, a group with members may be configured: they
    adopt the new settings as they run.
    """
    wanted = {key: str(value) for key, value in (set or {}).items()}
    deleted = list(delete)
    if not (wanted or deleted):
        raise ValueError("configure what? give settings to set or delete")
    if (location is None) == (group is None):
        raise ValueError("configure a delta group by its location or a broker group by its id: one of them")
    if location is not None:
        return configure_delta_group(location, wanted, deleted, execute=execute, storage_options=storage_options)
    config = with_bootstrap(kafka_config, bootstrap_servers)
    if config is None:
        raise ValueError("a broker group's settings are its coordinator's: give bootstrap servers")
    changes = alter_group_configs(config, group or "", wanted, deleted, execute=execute)
    return ConfigPlan(group or "", None, "broker", tuple(changes), execute)
