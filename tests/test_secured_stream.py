"""Queries and workers on a broker that authenticates (SASL_SSL, SCRAM-SHA-512) and authorizes (ACLs, none: denied).

Both coordinators and a ``DeltaShareConsumer`` read every record once with the ACLs they need and
no more; each refusal fails the query within 30 s as one line of the connector's own error type,
naming what is wrong and no secret; an ACL revoked under a running query fails it, and once the
ACL is back a restart brings every record to the sink exactly once.
"""

from __future__ import annotations

import collections
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable
from pyspark.errors import StreamingQueryException

from sharegroup_source import DeltaShareConsumer
from sharegroup_source.kafka.group_configs import read_group_configs
from sharegroup_testing.apache_kafka import create_topic, set_group_configs
from sharegroup_testing.kafka_peers import wait_for
from sharegroup_testing.secured_kafka import SecuredKafka, make_tls
from tests.demo_runs import interrupt_demo

pytestmark = [pytest.mark.secured, pytest.mark.spark]


#: How soon a refused query must fail: the issue's bound, from the query's start.
REFUSED_WITHIN_S = 30.0


class SecuredQuery:
    """One topic, one group and the folders of a query on the secured broker, as ``user``."""

    def __init__(self, secured: SecuredKafka, root: Path, user: str, partitions: int = 2):
        self.secured, self.root, self.user = secured, root, user
        self.topic = f"orders-{uuid.uuid4().hex[:6]}"
        self.group = f"workers-{self.topic}"
        create_topic(secured.admin, self.topic, partitions)
        set_group_configs(secured.admin, self.group, {"share.auto.offset.reset": "earliest",
                                                      "share.record.lock.duration.ms": "15000"})
        self.produced: set[bytes] = set()

    def produce(self, count: int) -> set[bytes]:
        """``count`` new records, through the internal listener (the test's own, not the user's)."""
        values = {f"{self.topic}-{len(self.produced) + n}".encode() for n in range(count)}
        producer = Producer({"bootstrap.servers": self.secured.internal_servers})
        for n, value in enumerate(sorted(values)):
            producer.produce(self.topic, value=value, partition=n % 2)
        assert producer.flush(30) == 0
        self.produced |= values
        return values

    def options(self, coordinator: str = "broker", **config: Any) -> dict[str, str]:
        kafka = self.secured.client_config(self.user, **config)
        options = {f"kafka.{key}": str(value) for key, value in kafka.items()}
        options.update({"kafka.group.id": self.group, "subscribe": self.topic, "coordinator": coordinator,
                        "stateLocation": str(self.root / "state"), "pollTimeoutMs": "500"})
        if coordinator == "delta":
            options.update({"groupLocation": str(self.root / "group"), "share.auto.offset.reset": "earliest"})
        return options

    def start(self, spark, available_now: bool = True, **options: str):
        sink = self.root / "sink"

        def write(frame, batch_id: int) -> None:  # one folder per batch id: a rewritten batch replaces itself
            frame.select("value").write.mode("overwrite").parquet(str(sink / f"batch={batch_id}"))

        writer = (spark.readStream.format("sharegroup").options(**options).load().writeStream.foreachBatch(write)
                  .option("checkpointLocation", str(self.root / "checkpoint")))
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="1 second")
        return writer.start()

    def sink_values(self) -> list[bytes]:
        """Every value in the batches written so far, duplicates kept (a batch being written is not read yet)."""
        done = [folder for folder in (self.root / "sink").glob("batch=*") if (folder / "_SUCCESS").exists()]
        return [bytes(value) for folder in done for value in pq.read_table(folder).column("value").to_pylist()]


def _refusal(spark, query: SecuredQuery, options: dict[str, str]) -> tuple[str, str, float]:
    """(the connector's error line, the whole failure text, seconds from start to failure) of a refused query."""
    started = time.monotonic()
    running = query.start(spark, **options)
    try:
        with pytest.raises(StreamingQueryException) as failed:
            running.awaitTermination(REFUSED_WITHIN_S + 30)
        took = time.monotonic() - started
    finally:
        running.stop()
    text = str(failed.value)
    lines = [line.strip() for line in text.splitlines() if "sharegroup_source.errors." in line]
    assert lines, text
    return lines[-1], text, took


def _assert_no_secret(secured: SecuredKafka, *texts: str) -> None:
    for text in texts:
        for password in secured.users.values():
            assert password not in text, "a password in the output"
        assert "nope-Wrong-9" not in text


@pytest.mark.parametrize("coordinator", ["broker", "delta"])
def test_a_query_reads_every_record_once_with_the_acls_its_coordinator_needs(spark, secured_kafka, tmp_path,
                                                                             coordinator):
    """The broker coordinator with READ on the topic and the group; the Delta coordinator with READ on the topic
    alone (it asks the broker for log offsets and records by offset, never for the share group)."""
    query = SecuredQuery(secured_kafka, tmp_path, "alice")
    secured_kafka.allow("alice", "TOPIC", query.topic, "READ")
    if coordinator == "broker":
        secured_kafka.allow("alice", "GROUP", query.group, "READ")
    query.produce(200)
    options = query.options(coordinator)
    running = query.start(spark, **options)
    running.awaitTermination(180)
    assert running.exception() is None
    assert collections.Counter(query.sink_values()) == dict.fromkeys(query.produced, 1)
    plan = running.lastProgress["sources"][0]["description"] if running.lastProgress else ""
    _assert_no_secret(secured_kafka, plan, repr(running.lastProgress),
                      spark.readStream.format("sharegroup").options(**options).load()._jdf.queryExecution().toString())


