"""What the connector reads of a cluster without joining a group: partition counts before a member joins, where
each partition's log starts and ends, a group's start.

A share consumer subscribed to a missing topic, or pointed at a dead address, waits
silently; users deserve one clear line instead, within a bounded time. A query's start asks first whether the
cluster answers at all (:func:`reach`), before any other request: a refused or unresolvable address is said at
once from librdkafka's error events (they come within milliseconds, while a request would wait out its timeout),
so a typo in ``kafka.bootstrap.servers`` is named as such whatever else the options ask of the cluster.

Log offsets are read one way, here (:class:`LogBounds`): the Delta coordinator's acquisitions, the driver's
AvailableNow end and its hint about an empty start, and the admin's describe and reset all ask ListOffsets on
an admin client. An acquisition locks offset ranges, not records, so it needs the log's bounds, never a fetch.
Both bounds of every partition are asked in two batched requests (one per bound), not one per partition, so a
many-partition group costs the same round trips as one.

A leader that moves (a broker killed or restarted) answers for a few seconds with errors such as
FENCED_LEADER_EPOCH; those are asked again, on a new admin client, for up to ``retry_s``, so an
acquisition waits out an election instead of failing the query (tests/test_cluster_faults.py kills
leaders mid-stream). The kept client would not do: it kept its stale leader epoch for a minute.
"""

from __future__ import annotations

import concurrent.futures
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource, OffsetSpec, ResourceType, TopicMetadata

from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.errors import Refusals, refusal
from sharegroup_source.kafka.settings import admin_config
from sharegroup_source.kafka.transient import TRANSIENT_BOUND_S, is_transient, retry_transient

#: How far past its own request timeout a ListOffsets answer is waited for before it counts as lost.
_ANSWER_GRACE_S = 5.0
#: How soon a topic whose leader is being elected is asked about again.
_ASK_AGAIN_S = 0.5
#: How long one metadata request may wait before the client's error events are looked at: a refused login
#: closes the connection within a second, while the request would wait out its whole timeout.
_LOOK_EVERY_S = 1.0
#: No broker answered: a wrong address or a cluster down fails at once, not after the transient bound.
_NO_ANSWER = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE}
#: How long a query's start waits for a cluster that accepts connections and never answers (a wrong port, a firewall
#: that drops, a frozen broker): a refused or unresolvable address fails at once. A broker answers in milliseconds.
REACH_TIMEOUT_S = 8.0
#: How often :func:`reach` looks at the client's error events while its metadata request waits.
_REACH_LOOK_S = 0.2
#: librdkafka's words for a failed connection start with the broker's name and end with the connection's state.
_BROKER_PREFIX = re.compile(r"^\S+/(?:bootstrap|\d+): ")
_STATE_SUFFIX = re.compile(r" \(after \d+ms in state \w+\)$")

__all__ = ["REACH_TIMEOUT_S", "Key", "LogBounds", "check_login", "describe_refusal", "group_configs", "group_start",
           "has_controller", "log_end_offsets", "log_offsets", "no_share_groups", "partition_counts", "reach"]

#: A topic-partition (a share-partition, to a share group): (topic, partition).
Key = tuple[str, int]


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
        refused = _refused(config, topic, found, needs)
        if refused is not None:
            raise refused
        if found is None or found.error is not None:
            known = ", ".join(sorted(t for t in metadata.topics if not t.startswith("__"))[:10]) or "none"
            raise ClusterError(f"topic {topic!r} does not exist at bootstrap.servers={servers} (topics: {known})")
        counts[topic] = len(found.partitions)
    return counts


def describe_refusal(config: Mapping[str, Any], topic: str, timeout_s: float = 15.0, needs: str = "",
                     ) -> ClusterError | None:
    """The connector's AuthorizationError if the principal may not DESCRIBE ``topic`` (``needs``: what the caller
    needs of the cluster, said with it); None if it may, or if the cluster lacks the topic. Asked by name: a
    cluster's list of all its topics leaves out those the principal may not DESCRIBE, so a topic missing from it
    may be refused rather than deleted, and only its own metadata (TOPIC_AUTHORIZATION_FAILED) tells which."""
    found = _topics(config, config.get("bootstrap.servers", ""), timeout_s, topic).topics.get(topic)
    return _refused(config, topic, found, needs)


