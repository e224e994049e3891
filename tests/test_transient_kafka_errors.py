"""Transient Kafka errors are asked again within a bound; past it, one clear error names bootstrap.servers.

The cluster fault tests (tests/test_cluster_faults.py) found coordinator=delta failing at every
leader change with FENCED_LEADER_EPOCH ("Leader epoch is older than broker epoch") from its log
offset lookup; these pin the retry's two ends down without a cluster: an election's errors are
waited out, and a cluster that stays away fails with one error, not a hang.
"""

from __future__ import annotations

import concurrent.futures
import re
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.metadata import LogBounds, partition_counts
from sharegroup_source.kafka.transient import TRANSIENT_BOUND_S, is_transient, retry_transient


def test_an_election_s_errors_are_waited_out_on_a_fresh_client():
    answers = [KafkaError.FENCED_LEADER_EPOCH, KafkaError.NOT_LEADER_FOR_PARTITION, None]
    renewed: list[int] = []

    def call() -> str:
        code = answers.pop(0)
        if code is not None:
            raise KafkaException(KafkaError(code))
        return "bounds"

    assert retry_transient(call, "read log offsets", "h:9092", bound_s=10,
                           before_retry=lambda: renewed.append(1)) == "bounds"
    assert len(renewed) == 2, "a client with a stale leader epoch must be replaced before each new attempt"


def test_a_wrong_request_fails_at_once_naming_the_servers():
    def call() -> None:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    started = time.monotonic()
    with pytest.raises(ClusterError, match=r"^cannot read log offsets at bootstrap.servers=h:9092: "):
        retry_transient(call, "read log offsets", "h:9092", bound_s=30)
    assert not is_transient(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    print(f"failed after {time.monotonic() - started:.2f} s")


def test_a_cluster_that_stays_away_is_one_error_after_the_bound():
    """A real client against a port nobody listens on: transport errors until the bound, then one ClusterError."""
    bounds = LogBounds({"bootstrap.servers": "127.0.0.1:1"}, timeout_s=1, retry_s=3)
    started = time.monotonic()
    with pytest.raises(ClusterError, match=r"^cannot read log offsets at bootstrap.servers=127.0.0.1:1: "
                                           r"still failing after 3s \(\d+ attempts\)"):
        bounds.of({"orders": 1})
    print(f"gave up after {time.monotonic() - started:.1f} s")


def test_a_list_offsets_answer_that_never_comes_is_a_timeout_asked_again_on_a_new_client(monkeypatch):
    """librdkafka has lost ListOffsets requests in leader changes (confluentinc/librdkafka#4620): a future that
    never completes must not stall the acquisition for ever. Each attempt waits past the request timeout, then
    counts as a timeout on a new client, and the bound ends it with one ClusterError."""
    import sharegroup_source.kafka.metadata as metadata

    class NeverAnswers:
        def list_offsets(self, requests, **_: object) -> dict:
            return {tp: concurrent.futures.Future() for tp in requests}

    clients: list[NeverAnswers] = []
    monkeypatch.setattr(metadata, "_ANSWER_GRACE_S", 0.1)
    monkeypatch.setattr(metadata, "AdminClient", lambda config: clients.append(NeverAnswers()) or clients[-1])
    bounds = LogBounds({"bootstrap.servers": "h:9092"}, timeout_s=0.2, retry_s=1)
    with pytest.raises(ClusterError, match=r"^cannot read log offsets at bootstrap.servers=h:9092: still failing "
                                           r"after 1s \(\d+ attempts\): .*ListOffsets for orders\[0\]: no answer"):
        bounds.of({"orders": 1})
    assert len(clients) >= 3, "each attempt after a lost answer must be on a new client"


@pytest.mark.embedded
def test_a_member_joining_during_an_election_waits_for_the_topics_metadata(kafka):
    """A Metadata request answered with LEADER_NOT_AVAILABLE (a leader being elected) is asked again: the
    partition counts come back, not 'cannot reach Kafka'; a wrong address still fails at once."""
    if not kafka.is_embedded:
        pytest.skip("needs the embedded broker's fault hooks to fail Metadata requests; the cluster fault tests "
                    "kill leaders on Apache Kafka")
    topic = kafka.new_topic(3)
    kafka.embedded.fail_next("Metadata", ["LEADER_NOT_AVAILABLE"] * 3)
    assert partition_counts(kafka.config(), [topic]) == {topic: 3}
    started = time.monotonic()
    with pytest.raises(ClusterError, match=re.escape("cannot reach Kafka at bootstrap.servers=127.0.0.1:1 within 2s")):
        partition_counts({"bootstrap.servers": "127.0.0.1:1"}, [topic], timeout_s=2)
    assert time.monotonic() - started < TRANSIENT_BOUND_S, "no broker answered: that is not an error to wait out"


@pytest.mark.embedded
def test_log_offsets_of_partitions_without_a_leader_wait_for_the_election(kafka):
    """ListOffsets about partitions none of which has a leader answers "No leaders found" (_NOENT, not retriable):
    the cluster soak's delta query failed on it while a killed broker's leaderships moved. An election is waited
    out: the bounds come back once a leader is elected; a topic that is gone still fails at once, naming it."""
    if not kafka.is_embedded:
        pytest.skip("needs the embedded broker's fault hook to leave a partition without a leader; the cluster fault "
                    "tests kill leaders on Apache Kafka")
    topic = kafka.new_topic(1)
    kafka.produce_numbered(topic, 3, 1)
    kafka.embedded.set_leader(topic, 0, -1)
    elected = threading.Timer(2.0, kafka.embedded.set_leader, (topic, 0, kafka.embedded.broker_ids[0]))
    elected.start()
    try:
        assert LogBounds(kafka.config(), timeout_s=5, retry_s=30).of({topic: 1}) == {(topic, 0): (0, 3)}
    finally:
        elected.join()
    assert not elected.is_alive()
    started = time.monotonic()
    with pytest.raises(ClusterError, match=r"topic 'gone' does not exist"):
        LogBounds(kafka.config(), timeout_s=5, retry_s=30).of({"gone": 1})
    assert time.monotonic() - started < 15, "a missing topic is not an election to wait out"
