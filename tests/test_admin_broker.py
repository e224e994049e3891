"""Admin of coordinator=broker share groups over Kafka's share-group admin protocol, on Apache Kafka's broker.

Kafka's own tool (``kafka-share-groups``, from the jars ``make jars`` resolves) is the oracle: what
``sharegroup describe`` prints for a group must be what Kafka's tool prints for it. Real members
(share consumers) make the groups' states; resets and deletes are checked by what a member reads next.
"""

from __future__ import annotations

import json
import re
import time
import zipfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from sharegroup_source.acks import Ack, AckType
from sharegroup_source.admin import delete_groups, delete_offsets, describe_groups, reset_offsets
from sharegroup_source.coordinators.broker.share_client import ShareClient
from sharegroup_source.errors import GroupNotEmptyError, OptionError
from sharegroup_source.kafka.settings import kafka_python_config
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from tests.test_admin import _cli

MESSAGES = Path(__file__).parents[1] / "sharegroup_source" / "kafka" / "messages"
KAFKA_JARS = Path(__file__).parents[1] / "jvm" / "target" / "kafka"


@contextmanager
def _member(kafka: KafkaUnderTest, group: str, topic: str, client_id: str,
            max_poll_records: int | None = None) -> Iterator[ShareClient]:
    with ShareClient(kafka.config(**{"group.id": group, "client.id": client_id}), [topic],
                     max_poll_records=max_poll_records) as client:
        yield client


def _take(client: ShareClient, count: int, ack: AckType | None = AckType.ACCEPT) -> list:
    """Poll until at least ``count`` records came (max.poll.records is a soft limit), acknowledging each poll's
    records with ``ack``; with ``ack`` None, the first poll's records stay acquired (no poll may follow)."""
    taken: list = []

    def poll() -> bool:
        records = client.poll(1)
        taken.extend(records)
        if records and ack is not None:
            client.acknowledge(Ack(m.topic(), m.partition(), m.offset(), ack) for m in records)
            assert all(result.ok for result in client.commit()), "acknowledgements failed"
        return len(taken) >= count or (ack is None and bool(taken))

    wait_for(poll, 60, f"{count} records", interval_s=0)
    return taken


def _kafka_tool_offsets(kafka: KafkaUnderTest, groups: set[str]) -> dict[tuple[str, str, int], tuple[str, str]]:
    """``kafka-share-groups --describe --all-groups --offsets``: (START-OFFSET, LAG) per (group, topic, partition)."""
    done = kafka.apache.run_tool("kafka-share-groups", "--bootstrap-server", kafka.bootstrap_servers, "--describe",
                                 "--all-groups", "--offsets")
    rows = [line.split() for line in done.stdout.splitlines() if line.split()[:1] and line.split()[0] in groups]
    return {(g, t, int(p)): (start, lag) for g, t, p, start, lag, *_ in rows}


def _ours(descriptions) -> dict[tuple[str, str, int], tuple[str, str]]:
    shown = lambda v: "-" if v is None else str(v)  # noqa: E731  Kafka's tool prints an unknown as "-"
    return {(d.group_id, p.topic, p.partition): (shown(p.spso), shown(p.lag)) for d in descriptions
            for p in d.partitions}


def test_every_groups_start_offset_and_lag_agree_with_kafkas_tool(kafka, capsys):
    kafka.require_apache("Kafka's own kafka-share-groups is the oracle")
    topic = kafka.new_topic(3)
    kafka.produce_numbered(topic, 90, 3)
    partly, empty, in_flight = (kafka.new_group() for _ in range(3))
    with _member(kafka, partly, topic, "partly", max_poll_records=10) as member:  # settles some, then leaves
        assert len(_take(member, 1)) < 90
    reset_offsets(group=empty, to="earliest", topics=[topic], execute=True,  # offsets, never a member
                  bootstrap_servers=kafka.bootstrap_servers)
    with _member(kafka, in_flight, topic, "holder", max_poll_records=7) as holder:
        held = _take(holder, 1, ack=None)  # stays acquired while both describe
        groups = {partly, empty, in_flight}
        outputs: list[tuple[dict, dict]] = []

        def agree() -> bool:  # the broker persists start offsets lazily: both must read the same state
            ours = _ours(d for d in describe_groups(all_groups=True, bootstrap_servers=kafka.bootstrap_servers)
                         if d.group_id in groups)
            outputs.append((ours, _kafka_tool_offsets(kafka, groups)))
            return outputs[-1][0] == outputs[-1][1] and len(ours) == 9

        wait_for(agree, 90, "sharegroup describe and kafka-share-groups agree", interval_s=1,
                 state=lambda: outputs[-1])
        ours = outputs[-1][0]
        print(json.dumps({"ours": {str(k): v for k, v in ours.items()}}, indent=1))
        assert {k: v for k, v in ours.items() if k[0] == empty} == {(empty, topic, p): ("0", "30") for p in range(3)}
        code, out, err = _cli(capsys, "describe", "--all-groups", "--bootstrap-servers", kafka.bootstrap_servers)
        assert code == 0, err
        print(out)
        [holding] = describe_groups(groups=[in_flight], bootstrap_servers=kafka.bootstrap_servers)
        assert holding.state == "Stable" and [m.client_id for m in holding.members] == ["holder"]
        member = re.escape(holding.members[0].member_id)
        assert re.search(rf"^{in_flight}\s+{member}\s+holder\s", out, re.MULTILINE), out
        holder.acknowledge(Ack(m.topic(), m.partition(), m.offset()) for m in held)
        holder.commit()
    [left] = describe_groups(groups=[partly], bootstrap_servers=kafka.bootstrap_servers)
    assert (left.state, left.members, left.error) == ("Empty", (), None)
    assert [p.log_end_offset for p in left.partitions] == [30, 30, 30]