def _refused(config: Mapping[str, Any], topic: str, found: TopicMetadata | None, needs: str) -> ClusterError | None:
    """The connector's AuthorizationError if ``found``, ``topic``'s metadata, says the principal may not DESCRIBE it."""
    if found is None or found.error is None:
        return None
    return refusal(found.error, config, "DESCRIBE", topics=[topic], needs=needs)


def check_login(config: Mapping[str, Any], timeout_s: float) -> None:
    """Connects as ``config`` says: a refused login or TLS handshake raises the connector's error for it at once,
    a cluster that does not answer within ``timeout_s`` a ClusterError; a login that works returns."""
    _topics(config, config.get("bootstrap.servers", ""), timeout_s)


def reach(config: Mapping[str, Any], timeout_s: float = REACH_TIMEOUT_S) -> ClusterMetadata:
    """The cluster's metadata, asked before anything else a query's start asks of it, so that what is wrong with the
    address is what the error names, whatever the options ask next (group configs, start offsets).

    No broker reachable (every bootstrap server refused the connection, or its name does not resolve) fails at
    once, in librdkafka's words; a server that accepts connections and never answers fails after ``timeout_s``; a
    refused login or TLS handshake raises the connector's error for it. A start is no time to wait for a cluster
    to come back: a running query's calls (:func:`partition_counts`) wait for it instead."""
    return _topics(config, config.get("bootstrap.servers", ""), timeout_s, look_s=_REACH_LOOK_S, down_fails=True)


def has_controller(metadata: ClusterMetadata) -> bool:
    """Whether ``metadata`` names a live controller: librdkafka sends DescribeConfigs and IncrementalAlterConfigs of a
    group there and waits for it until the request times out. Apache Kafka always names one of its brokers; the
    embedded broker (librdkafka's mock cluster) names none of its own, and has no group configs."""
    return metadata.controller_id in metadata.brokers


def no_share_groups(servers: str, reason: str) -> ClusterError:
    """The error for a cluster that answers, but not as a share group's coordinator (Kafka before 4.2, or one
    formatted with ``share.version=0``: its ApiVersions still list the share-group APIs, and it refuses them with
    UNSUPPORTED_VERSION); ``reason``: its own words. A Delta-coordinated group needs no share-group API."""
    return ClusterError(f"the Kafka cluster at bootstrap.servers={servers} does not support share groups ({reason}): "
                        "coordinator=broker needs Apache Kafka 4.2+ with share groups enabled (share.version 1+); "
                        "coordinator=delta serves any Kafka")


class _Events:
    """A client's ``error_cb`` for :func:`_topics`: its refusals, and whether every broker is down and why."""

    def __init__(self) -> None:
        self.refusals = Refusals()
        self.unreachable: KafkaError | None = None  # the first failed connection's words
        self.all_down = False

    def __call__(self, error: KafkaError) -> None:
        self.refusals(error)
        if error.code() in (KafkaError._TRANSPORT, KafkaError._RESOLVE) and self.unreachable is None:
            self.unreachable = error
        self.all_down = self.all_down or error.code() == KafkaError._ALL_BROKERS_DOWN

    def why_down(self) -> str:
        """Why no broker could be reached, in librdkafka's words without the broker's name and the state."""
        words = self.unreachable.str() if self.unreachable is not None else "every broker is down"
        return _STATE_SUFFIX.sub("", _BROKER_PREFIX.sub("", words))


