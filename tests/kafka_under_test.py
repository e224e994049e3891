"""The Kafka the tests talk to: the embedded broker, or a real 4.2+ cluster.

Set ``SHAREGROUP_TEST_BOOTSTRAP=host:port`` to run the suite against a real cluster with
share groups enabled. Tests that inject faults need the embedded broker and skip with a
printed reason otherwise.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from sharegroup_source.broker import EmbeddedBroker

BOOTSTRAP_ENV = "SHAREGROUP_TEST_BOOTSTRAP"


class KafkaUnderTest:
    """Topics, share-group settings and producing, the same on both kinds of cluster."""

    def __init__(self, embedded: EmbeddedBroker | None, bootstrap_servers: str):
        self.embedded = embedded
        self.bootstrap_servers = bootstrap_servers

    @property
    def is_embedded(self) -> bool:
        return self.embedded is not None

    def require_embedded(self, why: str) -> EmbeddedBroker:
        if self.embedded is None:
            pytest.skip(f"needs the embedded broker ({why}); {BOOTSTRAP_ENV} points at a real cluster")
        return self.embedded

    def config(self, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers, **extra}

    def new_topic(self, partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if self.embedded is not None:
            self.embedded.create_topic(name, partitions)
        else:
            futures = AdminClient(self.config()).create_topics([NewTopic(name, partitions, 1)])
            futures[name].result(30)
        return name

    def new_group(self, *, lock_duration_ms: int | None = None, delivery_attempt_limit: int | None = None) -> str:
        """A fresh share group reading from the earliest offset, with the given settings.

        The embedded broker's settings are cluster-wide, a real broker's are per group.
        """
        group = f"g-{uuid.uuid4().hex[:8]}"
        settings = {"share.auto.offset.reset": "earliest"}
        if lock_duration_ms is not None:
            settings["share.record.lock.duration.ms"] = str(lock_duration_ms)
        if delivery_attempt_limit is not None:
            settings["share.delivery.count.limit"] = str(delivery_attempt_limit)
        if self.embedded is not None:
            self.embedded.set_lock_duration(lock_duration_ms or 15_000)
            self.embedded.set_delivery_attempt_limit(delivery_attempt_limit or 5)
        else:
            entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()]
            resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=entries)
            for future in AdminClient(self.config()).incremental_alter_configs([resource]).values():
                future.result(30)
        return group

    def produce(self, topic: str, records: Iterable[tuple[int, bytes | None, bytes | None]]) -> int:
        """Produce (partition, key, value) records and wait for every delivery."""
        producer = Producer(self.config(**{"linger.ms": 5}))
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


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def kafka_under_test() -> tuple[KafkaUnderTest, EmbeddedBroker | None]:
    servers = os.environ.get(BOOTSTRAP_ENV)
    if servers:
        return KafkaUnderTest(None, servers), None
    broker = EmbeddedBroker(brokers=1).start()
    return KafkaUnderTest(broker, broker.bootstrap_servers), broker


@contextmanager
def kafka_session() -> Iterator[KafkaUnderTest]:
    """The Kafka under test for a whole run; an embedded broker is closed at the end."""
    under_test, broker = kafka_under_test()
    try:
        yield under_test
    finally:
        if broker is not None:
            broker.close()
