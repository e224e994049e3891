"""Shared fixtures: one Kafka per test session (embedded unless SHAREGROUP_TEST_BOOTSTRAP is set)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kafka_under_test import BOOTSTRAP_ENV, KafkaUnderTest, kafka_under_test


def pytest_report_header(config) -> str:
    import os

    target = os.environ.get(BOOTSTRAP_ENV)
    return f"kafka: {'real cluster at ' + target if target else 'embedded broker (librdkafka mock cluster)'}"


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaUnderTest]:
    under_test, broker = kafka_under_test()
    try:
        yield under_test
    finally:
        if broker is not None:
            broker.close()
