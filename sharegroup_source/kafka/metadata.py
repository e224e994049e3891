"""Cluster metadata the driver asks for: partition counts before a share consumer joins, log offsets, a group's
configuration.

A share consumer subscribed to a missing topic, or pointed at a dead address, waits
silently; users deserve one clear line instead, within a bounded time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource, ResourceType

from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.clients import (
    TRANSIENT_BOUND_S,
    admin_config,
    consumer_config,
    is_transient,
    retry_transient,
)
from sharegroup_source.kafka.errors import Refusals, refusal

#: How soon a topic whose leader is being elected is asked about again.
_ASK_AGAIN_S = 0.5
#: How long one metadata request may wait before the client's error events are looked at: a refused login
#: closes the connection within a second, while the request would wait out its whole timeout.
_LOOK_EVERY_S = 1.0
#: No broker answered: a wrong address or a cluster down fails at once, not after the transient bound.
_NO_ANSWER = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE}

__all__ = ["check_login", "group_start", "log_end_offsets", "log_offsets", "partition_counts"]


def partition_counts(config: Mapping[str, Any], topics: Iterable[str], timeout_s: float = 15.0, needs: str = "",
                     ) -> dict[str, int]:
    """Partition count of each topic; raises ClusterError naming what is wrong (``needs``: what the caller needs
    of the cluster, said with an authorization error).

    A cluster that does not answer fails within ``timeout_s``; a topic whose metadata carries a transient error
    (its leader being elected after a broker died) is asked about again for up to ``TRANSIENT_BOUND_S``.
    """
    topics = list(topics)
    servers = config.get("bootstrap.servers", "")
    deadline = time.monotonic() + TRANSIENT_BOUND_S
    while True:
        try:
            metadata = _topics(config, servers, timeout_s)
            moving = {t: found.error for t in topics
                      if (found := metadata.topics.get(t)) is not None and found.error is not None
                      and is_transient(found.error)}
        except KafkaException as exc:  # a broker answered with an error of a cluster in motion
            metadata, moving = None, {"": exc.args[0]}
        if not moving and metadata is not None:
            break
        if time.monotonic() >= deadline:
            topic, error = next(iter(moving.items()))
            raise ClusterError(f"topic {topic or ', '.join(topics)!r} at bootstrap.servers={servers}: still "
                               f"{error.str()} after {TRANSIENT_BOUND_S:.0f}s")
        time.sleep(_ASK_AGAIN_S)
    counts = {}
    for topic in topics:
        found = metadata.topics.get(topic)
        if found is None:  # a cluster lists only the topics the principal may DESCRIBE: ask for this one by name
            found = _topics(config, servers, timeout_s, topic).topics.get(topic)
        if found is not None and found.error is not None:
            refused = refusal(found.error, config, "DESCRIBE", topics=[topic], needs=needs)
            if refused is not None:
                raise refused
        if found is None or found.error is not None:
            known = ", ".join(sorted(t for t in metadata.topics if not t.startswith("__"))[:10]) or "none"
            raise ClusterError(f"topic {topic!r} does not exist at bootstrap.servers={servers} (topics: {known})")
        counts[topic] = len(found.partitions)
    return counts


def check_login(config: Mapping[str, Any], timeout_s: float) -> None:
    """Connects as ``config`` says: a refused login or TLS handshake raises the connector's error for it at once,
    a cluster that does not answer within ``timeout_s`` a ClusterError; a login that works returns."""
    _topics(config, config.get("bootstrap.servers", ""), timeout_s)


def _topics(config: Mapping[str, Any], servers: str, timeout_s: float, topic: str | None = None) -> ClusterMetadata:
    """The cluster's topics (or ``topic`` alone); a refused login or TLS handshake fails at once, not at the timeout."""
    refusals = Refusals()
    # an admin client given the consumer's group.id would print a CONFWARN: admin_config leaves it out
    # allow.auto.create.topics: asked for by name, a missing topic would otherwise be created (an admin client is a
    # producer to librdkafka, whose default is true; the embedded broker creates it, as does a Kafka broker with
    # auto.create.topics.enable, its default)
    # librdkafka's least connection setup timeout is 1 s
    admin = AdminClient(admin_config({**config, "socket.connection.setup.timeout.ms": max(1000, int(timeout_s * 1000)),
                                      "allow.auto.create.topics": False, "error_cb": refusals}))
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                return admin.list_topics(topic=topic, timeout=min(_LOOK_EVERY_S, max(deadline - time.monotonic(), 0.1)))
            except KafkaException as exc:
                error = exc.args[0]
                admin.poll(0)  # serves the error events: why no broker answered
                refused = refusal(refusals.first, config) if refusals.first is not None else None
                if refused is not None:
                    raise refused from None
                if is_transient(error) and error.code() not in _NO_ANSWER:
                    raise  # answered, with an error of a cluster in motion: the caller asks again
                if time.monotonic() >= deadline:
                    raise ClusterError(f"cannot reach Kafka at bootstrap.servers={servers} within {timeout_s:.0f}s: "
                                       f"{error.str()}") from None
    finally:
        admin.poll(0)  # its log lines wait in its queue: hand them to the connector's (collapsing) log


def log_end_offsets(config: Mapping[str, Any], partitions: Mapping[str, int], timeout_s: float = 15.0,
                    ) -> dict[tuple[str, int], int]:
    """High watermark of every partition of ``partitions`` (topic -> partition count)."""
    return {key: end for key, (_, end) in log_offsets(config, partitions, timeout_s).items()}


def log_offsets(config: Mapping[str, Any], partitions: Mapping[str, int], timeout_s: float = 15.0,
                ) -> dict[tuple[str, int], tuple[int, int]]:
    """(log start, high watermark) of every partition of ``partitions`` (topic -> partition count); a leader that
    moves is waited for (``retry_transient``); any failure is a ClusterError."""
    servers = config.get("bootstrap.servers", "")
    try:
        consumer = Consumer(consumer_config({**config, "group.id": "sharegroup-metadata", "enable.auto.commit": False}))
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        raise ClusterError(f"cannot read log offsets at bootstrap.servers={servers}: "
                           f"{error.str() if isinstance(error, KafkaError) else error}") from None
    try:
        return retry_transient(
            lambda: {(topic, p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
                     for topic, count in partitions.items() for p in range(count)},
            "read log offsets", servers,
            explain=lambda error: refusal(error, config, "DESCRIBE", topics=list(partitions)))
    finally:
        consumer.close()


def group_start(config: Mapping[str, Any], group_id: str, timeout_s: float = 3.0) -> str | None:
    """The share group's ``share.auto.offset.reset`` (``latest``, Apache Kafka's default, or ``earliest``): where
    it starts in a partition it never fetched. None when the cluster does not say (a broker without group
    configurations, or no answer within ``timeout_s``): only a hint for a message, never worth a wait."""
    admin = AdminClient(admin_config(config))
    try:
        futures = admin.describe_configs([ConfigResource(ResourceType.GROUP, group_id)], request_timeout=timeout_s)
        entry = next(iter(futures.values())).result(timeout=timeout_s).get("share.auto.offset.reset")
    except Exception:  # any failure means "cannot tell", which the caller says as such
        return None
    return None if entry is None else str(entry.value)
