"""The Kafka clients are quiet by default: their log goes through ``sharegroup_source.kafka``, storms collapse,
no CONFWARN, the preview notice once at INFO; Java-client settings fail at load() naming the librdkafka way."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient

from sharegroup_source.coordinators.broker.share_client import ShareClient
from sharegroup_source.errors import ClusterError, OptionError
from sharegroup_source.kafka.client_log import KAFKA_LOGGER, ClientLog
from sharegroup_source.kafka.metadata import partition_counts
from sharegroup_source.kafka.settings import CONSUMER_ONLY, admin_config
from sharegroup_source.options import SourceOptions
from sharegroup_testing.apache_kafka import free_port
from sharegroup_testing.kafka_peers import KafkaUnderTest

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.group.id": "g", "subscribe": "t",
        "stateLocation": "/tmp/sharegroup-state"}
FAIL = "FAIL [rdkafka#consumer-1] [thrd:{b}/bootstrap]: {b}/bootstrap: Connect to ipv4#{b} failed: Connection refused"


def kafka_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == KAFKA_LOGGER]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_complaints_about_one_broker_collapse_to_one_line_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = ClientLog(interval_s=30, clock=clock)
    with caplog.at_level(logging.DEBUG, logger=KAFKA_LOGGER):
        for second in range(30):
            clock.now = second
            for _ in range(18):  # librdkafka's rate against a closed port: 19 a second
                log.log(logging.ERROR, FAIL.format(b="127.0.0.1:1"))
            log.log(logging.ERROR, "FAIL [rdkafka#consumer-1] [thrd:GroupCoordinator]: GroupCoordinator: "
                                   "127.0.0.1:1: Connect to ipv4#127.0.0.1:1 failed: Connection refused")
            log.log(logging.ERROR, FAIL.format(b="10.0.0.2:9092"))
        clock.now = 31
        log.log(logging.ERROR, FAIL.format(b="127.0.0.1:1"))
    lines = [r.getMessage() for r in kafka_records(caplog)]
    assert len(lines) == 3, lines
    assert lines[0].startswith("FAIL") and "127.0.0.1:1" in lines[0]
    assert "10.0.0.2:9092" in lines[1]
    assert lines[2].endswith("(569 more about 127.0.0.1:1 in the last 30s)")


def test_an_unreachable_bootstrap_server_prints_no_storm(capfd: pytest.CaptureFixture[str],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Before: about 19 raw librdkafka lines a second on stderr until the error; now one logged line per broker.

    Only lines about this server count: stderr is the process's, and a test-tooling client of another
    test's broker that was shut down may complain there meanwhile (seen once, beside a CPU burner)."""
    server = f"127.0.0.1:{free_port()}"
    with caplog.at_level(logging.INFO, logger=KAFKA_LOGGER), pytest.raises(ClusterError, match="cannot reach"):
        ShareClient({"bootstrap.servers": server, "group.id": "g"}, ["t"], metadata_timeout_s=4)
    raw = [line for line in capfd.readouterr().err.splitlines() if server in line]
    assert raw == [], f"{len(raw)} raw librdkafka lines about {server}, e.g. {raw[:2]}"
    fails = [r for r in kafka_records(caplog) if "Connection refused" in r.getMessage() and server in r.getMessage()]
    assert len(fails) <= 1, [r.getMessage() for r in fails]


def test_admin_clients_get_no_consumer_settings(kafka: KafkaUnderTest, capfd: pytest.CaptureFixture[str],
                                                caplog: pytest.LogCaptureFixture) -> None:
    topic = kafka.new_topic(partitions=2)
    config = kafka.config(**{"group.id": "g", "session.timeout.ms": "45000", "auto.offset.reset": "earliest"})
    with caplog.at_level(logging.DEBUG, logger=KAFKA_LOGGER):
        assert partition_counts(config, [topic]) == {topic: 2}
    assert "CONFWARN" not in capfd.readouterr().err
    assert not [r for r in kafka_records(caplog) if "CONFWARN" in r.getMessage()]


