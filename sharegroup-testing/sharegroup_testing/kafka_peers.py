"""The Kafka peers the tests, the bench and the soak talk to: the embedded broker and Apache
Kafka's own broker, behind one interface.

The ``apache`` peer is a single-node KRaft broker started from the jars of ``jvm/pom.xml``;
``SHAREGROUP_TEST_BOOTSTRAP=host:port`` points it at an existing Kafka 4.2+ cluster with share
groups enabled instead. The ``cluster`` peer is three such brokers with replicated topics
(:mod:`.kafka_cluster`), for the tests and the soak that kill brokers. Tests that need the
embedded broker's fault hooks skip on the other peers with a printed reason; only they ask, so
pytest is imported only when a skip is due.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from sharegroup_testing.apache_kafka import ApacheKafka, create_topic, set_group_configs
from sharegroup_testing.embedded_broker import EmbeddedBroker
from sharegroup_testing.kafka_cluster import KafkaCluster

__all__ = ["BOOTSTRAP_ENV", "EMBEDDED_SESSION_TIMEOUT_MS", "PEERS", "KafkaUnderTest", "kafka_session", "wait_for"]

BOOTSTRAP_ENV = "SHAREGROUP_TEST_BOOTSTRAP"
PEERS = ("embedded", "apache")
#: librdkafka's mock cluster default share-group session timeout; tests that shorten it get it back.
EMBEDDED_SESSION_TIMEOUT_MS = 45_000


def _skip(reason: str) -> NoReturn:
    """Skip the running test: the peer lacks what it needs (pytest is the test suite's, not the package's)."""
    import pytest

    pytest.skip(reason)


class KafkaUnderTest:
    """Topics, share-group settings and producing, the same on both kinds of cluster."""

    def __init__(self, embedded: EmbeddedBroker | None, bootstrap_servers: str, apache: ApacheKafka | None = None,
                 cluster: KafkaCluster | None = None):
        self.embedded = embedded
        self.apache = apache
        self.cluster = cluster
        #: topics get three replicas on the cluster, as in production
        self.replication_factor = 3 if cluster is not None else 1
        self.bootstrap_servers = bootstrap_servers
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None

    def __enter__(self) -> KafkaUnderTest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Let go of the run's clients before the broker stops: a client left behind complains on stderr
        about its broker's closed port until the process ends."""
        if self._producer is not None:
            self._producer.flush(5)
        self._producer = self._admin = None  # the last reference: librdkafka destroys them now

    @property
    def admin(self) -> AdminClient:
        """One admin client for the run: a dropped one cancels its pending requests."""
        if self._admin is None:
            self._admin = AdminClient(self.config())
        return self._admin

    @property
    def is_embedded(self) -> bool:
        return self.embedded is not None

    @property
    def kind(self) -> str:
        return "embedded" if self.embedded is not None else "cluster" if self.cluster is not None else "apache"

    def describe(self) -> str:
        """Where to look when a test fails: the peer and, for Apache Kafka, its log file."""
        if self.cluster is not None:
            return self.cluster.describe()
        if self.apache is not None:
            return f"Apache Kafka at {self.bootstrap_servers} (log: {self.apache.log_path})"
        if self.embedded is None:
            return f"Kafka cluster at {self.bootstrap_servers} ({BOOTSTRAP_ENV})"
        return f"embedded broker at {self.bootstrap_servers}"

    def require_embedded(self, why: str) -> EmbeddedBroker:
        if self.embedded is None:
            _skip(f"needs the embedded broker's fault hooks ({why}); this run is on {self.describe()}")
        return self.embedded

    def require_outages(self) -> None:
        """Skip (with the reason) on a cluster the suite did not start and so cannot take down."""
        if self.apache is None:
            self.require_embedded("takes the broker down")

    def broker_down(self) -> None:
        """Stage a broker outage: the embedded node refuses connections; Apache Kafka's JVM is
        frozen (SIGSTOP), so open connections hang as they do behind a dead host."""
        self.require_outages()
        if self.apache is not None:
            self.apache.pause()
        else:
            self.require_embedded("takes the broker down").set_down()

    def broker_up(self) -> None:
        self.require_outages()
        if self.apache is not None:
            self.apache.resume()
        else:
            self.require_embedded("brings the broker back").set_up()

    def require_apache(self, why: str) -> ApacheKafka:
        if self.apache is None:
            _skip(f"needs Apache Kafka's broker and tools ({why}); this run is on {self.describe()}")
        return self.apache

    def config(self, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers, **extra}

    def new_topic(self, partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if self.embedded is not None:
            self.embedded.create_topic(name, partitions)
        else:
            create_topic(self.admin, name, partitions, replication_factor=self.replication_factor)
        return name

    def new_group(self, *, lock_duration_ms: int | None = None, delivery_attempt_limit: int | None = None,
                  session_timeout_ms: int | None = None) -> str:
        """A fresh share group reading from the earliest offset, with the given settings.

        The embedded broker's settings are cluster-wide (a caller that sets the session timeout
        restores it), a real broker's are per group.
        """
        group = f"g-{uuid.uuid4().hex[:8]}"
        settings = {"share.auto.offset.reset": "earliest"}
        if lock_duration_ms is not None:
            settings["share.record.lock.duration.ms"] = str(lock_duration_ms)
        if delivery_attempt_limit is not None:
            settings["share.delivery.count.limit"] = str(delivery_attempt_limit)
        if session_timeout_ms is not None:
            settings["share.session.timeout.ms"] = str(session_timeout_ms)
        if self.embedded is not None:
            if session_timeout_ms is not None:
                self.embedded.set_session_timeout(session_timeout_ms)
            self.embedded.set_lock_duration(lock_duration_ms or 15_000)
            self.embedded.set_delivery_attempt_limit(delivery_attempt_limit or 5)
        else:
            set_group_configs(self.admin, group, settings)
        return group

    @property
    def producer(self) -> Producer:
        """One producer for the run: on the embedded broker a client connection that closes
        drops every share session on the node, so a producer per call (closed whenever the
        garbage collector gets to it) would fail some later test's acknowledgements. Idempotent, so a
        batch retried under load (a busy broker, a new topic's leader not known yet) keeps its
        partition's order: tests read offsets as the order they produced."""
        if self._producer is None:
            self._producer = Producer(self.config(**{"linger.ms": 5, "log.connection.close": False,
                                                     "enable.idempotence": True}))
        return self._producer

    def produce(self, topic: str, records: Iterable[tuple[int, bytes | None, bytes | None]]) -> int:
        """Produce (partition, key, value) records and wait for every delivery."""
        producer = self.producer
        failures: list[str] = []

        def delivered(error, _message) -> None:
            if error is not None:
                failures.append(str(error))

        count = 0
        for partition, key, value in records:
            producer.produce(topic, key=key, value=value, partition=partition, on_delivery=delivered)
            count += 1
            if count % 10_000 == 0:
                producer.poll(0)
        remaining = producer.flush(30)
        assert remaining == 0 and not failures, f"produce failed: {remaining} undelivered, {failures[:3]}"
        return count

    def produce_numbered(self, topic: str, count: int, partitions: int, first: int = 0) -> set[tuple[int, bytes]]:
        """Records ``first..first+count-1`` spread round-robin; returns the set of (partition, value)."""
        records = [(i % partitions, str(i).encode(), f"record-{i}".encode()) for i in range(first, first + count)]
        self.produce(topic, records)
        return {(partition, value) for partition, _, value in records}


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05,
             state: Callable[[], Any] | None = None) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` (and ``state()``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = f"; last seen: {state()}" if state is not None else ""
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}{seen}")
        time.sleep(interval_s)


@contextmanager
def kafka_session(peer: str = "embedded") -> Iterator[KafkaUnderTest]:
    """One Kafka peer for a whole run, stopped at the end (no JVM is left behind).

    ``peer`` is one of :data:`PEERS`, or ``cluster``: three Apache Kafka brokers (see :mod:`.kafka_cluster`).
    """
    if peer == "cluster":
        with KafkaCluster() as cluster, KafkaUnderTest(None, cluster.bootstrap_servers, cluster=cluster) as kafka:
            yield kafka
    elif peer == "embedded":
        with EmbeddedBroker(brokers=1) as broker, KafkaUnderTest(broker, broker.bootstrap_servers) as kafka:
            yield kafka
    elif peer != "apache":
        raise ValueError(f"unknown Kafka peer {peer!r}: expected one of {PEERS} or cluster")
    elif os.environ.get(BOOTSTRAP_ENV):
        with KafkaUnderTest(None, os.environ[BOOTSTRAP_ENV]) as kafka:
            yield kafka
    else:
        with ApacheKafka() as apache, KafkaUnderTest(None, apache.bootstrap_servers, apache) as kafka:
            yield kafka