def test_a_delta_share_consumer_reads_every_record_once_with_topic_read_only(secured_kafka, tmp_path):
    query = SecuredQuery(secured_kafka, tmp_path, "bob")
    secured_kafka.allow("bob", "TOPIC", query.topic, "READ")
    query.produce(100)
    config = {**secured_kafka.client_config("bob"), "group.id": query.group, "group.location": str(tmp_path / "g"),
              "share.auto.offset.reset": "earliest"}
    consumer = DeltaShareConsumer(config)
    got: list[bytes] = []
    try:
        consumer.subscribe([query.topic])

        def everything_read() -> bool:
            records = consumer.poll(1.0)
            got.extend(bytes(r.value()) for r in records if r.error() is None)
            for record in records:
                consumer.acknowledge(record)
            consumer.commit_sync()
            return len(got) >= len(query.produced)

        wait_for(everything_read, 60, "every record", state=lambda: f"{len(got)} records")
        _assert_no_secret(secured_kafka, repr(consumer))
    finally:
        consumer.close()
    assert collections.Counter(got) == dict.fromkeys(query.produced, 1)


def test_a_wrong_password_or_mechanism_is_an_authentication_error_naming_user_and_mechanism(spark, secured_kafka,
                                                                                        tmp_path):
    query = SecuredQuery(secured_kafka, tmp_path, "alice")
    for config, mechanism in (({"password": "nope-Wrong-9"}, "SCRAM-SHA-512"),
                              ({"mechanism": "SCRAM-SHA-256"}, "SCRAM-SHA-256")):
        kafka = secured_kafka.client_config("alice", **config)
        options = {**query.options(), **{f"kafka.{k}": str(v) for k, v in kafka.items()}}
        line, text, took = _refusal(spark, query, options)
        assert line.startswith("sharegroup_source.errors.AuthenticationError: "), line
        assert "user 'alice'" in line and f"SASL mechanism {mechanism}" in line, line
        assert "cannot reach" not in text
        assert took < REFUSED_WITHIN_S, took
        _assert_no_secret(secured_kafka, text)


def test_an_untrusted_ca_or_another_host_name_is_a_tls_error_naming_the_setting(spark, secured_kafka, tmp_path):
    query = SecuredQuery(secured_kafka, tmp_path, "alice")
    other = make_tls(tmp_path / "other-ca")
    options = {**query.options(), "kafka.ssl.ca.location": str(other["ca"])}
    line, text, took = _refusal(spark, query, options)
    assert line.startswith("sharegroup_source.errors.TlsError: "), line
    assert f"ssl.ca.location={other['ca']}" in line and "does not trust" in line, line
    assert took < REFUSED_WITHIN_S, took
    # the certificate names 127.0.0.1 only: connecting by "localhost" is another host name
    options = {**query.options(), "kafka.bootstrap.servers": secured_kafka.bootstrap_servers.replace("127.0.0.1",
                                                                                                     "localhost")}
    line, text, took = _refusal(spark, query, options)
    assert line.startswith("sharegroup_source.errors.TlsError: "), line
    assert "does not name the host" in line and "ssl.endpoint.identification.algorithm" in line, line
    assert took < REFUSED_WITHIN_S, took
    _assert_no_secret(secured_kafka, text)


@pytest.mark.parametrize(("coordinator", "granted", "refused"), [
    ("broker", [("TOPIC", "READ")], "READ on GROUP {group}"),
    ("broker", [("GROUP", "READ")], "DESCRIBE on TOPIC {topic}"),
    ("broker", [("GROUP", "READ"), ("TOPIC", "DESCRIBE")], "READ on TOPIC {topic}"),
    ("delta", [("TOPIC", "DESCRIBE")], "READ on TOPIC {topic}"),  # refused in the executors' reads
], ids=["broker-no-group-read", "broker-no-topic-describe", "broker-no-topic-read", "delta-no-topic-read"])
def test_a_missing_acl_is_an_authorization_error_naming_principal_operation_and_resource(
        spark, secured_kafka, tmp_path, coordinator, granted, refused):
    query = SecuredQuery(secured_kafka, tmp_path, "bob")
    for resource, operation in granted:
        secured_kafka.allow("bob", resource, query.group if resource == "GROUP" else query.topic, operation)
    query.produce(10)
    line, text, took = _refusal(spark, query, query.options(coordinator))
    assert line.startswith("sharegroup_source.errors.AuthorizationError: User:bob is not authorized to "
                           f"{refused.format(group=query.group, topic=query.topic)} "), line
    needs = ("coordinator=delta needs READ on each subscribed TOPIC and no GROUP ACL" if coordinator == "delta"
             else "a share-group member needs READ on its GROUP and READ on each subscribed TOPIC")
    assert needs in line or coordinator == "delta", line  # an executor's read does not know the coordinator
    assert took < REFUSED_WITHIN_S, took
    _assert_no_secret(secured_kafka, text)


