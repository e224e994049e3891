"""Cluster metadata checks made before a share consumer joins.

A share consumer subscribed to a missing topic, or pointed at a dead address, waits
silently; users deserve one clear line instead, within a bounded time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka_clients import admin_config, consumer_config

__all__ = ["log_end_offsets", "partition_counts"]


def partition_counts(config: Mapping[str, Any], topics: Iterable[str], timeout_s: float = 15.0) -> dict[str, int]:
    """Partition count of each topic; raises ClusterError naming what is wrong."""
    topics = list(topics)
    servers = config.get("bootstrap.servers", "")
    # an admin client given the consumer's group.id would print a CONFWARN: admin_config leaves it out
    admin = AdminClient(admin_config({**config, "socket.connection.setup.timeout.ms": int(timeout_s * 1000)}))
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as error:
        raise ClusterError(
            f"cannot reach Kafka at bootstrap.servers={servers} within {timeout_s:.0f}s: {error.args[0].str()}"
        ) from None
    finally:
        admin.poll(0)  # its log lines wait in its queue: hand them to the connector's (collapsing) log
    counts = {}
    for topic in topics:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            known = ", ".join(sorted(t for t in metadata.topics if not t.startswith("__"))[:10]) or "none"
            raise ClusterError(f"topic {topic!r} does not exist at bootstrap.servers={servers} (topics: {known})")
        counts[topic] = len(found.partitions)
    return counts


def log_end_offsets(config: Mapping[str, Any], partitions: Mapping[str, int], timeout_s: float = 15.0,
                    ) -> dict[tuple[str, int], int]:
    """High watermark of every partition of ``partitions`` (topic -> partition count)."""
    consumer = Consumer(consumer_config({**config, "group.id": "sharegroup-metadata", "enable.auto.commit": False}))
    try:
        return {(topic, p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
                for topic, count in partitions.items() for p in range(count)}
    except KafkaException as error:
        raise ClusterError(f"cannot read log end offsets: {error.args[0].str()}") from None
    finally:
        consumer.close()
