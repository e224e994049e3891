"""The embedded broker's own surface: the CLI, topic errors, and node faults."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from sharegroup_source.coordinators.broker.share_client import ShareClient
from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.metadata import partition_counts
from sharegroup_testing.apache_kafka import free_port
from sharegroup_testing.embedded_broker import BrokerError, EmbeddedBroker
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for

pytestmark = pytest.mark.embedded  # the peers themselves: both run every test here

CLI = [sys.executable, "-m", "sharegroup_source.cli", "broker"]


def _start_cli(*args: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    servers_line = process.stdout.readline().strip()
    ready_line = process.stdout.readline().strip()
    assert servers_line.startswith("bootstrap.servers="), servers_line + process.stderr.read()
    assert ready_line.startswith("ready:"), ready_line
    return process, servers_line.split("=", 1)[1]


def test_cli_serves_topics_and_stops_on_sigterm():
    process, servers = _start_cli("--topic", "orders:4", "--topic", "audit", "--lock-ms", "5000")
    try:
        assert partition_counts({"bootstrap.servers": servers}, ["orders", "audit"], 10) == {"orders": 4, "audit": 1}
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert out.strip().endswith("stopped")
    assert "Traceback" not in err


def test_cli_port_forwards_bootstrap_and_refuses_a_busy_port():
    port = free_port()
    process, servers = _start_cli("--topic", "orders:2", "--port", str(port))
    try:
        assert servers.startswith(f"127.0.0.1:{port},")
        assert partition_counts({"bootstrap.servers": f"127.0.0.1:{port}"}, ["orders"], 10) == {"orders": 2}
        second = subprocess.run([*CLI, "--port", str(port)], capture_output=True, text=True, timeout=30)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=20)
    assert second.returncode == 2
    expected = f"sharegroup: error: --port {port}: address already in use (is another broker running?)"
    assert second.stderr.strip() == expected


@pytest.mark.parametrize("spec", ["orders:0", "orders:x", ":3"])
def test_cli_rejects_bad_topic_specs_in_one_line(spec):
    result = subprocess.run([*CLI, "--topic", spec], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and f"--topic {spec!r}" in errors[0], result.stderr
    assert "Traceback" not in result.stderr


def test_zero_partitions_and_unknown_api_are_refused():
    with EmbeddedBroker() as broker:
        with pytest.raises(BrokerError, match="topic 'orders': partition count must be at least 1, got 0"):
            broker.create_topic("orders", 0)
        with pytest.raises(ValueError, match="unknown Kafka API 'ShareFetchh'"):
            broker.fail_next("ShareFetchh", ["UNKNOWN"])
        with pytest.raises(ValueError, match="unknown Kafka error name 'NOT_AN_ERROR'"):
            broker.fail_next("ShareFetch", ["NOT_AN_ERROR"])
    with pytest.raises(BrokerError, match="not running"):
        _ = broker.bootstrap_servers


def test_a_node_down_refuses_clients_and_comes_back(kafka: KafkaUnderTest):
    broker = kafka.require_embedded("node faults")
    topic = kafka.new_topic(1)
    broker.set_down(1)
    try:
        with pytest.raises(ClusterError, match="cannot reach Kafka"):
            partition_counts(kafka.config(), [topic], timeout_s=2)
    finally:
        broker.set_up(1)
    assert partition_counts(kafka.config(), [topic], timeout_s=10) == {topic: 1}


def test_injected_share_fetch_errors_are_retried_not_lost(kafka: KafkaUnderTest):
    broker = kafka.require_embedded("fault injection")
    topic, group = kafka.new_topic(1), kafka.new_group()
    kafka.produce_numbered(topic, 10, 1)
    with ShareClient(kafka.config(**{"group.id": group}), [topic]) as client:
        broker.fail_next("ShareFetch", ["LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION"])
        records = wait_for(lambda: client.poll(0.5), 20, "records after two failed fetches")
    assert sorted(r.offset() for r in records) == list(range(10))
