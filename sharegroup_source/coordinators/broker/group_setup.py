"""What a broker-mode query sets on its share group before its member's first fetch.

The group's configs (``groupConfig.*``) are the broker's, shared by every member of the group: the
query sets those that differ from the group's and says so, old and new. ``startingOffsets`` is
Spark's option for where a new query starts; a share group starts once, where its
``share.auto.offset.reset`` says when it first fetches a partition, so the option sets that config
for a group that has never fetched and changes nothing for one that has (moving a group is a reset,
which Kafka allows only while the group is empty).

The query's join has asked whether the cluster answers at all (``metadata.reach``) before this; where the
options set the group's configs, the cluster is asked whether it has any: one that has none (the embedded broker
names no controller to send them to) fails the option at once, naming it, instead of waiting out a request
nobody answers.
"""

from __future__ import annotations

import logging
from typing import Any

from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.group_configs import (
    already_started,
    alter_group_configs,
    asked_by,
    read_group_configs,
)
from sharegroup_source.kafka.metadata import group_configs, has_controller, no_share_groups, reach
from sharegroup_source.kafka.share_protocol import KAFKA_TIMEOUT_S, ShareGroupProtocol
from sharegroup_source.kafka.share_requests import Failed
from sharegroup_source.options import SourceOptions
from state_store.group import SETTING_OPTIONS, GroupSettings

__all__ = ["SETTINGS_READ_TIMEOUT_S", "group_settings", "set_up_group"]

log = logging.getLogger(__name__)

#: The group's configs the member paces its batches by (the lock, the delivery limit, the in-flight window)
_PACED_BY = tuple(key for key in SETTING_OPTIONS if key != "share.auto.offset.reset")
_RESET = "share.auto.offset.reset"
#: How long a query's start waits for the group's configs: Apache Kafka answers in milliseconds, a broker
#: without group configurations (librdkafka's mock cluster) never does.
SETTINGS_READ_TIMEOUT_S = 2.0


def set_up_group(options: SourceOptions, first_run: bool) -> dict[str, str] | None:
    """Set the group's configs the options ask for (``startingOffsets`` on the query's ``first_run`` only, as Spark
    reads it); returns the group's configs as they are now where they were read (the options asked for something),
    else None. Refusals, an unreachable cluster and one without group configs raise the connector's one-line
    errors."""
    starting = options.starting_offsets if first_run else None
    if not options.group_configs and starting is None:
        return None
    config, group = options.client_config, options.group_id
    if not has_controller(reach(config)):
        option = "startingOffsets" if starting is not None else f"groupConfig.{next(iter(options.group_configs))}"
        raise ClusterError(f"option '{option}' sets the share group's configs, which the Kafka cluster at "
                           f"bootstrap.servers={options.bootstrap_servers} does not have (they need Apache Kafka "
                           "4.2+; the embedded broker has none): drop the option, or set the embedded broker's own "
                           "(sharegroup broker --auto-offset-reset, --lock-ms)")
    current = read_group_configs(config, group)
    wanted = dict(options.group_configs)
    if starting is not None:
        fetched = _fetched(options)
        if fetched:
            reset = current[_RESET].value if _RESET in current else None
            log.log(logging.INFO if reset == starting else logging.WARNING, "%s",
                    already_started(group, starting, fetched, f"--group {group}", options.bootstrap_servers,
                                    reset=reset))
        else:
            wanted["share.auto.offset.reset"] = starting
    for change in alter_group_configs(config, group, wanted, execute=True, current=current):
        log.warning("share group %s: %s, as the option %s asks (every member of the group follows it)", group,
                    change, asked_by(change.key, starting))
    return {**{key: str(config.value) for key, config in current.items() if config.value is not None},
            **{key: str(value) for key, value in wanted.items()}}


def _fetched(options: SourceOptions) -> list[tuple[str, int]]:
    """The subscribed share-partitions where the group has a start offset: where it has fetched."""
    with ShareGroupProtocol(options.client_config, KAFKA_TIMEOUT_S) as protocol:
        answer = protocol.start_offsets([options.group_id])[options.group_id]
    if isinstance(answer, Failed):
        if answer.code == "GROUP_ID_NOT_FOUND":  # a group nobody joined yet
            return []
        if answer.code == "UNSUPPORTED_VERSION":  # the cluster lists the share-group APIs and refuses them
            raise no_share_groups(options.bootstrap_servers, f"DescribeShareGroupOffsets: {answer}")
        raise ClusterError(f"share group '{options.group_id}': its start offsets could not be read for "
                           f"startingOffsets: {answer}")
    return sorted(key for key, offset in answer.items()
                  if key[0] in options.topics and offset.start_offset is not None and offset.start_offset >= 0)


def group_settings(options: SourceOptions, read: dict[str, str] | None) -> tuple[GroupSettings, bool]:
    """The lock duration, delivery-count limit, in-flight window and start the group gives its members: as ``read``
    where setting the group's configs read them, else as the cluster says (the group's value or the broker's default),
    else the option ``lockDurationMs`` and Kafka's defaults; and whether the cluster said any (a cluster without
    group configurations has no share-group admin API either: the embedded broker).

    The member keeps records acquired beyond a batch for the next batches only while their locks have room, and
    never gives back a record on its last delivery attempt: a guess longer than the group's lock would hand Spark
    records whose locks ran out, a guess above its limit would give records back to be archived unprocessed.
    """
    found = read if read is not None else group_configs(options.client_config, options.group_id,
                                                        (*_PACED_BY, _RESET), SETTINGS_READ_TIMEOUT_S)
    values: dict[str, Any] = {SETTING_OPTIONS[key]: int(found[key]) for key in _PACED_BY
                              if found.get(key, "").isdigit()}
    if found.get(_RESET) in ("earliest", "latest"):
        values["auto_offset_reset"] = found[_RESET]
    if "lock_duration_ms" not in values:
        log.info("share group %s: the cluster did not say its share.record.lock.duration.ms within %.0f s; the "
                 "query takes the option lockDurationMs=%d for it", options.group_id, SETTINGS_READ_TIMEOUT_S,
                 options.lock_duration_ms)
        values["lock_duration_ms"] = options.lock_duration_ms
    missing = [key for key in _PACED_BY if SETTING_OPTIONS[key] not in values]
    settings = GroupSettings(**values)
    if missing:
        log.info("share group %s: the cluster did not say %s; the query assumes Kafka's defaults (%s)",
                 options.group_id, ", ".join(missing),
                 ", ".join(f"{key}={getattr(settings, SETTING_OPTIONS[key])}" for key in missing))
    return settings, bool(found)