def test_missing_and_consumer_groups_get_a_line_each_and_the_rest_is_described(kafka, capsys):
    kafka.require_apache("the embedded broker has no share-group admin API")
    topic = kafka.new_topic(1)
    kafka.produce_numbered(topic, 5, 1)
    share = kafka.new_group()
    reset_offsets(group=share, to="latest", topics=[topic], execute=True, bootstrap_servers=kafka.bootstrap_servers)
    classic = f"classic-{share}"
    consumer = Consumer(kafka.config(**{"group.id": classic, "enable.auto.commit": False}))
    consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)  # a consumer group with offsets
    consumer.close()
    missing = f"missing-{share}"
    requests: Counter[str] = Counter()
    described = describe_groups(groups=[missing, share, classic], bootstrap_servers=kafka.bootstrap_servers,
                                requests=requests)
    assert [d.group_id for d in described] == [missing, share, classic]
    assert described[1].error is None and [(p.spso, p.lag) for p in described[1].partitions] == [(5, 0)]
    assert "GROUP_ID_NOT_FOUND" in described[0].error and missing in described[0].error
    assert described[2].error is not None and classic in described[2].error
    print(described[2].error)
    assert requests["FindCoordinatorRequest"] == 1 and requests["ShareGroupDescribeRequest"] == 1, requests
    code, out, err = _cli(capsys, "describe", "--group", missing, "--group", share, "--group", classic,
                          "--bootstrap-servers", kafka.bootstrap_servers)
    print(out, err)
    assert code == 1 and re.search(rf"^{share}\s+{topic}\s+0\s+5\s+0\s", out, re.MULTILINE), out
    lines = err.strip().splitlines()
    assert len(lines) == 2 and f"(group {missing})" in lines[0] and f"(group {classic})" in lines[1], err
    assert "Traceback" not in err


def test_reset_is_refused_while_a_member_is_in_the_group_and_the_next_member_rereads_from_the_start(kafka, capsys):
    kafka.require_apache("the embedded broker has no share-group admin API")
    topic = kafka.new_topic(2)
    produced = kafka.produce_numbered(topic, 20, 2)
    group = kafka.new_group()
    servers = ("--bootstrap-servers", kafka.bootstrap_servers)
    with _member(kafka, group, topic, "first") as first:
        assert len(_take(first, 20)) == 20
        for execute in ((), ("--execute",)):  # our check, then the coordinator's own refusal
            code, _, err = _cli(capsys, "reset-offsets", "--group", group, "--to-earliest", *execute, *servers)
            assert code == 1 and "is not empty" in err and "client first" in err, err
        with pytest.raises(GroupNotEmptyError, match="NON_EMPTY_GROUP"):
            reset_offsets(group=group, to="earliest", execute=True, bootstrap_servers=kafka.bootstrap_servers)
    wait_for(lambda: describe_groups(groups=[group], bootstrap_servers=kafka.bootstrap_servers)[0].state == "Empty",
             30, "the member left")
    [before] = describe_groups(groups=[group], bootstrap_servers=kafka.bootstrap_servers)
    code, out, err = _cli(capsys, "reset-offsets", "--group", group, "--to-earliest", *servers)
    print(out)
    assert code == 0 and "dry run" in out, out + err
    for p in before.partitions:  # the plan starts from the coordinator's start offsets (persisted lazily)
        start = "-" if p.spso is None else p.spso
        assert re.search(rf"^{group}\s+{topic}\s+{p.partition}\s+{start}\s+0\s", out, re.MULTILINE), out
    [after] = describe_groups(groups=[group], bootstrap_servers=kafka.bootstrap_servers)
    assert [p.spso for p in after.partitions] == [p.spso for p in before.partitions], "a dry run changed the group"
    code, out, err = _cli(capsys, "reset-offsets", "--group", group, "--to-earliest", "--execute", *servers)
    assert code == 0 and "done by the group's coordinator" in out, out + err
    with _member(kafka, group, topic, "second") as second:
        again = _take(second, 20)
    assert {(m.partition(), m.value()) for m in again} == produced


