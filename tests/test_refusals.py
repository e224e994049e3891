"""Refusals on a long-lived notebook: months of retries must leave nothing behind, and a refusal is said at once.

A notebook that retries a refused login (or a cluster that is down) calls the admin again and again: each failed
bootstrap of its kafka-python client must end the IO thread it started, or the process gains one thread per try.
A principal that lost DESCRIBE on a topic must hear which topic and which ACL from its first log offset lookup,
never retried as a cluster in motion, and the admin must not call that topic deleted.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient

from sharegroup_source.admin import describe_groups
from sharegroup_source.errors import AuthorizationError, ClusterError
from sharegroup_source.kafka.client_log import KAFKA_LOGGER
from sharegroup_source.kafka.metadata import log_offsets
from sharegroup_source.kafka.share_protocol import ShareGroupProtocol
from sharegroup_testing.apache_kafka import create_topic, free_port
from sharegroup_testing.kafka_peers import wait_for
from sharegroup_testing.secured_kafka import SecuredKafka, make_tls
from tests.test_admin import _group_at

#: How many failed bootstraps a test makes: a leak of one thread each is plain to see, and the test stays short.
TRIES = 20
#: How long the threads of the last failed bootstraps may take to end (they are joined, so at once, bar a busy box).
THREADS_END_S = 10.0


def _threads() -> str:
    alive = threading.enumerate()
    return (f"{len(alive)} threads ({sum(t.daemon for t in alive)} daemon): "
            f"{sorted(t.name for t in alive)}")


def _leaves_no_thread(attempt: Callable[[], None]) -> None:
    """``attempt`` (a failed bootstrap) :data:`TRIES` times: afterwards the process runs no more threads than before,
    daemon or not."""
    before = len(threading.enumerate())
    started = _threads()
    for _ in range(TRIES):
        attempt()
    wait_for(lambda: len(threading.enumerate()) <= before, THREADS_END_S,
             f"the thread count back at {before} after {TRIES} failed bootstraps (before: {started})", state=_threads)


def _refused_describe(config: dict[str, str], words: str) -> Callable[[], None]:
    """One describe through the admin's public entry point whose bootstrap the cluster refuses, saying ``words``."""
    def attempt() -> None:
        [described] = describe_groups(groups=["orders"], kafka_config=config)
        assert described.error is not None and words in described.error, described.error

    return attempt


@pytest.mark.secured
def test_refused_logins_leave_no_thread_behind(secured_kafka: SecuredKafka) -> None:
    wrong = secured_kafka.client_config("alice", password="nope-Wrong-9")
    _leaves_no_thread(_refused_describe(wrong, "refused the login of user 'alice'"))


@pytest.mark.secured
def test_refused_tls_handshakes_leave_no_thread_behind(secured_kafka: SecuredKafka, tmp_path) -> None:
    other = make_tls(tmp_path / "other-ca")
    untrusted = secured_kafka.client_config("alice", **{"ssl.ca.location": str(other["ca"])})
    _leaves_no_thread(_refused_describe(untrusted, "presented a TLS certificate the client does not trust"))


def test_bootstraps_against_a_closed_port_leave_no_thread_behind() -> None:
    """Nobody listens: each call's bootstrap attempts time out (a short timeout keeps the test short)."""
    closed = {"bootstrap.servers": f"127.0.0.1:{free_port()}"}

    def attempt() -> None:
        with pytest.raises(ClusterError, match=r"^cannot reach Kafka at bootstrap\.servers="):
            ShareGroupProtocol(closed, timeout_s=0.5)

    _leaves_no_thread(attempt)


@pytest.mark.secured
def test_a_topic_the_principal_may_no_longer_describe_is_named_at_its_first_answer(secured_kafka, tmp_path,
                                                                                    caplog) -> None:
    """Asked about a topic it lost DESCRIBE on, alone or beside one it may describe, a principal hears which one and
    the ACL that grants it, from the first answer: no transient retry (its first step logs "asking again"). The
    admin's describe of a Delta group says the same of that topic's partitions (not "topic deleted"), and reads the
    other topic's log as before."""
    secured = secured_kafka
    kept, lost = (f"orders-{uuid.uuid4().hex[:6]}" for _ in range(2))
    for topic in (kept, lost):
        create_topic(secured.admin, topic, 2)
        secured.allow("bob", "TOPIC", topic, "DESCRIBE")
    location = tmp_path / "group"
    _group_at(location, f"workers-{lost}", 1, [(kept, 0), (lost, 0), (lost, 1)])
    bob = secured.client_config("bob")
    assert log_offsets(bob, {kept: 2, lost: 2}) == dict.fromkeys([(kept, 0), (kept, 1), (lost, 0), (lost, 1)], (0, 0))

    secured.revoke("bob", "TOPIC", lost)
    wait_for(lambda: lost not in AdminClient(bob).list_topics(timeout=10).topics, 30, "the revoke in force")
    expected = (f"User:bob is not authorized to DESCRIBE on TOPIC {lost} at bootstrap.servers="
                f"{secured.bootstrap_servers} (Broker: Topic authorization failed); kafka-acls --add "
                f"--allow-principal User:bob --operation DESCRIBE --topic {lost}")
    for asked in ({lost: 2}, {kept: 2, lost: 2}):
        with caplog.at_level(logging.INFO, logger=KAFKA_LOGGER), pytest.raises(AuthorizationError) as refused:
            log_offsets(bob, asked)
        assert str(refused.value) == expected, asked
    retried = [record.getMessage() for record in caplog.records if "asking again" in record.getMessage()]
    assert retried == [], "a refusal was retried as a cluster in motion"

    [described] = describe_groups([str(location)], kafka_config=bob)
    assert described.error is None, described.error
    assert {(p.topic, p.partition): (p.log_end_offset, p.error) for p in described.partitions} == {
        (kept, 0): (0, None), (lost, 0): (None, expected), (lost, 1): (None, expected)}