def _topics(config: Mapping[str, Any], servers: str, timeout_s: float, topic: str | None = None, *,
            look_s: float = _LOOK_EVERY_S, down_fails: bool = False) -> ClusterMetadata:
    """The cluster's topics (or ``topic`` alone); a refused login or TLS handshake fails at once, not at the timeout,
    and so does an unreachable cluster with ``down_fails`` (every broker down, as librdkafka's events say)."""
    events = _Events()
    # an admin client given the consumer's group.id would print a CONFWARN: admin_config leaves it out. A server that
    # never answers must not end the connection's setup before the deadline says so (the same line every time).
    connect_s = timeout_s + 2 * look_s if down_fails else timeout_s
    admin = AdminClient(admin_config({**config, "error_cb": events}, connect_timeout_s=connect_s))
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                return admin.list_topics(topic=topic, timeout=min(look_s, max(deadline - time.monotonic(), 0.1)))
            except KafkaException as exc:
                error = exc.args[0]
                admin.poll(0)  # serves the error events: why no broker answered
                refused = refusal(events.refusals.first, config) if events.refusals.first is not None else None
                if refused is not None:
                    raise refused from None
                if is_transient(error) and error.code() not in _NO_ANSWER:
                    raise  # answered, with an error of a cluster in motion: the caller asks again
                if time.monotonic() >= deadline:
                    said = "no broker answered, though one accepted the connection" if down_fails else error.str()
                    raise ClusterError(f"cannot reach Kafka at bootstrap.servers={servers} within {timeout_s:.0f}s: "
                                       f"{said}") from None
                if down_fails and events.all_down:
                    raise ClusterError(f"cannot reach Kafka at bootstrap.servers={servers}: "
                                       f"{events.why_down()}") from None
    finally:
        admin.poll(0)  # its log lines wait in its queue: hand them to the connector's (collapsing) log


class LogBounds:
    """A kept admin client answering (log start, log end) for many partitions at once.

    The log end is the high watermark, or the last stable offset when ``isolation.level`` is
    read_committed: a member must not lock offsets the group could not deliver yet. ``needs``: what the
    caller needs of the cluster, said with an authorization error.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 15.0, retry_s: float = TRANSIENT_BOUND_S,
                 needs: str = ""):
        self._config = config
        self._committed = str(config.get("isolation.level", "read_uncommitted")) == "read_committed"
        self._admin_config = admin_config(config)
        self._admin = AdminClient(self._admin_config)
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._needs = needs
        self._servers = config.get("bootstrap.servers", "")

    def of(self, partitions: Mapping[str, int]) -> dict[Key, tuple[int, int]]:
        """(log start, log end) of every partition of ``partitions`` (topic -> partition count)."""
        keys = [(topic, p) for topic, count in partitions.items() for p in range(count)]
        def ask() -> dict[Key, tuple[int, int]]:
            try:
                starts = self._ask(keys, OffsetSpec.earliest())
                ends = self._ask(keys, OffsetSpec.latest())
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError._NOENT:
                    self._no_leaders(exc.args[0], partitions)
                raise
            return {key: (starts[key], ends[key]) for key in keys}

        return retry_transient(ask, "read log offsets", self._servers, self._retry_s, before_retry=self._new_client,
                               explain=lambda error: self._explain(error, partitions))

    def first_at(self, keys: Sequence[Key], timestamp_ms: int) -> dict[Key, int]:
        """The first offset at or after ``timestamp_ms`` (milliseconds since the epoch) of each partition of
        ``keys``; -1 where no record is that late. Asked once: a failure is the client's KafkaException."""
        return self._ask(keys, OffsetSpec.for_timestamp(timestamp_ms))

    def _explain(self, error: KafkaError, partitions: Mapping[str, int]) -> Exception | None:
        """What the topics' metadata says is wrong with them (a topic the principal may not DESCRIBE, or one the
        cluster lacks), else ``error`` as a refusal if it is one. ListOffsets names no topic: asked about refused or
        deleted topics alone it answers "No leaders found"; asked about a refused topic beside others,
        TOPIC_AUTHORIZATION_FAILED, which would name every topic asked about and grant none."""
        partition_counts(self._config, partitions, needs=self._needs)  # raises what is wrong with them
        return refusal(error, self._config, "DESCRIBE", topics=list(partitions), needs=self._needs)

    def _no_leaders(self, error: KafkaError, partitions: Mapping[str, int]) -> NoReturn:
        """ListOffsets answers "No leaders found" when none of the partitions it was asked about has a leader it
        knows: the topics are refused or gone, or their leaders are being elected (a broker killed; the cluster
        soak met it). The topics' metadata tells which: what is wrong with a topic is raised from there, and topics
        found whole mean an election, asked again as one (LEADER_NOT_AVAILABLE, transient)."""
        partition_counts(self._config, partitions, needs=self._needs)  # raises what is wrong with the topics
        raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE, f"ListOffsets: {error.str()} (a leader "
                                        f"being elected)"))

    def _new_client(self) -> None:
        """A fresh admin client, with fresh metadata: the kept one keeps asking the old leader epoch."""
        self._admin = AdminClient(self._admin_config)

    def _ask(self, keys: Sequence[Key], spec: OffsetSpec) -> dict[Key, int]:
        """One ListOffsets per leader. The answer is waited for a little past the request's own timeout, never
        for ever: a request librdkafka lost track of in a leader change would otherwise stall the acquisition,
        and with it the query, with no error. Such a wait counts as a timeout, asked again on a new client."""
        isolation = IsolationLevel.READ_COMMITTED if self._committed else IsolationLevel.READ_UNCOMMITTED
        futures = self._admin.list_offsets({TopicPartition(t, p): spec for t, p in keys}, isolation_level=isolation,
                                           request_timeout=self._timeout_s)
        deadline = time.monotonic() + self._timeout_s + _ANSWER_GRACE_S
        offsets = {}
        for tp, future in futures.items():
            try:
                offsets[tp.topic, tp.partition] = future.result(max(deadline - time.monotonic(), 0)).offset
            except concurrent.futures.TimeoutError:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"ListOffsets for {tp.topic}[{tp.partition}]: "
                                                f"no answer within {self._timeout_s + _ANSWER_GRACE_S:.0f}s")) from None
        return offsets