def test_delete_offsets_then_delete_the_group_dry_run_first(kafka, capsys):
    kafka.require_apache("the embedded broker has no share-group admin API")
    first, second = kafka.new_topic(1), kafka.new_topic(2)
    group = kafka.new_group()
    servers = ("--bootstrap-servers", kafka.bootstrap_servers)
    for topic in (first, second):
        reset_offsets(group=group, to="earliest", topics=[topic], execute=True,
                      bootstrap_servers=kafka.bootstrap_servers)
    code, out, _ = _cli(capsys, "delete-offsets", "--group", group, "--topic", second, *servers)
    assert code == 0 and out.count("would be deleted") == 2, out
    assert len(describe_groups(groups=[group], bootstrap_servers=kafka.bootstrap_servers)[0].partitions) == 3
    assert delete_offsets(group=group, topic=second, execute=True, bootstrap_servers=kafka.bootstrap_servers) == [0, 1]
    [after] = describe_groups(groups=[group], bootstrap_servers=kafka.bootstrap_servers)
    assert [(p.topic, p.partition) for p in after.partitions] == [(first, 0)]
    with pytest.raises(ValueError, match=f"no offsets for topic '{second}'"):
        delete_offsets(group=group, topic=second, bootstrap_servers=kafka.bootstrap_servers)

    missing = f"missing-{group}"
    code, out, err = _cli(capsys, "delete", "--group", group, "--group", missing, *servers)
    assert code == 1 and out == f"{group}  would be deleted (dry run: add --execute)\n", out
    assert "GROUP_ID_NOT_FOUND" in err and missing in err, err
    assert delete_groups([group], bootstrap_servers=kafka.bootstrap_servers) == {group: None}
    assert describe_groups(groups=[group], bootstrap_servers=kafka.bootstrap_servers)[0].error is None
    assert delete_groups([group], execute=True, bootstrap_servers=kafka.bootstrap_servers) == {group: None}
    gone = describe_groups(groups=[group], bootstrap_servers=kafka.bootstrap_servers)[0]
    assert "GROUP_ID_NOT_FOUND" in gone.error, gone


@pytest.mark.embedded
def test_a_cluster_without_the_share_group_admin_api_is_one_line(kafka, capsys):
    kafka.require_embedded("librdkafka's embedded broker answers no share-group admin request")
    started = time.monotonic()
    code, out, err = _cli(capsys, "describe", "--group", "orders", "--bootstrap-servers", kafka.bootstrap_servers)
    assert code == 1 and out.strip() == "", out
    assert err.count("\n") == 1 and "has no share-group admin API" in err and "ApiVersions v3+" in err, err
    assert time.monotonic() - started < 20


def test_client_settings_kafka_python_cannot_honour_are_refused_by_name():
    assert kafka_python_config({"bootstrap.servers": "b:9092", "security.protocol": "sasl_ssl",
                                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p",
                                "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "none"}) == {
        "bootstrap_servers": "b:9092", "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "u", "sasl_plain_password": "p", "ssl_cafile": "/ca.pem", "ssl_check_hostname": False}
    with pytest.raises(OptionError, match=r"setting 'sasl\.oauthbearer\.client\.secret' is not supported") as refused:
        kafka_python_config({"sasl.oauthbearer.client.secret": "very-secret"})
    assert "very-secret" not in str(refused.value)


def test_the_message_definitions_are_kafkas_own_files():
    jars = sorted(KAFKA_JARS.glob("kafka-clients-*.jar"))
    assert jars, f"no kafka-clients jar in {KAFKA_JARS}: run make jars"
    with zipfile.ZipFile(jars[-1]) as jar:
        for path in sorted(MESSAGES.glob("*.json")):
            assert path.read_bytes() == jar.read(f"common/message/{path.name}"), f"{path.name} differs from {jars[-1]}"
    assert len(list(MESSAGES.glob("*.json"))) == 8