def test_the_consumer_only_list_is_librdkafkas(caplog: pytest.LogCaptureFixture) -> None:
    """Each setting left out of admin clients is one librdkafka itself calls a consumer property."""
    warned: list[str] = []

    class Collect:
        def log(self, level: int, msg: str, *args: object) -> None:
            warned.append(msg % args if args else msg)

    values = {"isolation.level": "read_committed", "auto.offset.reset": "earliest", "group.protocol": "classic",
              "partition.assignment.strategy": "range", "offset.store.method": "broker",
              "share.acknowledgement.mode": "explicit", "group.protocol.type": "consumer",
              "group.remote.assignor": "uniform", "group.instance.id": "i", "group.id": "g"}
    boolean = {"enable.auto.commit", "auto.commit.enable", "enable.auto.offset.store", "enable.partition.eof",
               "check.crcs"}
    config = {key: values.get(key, "true" if key in boolean else "1000") for key in CONSUMER_ONLY
              # legacy settings and an alias (librdkafka names fetch.message.max.bytes instead)
              if key not in {"offset.store.path", "offset.store.sync.interval.ms", "offset.store.method",
                             "max.partition.fetch.bytes"}}
    producer = Producer({**config, "logger": Collect()})
    producer.poll(0)
    named = {line.split("Configuration property ")[1].split(" ")[0] for line in warned
             if "is a consumer property" in line}
    assert named == set(config)
    admin = AdminClient({**admin_config(config), "logger": Collect()})
    warned.clear()
    admin.poll(0)
    assert not [line for line in warned if "is a consumer property" in line]


def test_the_preview_notice_is_shown_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    log = ClientLog()
    with caplog.at_level(logging.DEBUG, logger=KAFKA_LOGGER):
        for _ in range(2):
            consumer = ShareConsumer({"group.id": "g", "logger": log})
            consumer.subscribe(["t"])
            consumer.poll(0.1)
            consumer.close()
    notices = [r for r in kafka_records(caplog) if "Preview" in r.getMessage()]
    assert [r.levelno for r in notices] == [logging.INFO]


@pytest.mark.parametrize(("key", "value", "instead"), [
    ("sasl.jaas.config", 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
                         'password="hunter2-secret";', "kafka.sasl.username and kafka.sasl.password"),
    ("ssl.truststore.location", "/etc/kafka/truststore.jks", "kafka.ssl.ca.location"),
    ("ssl.truststore.password", "hunter2-secret", "kafka.ssl.ca.location"),
    ("ssl.keystore.location", "/etc/kafka/keystore.jks", "kafka.ssl.certificate.location"),
    ("ssl.keystore.type", "JKS", "kafka.ssl.keystore.location"),
])
def test_java_client_settings_fail_at_load_naming_the_librdkafka_way(key: str, value: str, instead: str) -> None:
    with pytest.raises(OptionError) as refused:
        SourceOptions.parse({**BASE, f"kafka.{key}": value, "kafka.security.protocol": "SASL_SSL"})
    message = str(refused.value)
    assert message.startswith(f"option 'kafka.{key}' is a Java Kafka client setting")
    assert instead in message and "hunter2" not in message


def test_kafka_debug_turns_the_client_debug_log_on() -> None:
    """The clients run in Spark's driver-side worker, where nobody configures logging: ``kafka.debug`` is the
    switch. A fresh process, as that worker is: no logging configured."""
    script = textwrap.dedent(f"""
        from confluent_kafka import Consumer
        from sharegroup_source.kafka.settings import consumer_config
        for debug in ("", "broker"):
            config = {{"bootstrap.servers": "127.0.0.1:{free_port()}", "group.id": "g", "debug": debug}}
            consumer = Consumer(consumer_config(config) if debug else consumer_config(
                {{k: v for k, v in config.items() if k != "debug"}}))
            consumer.poll(1.0)
            consumer.close()
            print("--", flush=True)
            import sys; print("--", file=sys.stderr, flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    quiet, debug, _ = done.stderr.split("--\n")
    assert "DEBUG" not in quiet and quiet.count("Connection refused") <= 1, quiet
    assert f"DEBUG {KAFKA_LOGGER}: " in debug, debug[-2000:]