def log_end_offsets(config: Mapping[str, Any], partitions: Mapping[str, int], timeout_s: float = 15.0,
                    ) -> dict[Key, int]:
    """Log end of every partition of ``partitions`` (topic -> partition count), as :func:`log_offsets` reads it."""
    return {key: end for key, (_, end) in log_offsets(config, partitions, timeout_s).items()}


def log_offsets(config: Mapping[str, Any], partitions: Mapping[str, int], timeout_s: float = 15.0,
                ) -> dict[Key, tuple[int, int]]:
    """(log start, log end) of every partition of ``partitions`` (topic -> partition count), on a new
    :class:`LogBounds`; a leader that moves is waited for; any failure is a ClusterError."""
    servers = config.get("bootstrap.servers", "")
    try:
        bounds = LogBounds(config, timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        raise ClusterError(f"cannot read log offsets at bootstrap.servers={servers}: "
                           f"{error.str() if isinstance(error, KafkaError) else error}") from None
    return bounds.of(partitions)


def group_configs(config: Mapping[str, Any], group_id: str, keys: Iterable[str],
                  timeout_s: float = 3.0) -> dict[str, str]:
    """The share group's effective configs ``keys`` (the group's own value, else the broker's default), as the
    cluster says them, in one DescribeConfigs. Those the cluster does not say (a broker without group
    configurations, or no answer within ``timeout_s``) are missing: the caller falls back on what it assumes, and
    says so."""
    admin = AdminClient(admin_config(config))
    try:
        futures = admin.describe_configs([ConfigResource(ResourceType.GROUP, group_id)], request_timeout=timeout_s)
        entries = next(iter(futures.values())).result(timeout=timeout_s)
    except Exception:  # any failure means "cannot tell", which the caller says as such
        return {}
    return {key: str(entries[key].value) for key in keys if key in entries and entries[key].value is not None}


def group_start(config: Mapping[str, Any], group_id: str, timeout_s: float = 3.0) -> str | None:
    """The share group's ``share.auto.offset.reset`` (``latest``, Apache Kafka's default, or ``earliest``): where
    it starts in a partition it never fetched. None when the cluster does not say: only a hint for a message."""
    return group_configs(config, group_id, ("share.auto.offset.reset",), timeout_s).get("share.auto.offset.reset")
