"""One Kafka cluster as the admin reads it through confluent-kafka: Metadata and ListOffsets (through
:class:`~sharegroup_source.kafka.metadata.LogBounds`, the connector's one reader of log offsets), never a
group membership; and what a reset computes from them (the new start offsets, within the log)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from functools import cached_property
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from sharegroup_source.admin.model import Key, as_utc, iso_time
from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.metadata import LogBounds, describe_refusal
from sharegroup_source.kafka.settings import admin_config
from sharegroup_source.kafka.share_protocol import KAFKA_TIMEOUT_S

__all__ = ["Cluster", "describe_target", "new_offsets", "parse_topic_spec", "topic_keys"]


class Cluster:
    """One Kafka cluster through admin clients: Metadata and ListOffsets, nothing that joins a group."""

    def __init__(self, config: Mapping[str, Any]):
        self._config = config
        self._servers = config["bootstrap.servers"]
        self._admin = AdminClient(admin_config(config, connect_timeout_s=KAFKA_TIMEOUT_S))

    @cached_property
    def partitions(self) -> dict[str, int]:
        """Every topic's partition count, in one Metadata request."""
        try:
            metadata = self._admin.list_topics(timeout=KAFKA_TIMEOUT_S)
        except KafkaException as error:
            raise ClusterError(f"cannot reach Kafka at bootstrap.servers={self._servers} within "
                               f"{KAFKA_TIMEOUT_S:.0f}s: {error.args[0].str()}") from None
        return {name: len(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}

    def refusals(self, topics: Iterable[str]) -> dict[str, ClusterError]:
        """The AuthorizationError of each of ``topics`` the cluster does not list because the principal may not
        DESCRIBE it: unlisted, a refused topic looks like a deleted one."""
        unlisted = sorted(set(topics) - set(self.partitions))
        return {topic: refused for topic in unlisted
                if (refused := describe_refusal(self._config, topic, KAFKA_TIMEOUT_S)) is not None}

    def bounds(self, keys: set[Key]) -> dict[Key, tuple[int, int]]:
        """(log start, log end) of the ``keys`` the cluster has: one ListOffsets request per bound for all."""
        counts = self.partitions
        present = {topic: counts[topic] for topic, partition in keys if partition < counts.get(topic, 0)}
        bounds = LogBounds(self._config, KAFKA_TIMEOUT_S).of(present) if present else {}
        return {key: bounds[key] for key in keys if key in bounds}

    def offsets_at(self, keys: Sequence[Key], when: datetime) -> dict[Key, int]:
        """The first offset at or after ``when`` per partition; -1 where no record is that late."""
        try:
            return LogBounds(self._config, KAFKA_TIMEOUT_S).first_at(keys, int(as_utc(when).timestamp() * 1000))
        except KafkaException as error:
            raise ClusterError(f"cannot read offsets by time at bootstrap.servers={self._servers}: "
                               f"{error.args[0].str()}") from None



def topic_keys(current: Collection[Key], topics: Iterable[str] | None, cluster: Cluster) -> list[Key]:
    """The share-partitions a reset names (``topics``: ``T`` or ``T:0,2``), checked against the cluster; default
    every share-partition the group has (``current``)."""
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


def new_offsets(to: str | int | datetime, keys: Sequence[Key], cluster: Cluster) -> dict[Key, int]:
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


def describe_target(to: str | int | datetime) -> str:
    if isinstance(to, datetime):
        return iso_time(to)
    return f"offset {to}" if isinstance(to, int) else str(to)

