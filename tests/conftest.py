"""Shared fixtures: one Kafka per test session (embedded unless SHAREGROUP_TEST_BOOTSTRAP is set)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sharegroup_source.broker import API_KEYS
from tests.kafka_under_test import BOOTSTRAP_ENV, KafkaUnderTest, kafka_session


def pytest_report_header(config) -> str:
    import os

    target = os.environ.get(BOOTSTRAP_ENV)
    return f"kafka: {'real cluster at ' + target if target else 'embedded broker (librdkafka mock cluster)'}"


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaUnderTest]:
    with kafka_session() as under_test:
        yield under_test


@pytest.fixture(autouse=True)
def _faults_end_with_the_test(request):
    """Injected errors a test left unconsumed, or a node left down, must not leak into the next test."""
    yield
    if "kafka" in request.fixturenames:
        broker = request.getfixturevalue("kafka").embedded
        if broker is not None:
            for api in API_KEYS:
                broker.clear_failures(api)
            broker.set_up(-1)


@pytest.fixture(scope="session")
def spark():
    from tests.spark_session import local_spark

    session = local_spark()
    try:
        yield session
    finally:
        session.stop()