def test_an_acl_revoked_under_a_running_query_fails_it_and_a_restart_after_the_grant_loses_nothing(
        spark, secured_kafka, tmp_path):
    query = SecuredQuery(secured_kafka, tmp_path, "bob")
    secured_kafka.allow("bob", "TOPIC", query.topic, "READ")
    secured_kafka.allow("bob", "GROUP", query.group, "READ")
    first = query.produce(100)
    running = query.start(spark, available_now=False, **query.options())
    try:
        wait_for(lambda: set(query.sink_values()) >= first, 90, "the first records in the sink")
        secured_kafka.revoke("bob", "GROUP", query.group)
        query.produce(100)  # the next poll is refused: these wait in the group
        with pytest.raises(StreamingQueryException) as failed:
            running.awaitTermination(60)
    finally:
        running.stop()
    assert f"AuthorizationError: User:bob is not authorized to READ on GROUP {query.group}" in str(failed.value)
    _assert_no_secret(secured_kafka, str(failed.value))

    secured_kafka.allow("bob", "GROUP", query.group, "READ")
    query.produce(100)
    restarted = query.start(spark, available_now=False, **query.options())
    try:
        wait_for(lambda: set(query.sink_values()) >= query.produced, 120, "every record in the sink",
                 state=lambda: f"{len(set(query.sink_values()))} of {len(query.produced)}")
    finally:
        restarted.stop()
    assert collections.Counter(query.sink_values()) == dict.fromkeys(query.produced, 1)
    tables = [log.parent for log in (tmp_path / "state").rglob("_delta_log")]
    assert tables
    _assert_no_secret(secured_kafka, *(str(DeltaTable(str(table)).to_pyarrow_table().to_pylist()) for table in tables),
                      *(p.read_text() for p in (tmp_path / "checkpoint").rglob("*") if p.is_file()))


def test_the_group_configs_a_query_sets_need_alter_configs_on_its_group(spark, secured_kafka, tmp_path):
    """``groupConfig.*`` and ``startingOffsets`` change the group: a principal without DESCRIBE_CONFIGS or
    ALTER_CONFIGS on it gets one line naming what is missing, and with both the query sets them and reads."""
    query = SecuredQuery(secured_kafka, tmp_path, "bob")
    secured_kafka.allow("bob", "TOPIC", query.topic, "READ")
    secured_kafka.allow("bob", "GROUP", query.group, "READ", "DESCRIBE_CONFIGS")
    query.produce(50)
    options = {**query.options(), "groupConfig.share.record.lock.duration.ms": "20000", "startingOffsets": "earliest"}
    line, text, took = _refusal(spark, query, options)
    assert line.startswith("sharegroup_source.errors.AuthorizationError: User:bob is not authorized to ALTER_CONFIGS "
                           f"on GROUP {query.group} "), line
    assert "setting a share group's configs needs DESCRIBE_CONFIGS and ALTER_CONFIGS on its GROUP" in line, line
    assert took < REFUSED_WITHIN_S, took
    _assert_no_secret(secured_kafka, text)
    internal = {"bootstrap.servers": secured_kafka.internal_servers}  # the test's own listener (a super user)
    assert read_group_configs(internal, query.group)["share.record.lock.duration.ms"].value == "15000", \
        "a refused query changed nothing"

    secured_kafka.allow("bob", "GROUP", query.group, "ALTER_CONFIGS")
    running = query.start(spark, **options)
    running.awaitTermination(180)
    assert running.exception() is None
    assert collections.Counter(query.sink_values()) == dict.fromkeys(query.produced, 1)
    assert read_group_configs(internal, query.group)["share.record.lock.duration.ms"].value == "20000"


@pytest.mark.timeout(400)
def test_the_demo_runs_on_the_secured_broker_as_a_user_with_only_its_acls(tmp_path):
    """``examples/demo.py --kafka secured``: its query and producer log in over SASL_SSL; stopped after some
    batches, the Delta sink holds each record once. (Accepted equals the sink's rows only when the stop comes
    between batches; on a loaded machine the demo's patience may run out mid-batch, whose records go back.)"""
    run = interrupt_demo(tmp_path, "--kafka", "secured", after_batches=3)
    output, err = run.output, run.err
    assert run.returncode == 0, f"{output}\n{err}"
    assert "with SASL_SSL and ACLs" in output and "as user orders-app" in output, output
    sink = re.search(r"Delta sink holds (\d+) rows \((\d+) distinct\)", output)
    accepted = re.search(r"accepted (\d+),", output)
    assert sink is not None and accepted is not None, output
    assert int(sink[1]) == int(sink[2]) > 0 and int(accepted[1]) > 0, output
    for broken in ("Traceback", "Error"):
        assert broken not in err, (broken, err)
