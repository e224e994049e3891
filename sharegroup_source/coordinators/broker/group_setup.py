"""What a broker-mode query sets on its share group before its member's first fetch.

The group's configs (``groupConfig.*``) are the broker's, shared by every member of the group: the
query sets those that differ from the group's and says so, old and new. ``startingOffsets`` is
Spark's option for where a new query starts; a share group starts once, where its
``share.auto.offset.reset`` says when it first fetches a partition, so the option sets that config
for a group that has never fetched and changes nothing for one that has (moving a group is a reset,
which Kafka allows only while the group is empty).
"""

from __future__ import annotations

import logging

from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.group_configs import (
    already_started,
    alter_group_configs,
    asked_by,
    read_group_configs,
)
from sharegroup_source.kafka.metadata import group_config
from sharegroup_source.kafka.share_protocol import KAFKA_TIMEOUT_S, ShareGroupProtocol
from sharegroup_source.kafka.share_requests import Failed
from sharegroup_source.options import SourceOptions

__all__ = ["LOCK_READ_TIMEOUT_S", "lock_duration", "set_up_group"]

log = logging.getLogger(__name__)

_LOCK_DURATION = "share.record.lock.duration.ms"
#: How long a query's start waits for the group's lock duration: Apache Kafka answers in milliseconds, a broker
#: without group configurations (librdkafka's mock cluster) never does.
LOCK_READ_TIMEOUT_S = 2.0


def set_up_group(options: SourceOptions, first_run: bool) -> int | None:
    """Set the group's configs the options ask for (``startingOffsets`` on the query's ``first_run`` only, as Spark
    reads it); returns the group's lock duration where it was read (the options asked for something), else None.
    Refusals raise the connector's one-line errors."""
    starting = options.starting_offsets if first_run else None
    if not options.group_configs and starting is None:
        return None
    config, group = options.client_config, options.group_id
    current = read_group_configs(config, group)
    wanted = dict(options.group_configs)
    if starting is not None:
        fetched = _fetched(options)
        if fetched:
            log.warning("%s", already_started(group, starting, fetched, f"--group {group}", options.bootstrap_servers))
        else:
            wanted["share.auto.offset.reset"] = starting
    for change in alter_group_configs(config, group, wanted, execute=True, current=current):
        log.warning("share group %s: %s, as the option %s asks (every member of the group follows it)", group,
                    change, asked_by(change.key, starting))
    lock = wanted.get(_LOCK_DURATION) or (current[_LOCK_DURATION].value if _LOCK_DURATION in current else None)
    return int(lock) if lock else None


def _fetched(options: SourceOptions) -> list[tuple[str, int]]:
    """The subscribed share-partitions where the group has a start offset: where it has fetched."""
    with ShareGroupProtocol(options.client_config, KAFKA_TIMEOUT_S) as protocol:
        answer = protocol.start_offsets([options.group_id])[options.group_id]
    if isinstance(answer, Failed):
        if answer.code == "GROUP_ID_NOT_FOUND":  # a group nobody joined yet
            return []
        raise ClusterError(f"share group '{options.group_id}': its start offsets could not be read for "
                           f"startingOffsets: {answer}")
    return sorted(key for key, offset in answer.items()
                  if key[0] in options.topics and offset.start_offset is not None and offset.start_offset >= 0)


def lock_duration(options: SourceOptions, read: int | None) -> int:
    """How long the group locks what its members acquire: ``read`` where setting the group's configs read it, else
    as the cluster says (the group's value or the broker's default), else the option ``lockDurationMs``.

    The member keeps records acquired beyond a batch for the next batches only while their locks have room:
    a guess longer than the group's lock would hand Spark records whose locks ran out, and work is done twice.
    """
    if read is not None:
        return read
    found = group_config(options.client_config, options.group_id, _LOCK_DURATION, LOCK_READ_TIMEOUT_S)
    if found is not None and found.isdigit():
        return int(found)
    log.info("share group %s: the cluster did not say its %s within %.0f s; the query takes the option "
             "lockDurationMs=%d for it", options.group_id, _LOCK_DURATION, LOCK_READ_TIMEOUT_S,
             options.lock_duration_ms)
    return options.lock_duration_ms
