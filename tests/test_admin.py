"""Admin: describe many share groups at once, reset and delete their offsets, never as a member.

Real Delta tables, both Kafka peers, real members (DeltaShareConsumer workers, a broker-coordinated
query and a plain share consumer); what describe says is checked against what was produced,
acquired and acknowledged.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import fields
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from sharegroup_source import DeltaShareConsumer, admin, cli
from sharegroup_source.acks import Ack
from sharegroup_source.admin import (
    SESSION_TIMEOUT_MS,
    GroupDescription,
    PartitionDescription,
    delete_offsets,
    describe_groups,
    reset_offsets,
    to_arrow,
)
from sharegroup_source.coordinators.broker.share_client import ShareClient
from sharegroup_source.errors import GroupNotEmptyError
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from state_store import AckType, EpochStatus, LedgerEntry, OffsetRange, SharePartition, StateStore
from state_store.group import GroupStore
from tests.streams import StreamSetup
from tests.test_java_member import _share_groups, _table

ROOT = Path(__file__).parents[1]
#: The documentation: the README and the site's pages, operating share groups among them
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OPERATING = ROOT / "docs" / "operating.md"
#: A lock long enough that a member's renewer (every third of it) does not commit during a test.
LONG_LOCK_MS = 120_000


def _worker(kafka: KafkaUnderTest, group: str, location: Path, **extra: Any) -> DeltaShareConsumer:
    return DeltaShareConsumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group,
                               "group.location": str(location), "share.auto.offset.reset": "earliest",
                               "share.record.lock.duration.ms": LONG_LOCK_MS, **extra})


def _poll(consumer: DeltaShareConsumer, count: int) -> list:
    """One poll that must bring ``count`` records (every partition has that many waiting)."""
    messages = consumer.poll(10)
    assert len(messages) == count, [(m.partition(), m.offset()) for m in messages]
    return messages


def _version(location: Path, table: str) -> int:
    return DeltaTable(str(location / table)).version()


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    """``sharegroup ARGS`` in this process: its exit status, stdout and stderr (the test's own output is kept)."""
    earlier = capsys.readouterr()
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    sys.stdout.write(earlier.out)
    sys.stderr.write(earlier.err)
    return code, out, err


def _group_at(location: Path, group_id: str, settled: int, keys: list[tuple[str, int]]) -> None:
    """A group whose share-partitions ``keys`` start at ``settled``: acquired and accepted by a member long gone."""
    store = GroupStore.open(str(location), group_id, {"share.auto.offset.reset": "earliest"})

    def settle(partitions: dict[tuple[str, int], SharePartition]) -> None:
        for sp in partitions.values():
            sp.acquire("gone", settled, now_ms=0, log_end_offset=settled)
            sp.acknowledge("gone", [(0, settled - 1, AckType.ACCEPT)], now_ms=1)

    store.share_state.update_all(settle, dict.fromkeys(keys, 0))


@pytest.fixture
def list_offsets_calls(monkeypatch) -> Iterator[list[int]]:
    """ListOffsets lookups made by any admin client meanwhile, one entry (its partition count) per lookup."""
    calls: list[int] = []
    original = AdminClient.list_offsets

    def counted(self, requests, **kwargs):
        calls.append(len(requests))
        return original(self, requests, **kwargs)

    monkeypatch.setattr(AdminClient, "list_offsets", counted)
    yield calls


def test_an_empty_group_is_described_with_its_offsets_lag_and_in_flight_states(kafka, tmp_path):
    topic = kafka.new_topic(2)
    kafka.produce_numbered(topic, 100, 2)  # 50 per partition
    location = tmp_path / "group"
    with _worker(kafka, "empty-group", location, **{"max.poll.records": 40}) as worker:
        worker.subscribe([topic])
        for message in _poll(worker, 40):  # 20 per partition: offsets 0-19
            outcome = (AcknowledgeType.ACCEPT if 1 <= message.offset() <= 9 else
                       AcknowledgeType.REJECT if message.offset() == 10 else AcknowledgeType.RELEASE)
            worker.acknowledge(message, outcome)
        assert all(error is None for error in worker.commit_sync().values())
    # the worker left: nobody is running, and the group is described all the same

    [group] = describe_groups([str(location)], bootstrap_servers=kafka.bootstrap_servers)
    print(group)
    assert (group.group_id, group.kind, group.state, group.error, group.note) == (
        "empty-group", "delta", "Empty", None, None)
    assert group.members == () and group.dead_letter_count == 2
    # per partition: 0 released, 1-9 accepted, 10 rejected, 11-19 released; 20-49 never delivered
    assert group.partitions == tuple(
        PartitionDescription(topic, p, spso=0, speo=20, log_start_offset=0, log_end_offset=50, lag=40, acquired=0,
                             available=10, acknowledged=9, archived=1, max_delivery_count=1,
                             oldest_lock_deadline=None) for p in (0, 1))
    frame = to_arrow([group]).to_pandas()
    assert list(frame.columns) == ["location", "group_id", "kind", "state",
                                   *[f.name for f in fields(PartitionDescription)]]
    assert frame["lag"].tolist() == [40, 40] and set(frame["state"]) == {"Empty"}


def test_a_running_worker_keeps_its_records_across_describes_which_join_nothing(kafka, tmp_path, capsys):
    topic = kafka.new_topic(2)
    kafka.produce_numbered(topic, 60, 2)
    location = tmp_path / "group"
    group_id = f"running-{tmp_path.name[-12:]}"
    with _worker(kafka, group_id, location, **{"max.poll.records": 20}) as worker:
        worker.subscribe([topic])
        polled_at_ms = int(time.time() * 1000)
        held = _poll(worker, 20)
        versions = {table: _version(location, table) for table in ("share_state", "members")}

        for _ in range(3):
            [group] = describe_groups([str(location)], bootstrap_servers=kafka.bootstrap_servers)
            code, out, err = _cli(capsys, "describe", str(location), "--bootstrap-servers", kafka.bootstrap_servers)
            assert code == 0 and err == "", err
        print(out)
        assert group.state == "Stable"
        [member] = group.members
        assert (member.member_id, member.kind, member.records_held) == (worker.member_id, "worker", 20)
        assert [(p.partition, p.spso, p.speo, p.acquired, p.lag) for p in group.partitions] == [
            (0, 0, 10, 10, 30), (1, 0, 10, 10, 30)]
        for p in group.partitions:
            deadline_ms = p.oldest_lock_deadline.timestamp() * 1000
            assert polled_at_ms + LONG_LOCK_MS <= deadline_ms <= time.time() * 1000 + LONG_LOCK_MS
        assert worker.member_id in out and re.search(rf"^{group_id}\s+delta\s+-\s+Stable\s+1\s", out, re.MULTILINE)

        # describing wrote nothing: no member joined the group, no lock moved
        assert {table: _version(location, table) for table in versions} == versions
        assert [m.member_id for m in GroupStore.existing(str(location)).members()] == [worker.member_id]
        for message in held:
            worker.acknowledge(message)
        assert all(error is None for error in worker.commit_sync().values()), "the held records stayed held"
    if kafka.apache is not None:  # nor did any describe make a Kafka share group of the delta group
        listed = kafka.apache.run_tool("kafka-share-groups", "--bootstrap-server", kafka.bootstrap_servers, "--list")
        print(listed.stdout)
        assert listed.returncode == 0 and group_id not in listed.stdout.split()


def test_reset_is_refused_while_a_member_holds_records_and_the_next_member_starts_where_it_says(
        kafka, tmp_path, capsys):
    topic = kafka.new_topic(2)
    kafka.produce_numbered(topic, 100, 2)  # 50 per partition
    location = tmp_path / "group"
    servers = ("--bootstrap-servers", kafka.bootstrap_servers)
    with _worker(kafka, "reset-group", location, **{"max.poll.records": 20}) as worker:
        worker.subscribe([topic])
        _poll(worker, 20)
        for execute in (False, True):
            with pytest.raises(GroupNotEmptyError, match=rf"{worker.member_id} \(worker on .*, holds 20 records"):
                reset_offsets(str(location), to="latest", execute=execute, bootstrap_servers=kafka.bootstrap_servers)
        code, _, err = _cli(capsys, "reset-offsets", str(location), "--to-offset", "25", "--execute", *servers)
        assert code == 1 and "is not empty" in err and worker.member_id in err, err
        for execute in ((), ("--execute",)):
            code, _, err = _cli(capsys, "delete-offsets", str(location), "--topic", topic, *execute)
            assert code == 1 and worker.member_id in err, err
    # closed: it gave back the 20 records and left, so the group is empty at once

    version = _version(location, "share_state")
    code, out, err = _cli(capsys, "reset-offsets", str(location), "--to-offset", "25", *servers)
    print(out)
    assert code == 0 and "dry run" in out and err == ""
    assert re.search(rf"^reset-group\s+{topic}\s+0\s+0\s+25\s+10$", out, re.MULTILINE), out
    assert _version(location, "share_state") == version, "a dry run changes nothing"

    code, out, err = _cli(capsys, "reset-offsets", str(location), "--to-offset", "25", "--topic", f"{topic}:1",
                          "--execute", *servers)
    print(out)
    assert code == 0 and f"committed as version {version + 1}" in out
    assert _version(location, "share_state") == version + 1, "one commit"
    plan = reset_offsets(str(location), to=1000, topics=[f"{topic}:0"], bootstrap_servers=kafka.bootstrap_servers)
    assert [(r.partition, r.start_offset, r.new_start_offset, r.discarded) for r in plan.partitions] == [
        (0, 0, 50, 10)], "an offset beyond the log is kept at its end"
    [group] = describe_groups([str(location)], bootstrap_servers=kafka.bootstrap_servers)
    assert [(p.partition, p.spso, p.speo, p.available, p.lag) for p in group.partitions] == [
        (0, 0, 10, 10, 50), (1, 25, 25, 0, 25)]

    with _worker(kafka, "reset-group", location, **{"max.poll.records": 100}) as after:
        after.subscribe([topic])
        got = {(m.partition(), m.offset(), m.delivery_count()) for m in _poll(after, 75)}
    assert {(p, o) for p, o, _ in got} == {(0, o) for o in range(50)} | {(1, o) for o in range(25, 50)}
    assert {(p, c) for p, _, c in got if p == 1} == {(1, 1)}, "a reset discards delivery counts"


def test_a_reset_to_a_datetime_starts_at_the_first_record_at_or_after_it(kafka, tmp_path):
    kafka.require_apache("the embedded broker answers every ListOffsets by time with 'no such record'")
    topic = kafka.new_topic(1)
    kafka.produce_numbered(topic, 10, 1)
    time.sleep(0.1)
    between = datetime.now(timezone.utc)
    time.sleep(0.1)
    kafka.produce_numbered(topic, 10, 1, first=10)
    location = tmp_path / "group"
    _group_at(location, "datetime-group", 5, [(topic, 0)])
    for when, offset in ((between, 10), (between.replace(year=2000), 0), (between + timedelta(hours=1), 20),
                         (between.replace(tzinfo=None), 10)):
        plan = reset_offsets(str(location), to=when, bootstrap_servers=kafka.bootstrap_servers)
        assert [(r.start_offset, r.new_start_offset) for r in plan.partitions] == [(5, offset)], when


def test_delete_offsets_makes_the_group_forget_a_topic(kafka, tmp_path, capsys):
    first, second = kafka.new_topic(1), kafka.new_topic(2)
    kafka.produce_numbered(first, 10, 1)
    kafka.produce_numbered(second, 10, 2)
    location = tmp_path / "group"
    for topic in (first, second):
        with _worker(kafka, "delete-group", location) as worker:
            worker.subscribe([topic])
            for message in worker.poll(10):
                worker.acknowledge(message)
    assert sorted(GroupStore.existing(str(location)).share_state.partitions()) == sorted(
        [(first, 0), (second, 0), (second, 1)])
    version = _version(location, "share_state")

    code, out, err = _cli(capsys, "delete-offsets", str(location), "--topic", second)
    dry = "would be deleted (dry run: add --execute)"
    assert (code, out, err) == (0, f"{second}  0  {dry}\n{second}  1  {dry}\n", "")
    assert _version(location, "share_state") == version
    code, out, err = _cli(capsys, "delete-offsets", str(location), "--topic", second, "--execute")
    assert (code, out, err) == (0, f"{second}  0  deleted\n{second}  1  deleted\n", "")
    assert _version(location, "share_state") == version + 1
    [group] = describe_groups([str(location)], bootstrap_servers=kafka.bootstrap_servers)
    assert [(p.topic, p.partition, p.spso) for p in group.partitions] == [(first, 0, 10)]
    with pytest.raises(ValueError, match=rf"no state for topic '{second}' \(its topics: {first}\)"):
        delete_offsets(str(location), second, execute=True)


def test_twenty_groups_in_one_call_each_broken_one_has_its_error_and_offsets_are_looked_up_once(
        kafka, tmp_path, capsys, list_offsets_calls):
    orders, payments = kafka.new_topic(2), kafka.new_topic(1)
    kafka.produce_numbered(orders, 60, 2)
    kafka.produce_numbered(payments, 30, 1)
    keys = [(orders, 0), (orders, 1), (payments, 0)]
    locations = []
    for i in range(1, 21):
        locations.append(tmp_path / f"group-{i:02}")
        if i not in (7, 13):
            _group_at(locations[-1], f"group-{i:02}", i, keys)
    missing, corrupt = str(locations[6]), locations[12]
    (corrupt / "settings" / "_delta_log").mkdir(parents=True)
    (corrupt / "settings" / "_delta_log" / "00000000000000000000.json").write_text("this is no Delta log\n")

    started = time.monotonic()
    described = describe_groups([str(loc) for loc in locations], bootstrap_servers=kafka.bootstrap_servers)
    print(f"20 groups described in {time.monotonic() - started:.2f}s; ListOffsets lookups: {list_offsets_calls}")
    assert len(list_offsets_calls) == 2, "log offsets are looked up once (start and end) for every group"
    assert [d.location for d in described] == [str(loc) for loc in locations]
    errors = {d.location: d.error for d in described if d.error is not None}
    assert errors.keys() == {missing, str(corrupt)}, errors
    assert errors[missing] == "the location does not exist"
    assert re.search(r"the settings table at .*group-13/settings is corrupt", errors[str(corrupt)]), errors
    for i, d in enumerate(described, start=1):
        if i in (7, 13):
            assert (d.group_id, d.kind, d.partitions) == (None, None, ())
            continue
        assert (d.group_id, d.kind, d.state, d.dead_letter_count) == (f"group-{i:02}", "delta", "Empty", 0)
        assert [(p.topic, p.partition, p.spso, p.log_end_offset, p.lag, p.error) for p in d.partitions] == [
            (*key, i, 30, 30 - i, None) for key in sorted(keys)]

    list_offsets_calls.clear()
    code, out, err = _cli(capsys, "describe", *map(str, locations), "--bootstrap-servers", kafka.bootstrap_servers)
    print(out, err, sep="\n")
    assert code == 1 and len(list_offsets_calls) == 2
    assert err.splitlines() == [f"sharegroup: error: {missing}: {errors[missing]}",
                                f"sharegroup: error: {corrupt}: {errors[str(corrupt)]}"]
    assert re.match(r"GROUP\s+TOPIC\s+PARTITION\s+START-OFFSET\s+LAG\s+ACQUIRED\s+AVAILABLE\s+ACKNOWLEDGED\s+"
                    r"ARCHIVED\s+MAX-DELIVERY-COUNT\s+LOG-START-OFFSET\s+LOG-END-OFFSET", out.split("\n\n")[1])
    assert re.search(rf"^group-05\s+{orders}\s+1\s+5\s+25\s+0\s+0\s+0\s+0\s+0\s+0\s+30\s+-$", out, re.MULTILINE)

    code, out, _ = _cli(capsys, "describe", *map(str, locations), "--bootstrap-servers", kafka.bootstrap_servers,
                        "--json")
    objects = json.loads(out)
    assert code == 1 and all(list(o) == [f.name for f in fields(GroupDescription)] for o in objects)
    assert all(list(p) == [f.name for f in fields(PartitionDescription)] for o in objects for p in o["partitions"])
    assert [GroupDescription.from_dict(o) for o in objects] == described, "--json round-trips"


def test_a_deleted_topic_is_the_error_of_its_partitions_only(kafka, tmp_path):
    kafka.require_apache("deletes a topic")
    kept, deleted = kafka.new_topic(1), kafka.new_topic(2)
    kafka.produce_numbered(kept, 10, 1)
    location = tmp_path / "group"
    _group_at(location, "deleted-topic-group", 3, [(kept, 0), (deleted, 0), (deleted, 1)])
    for future in kafka.admin.delete_topics([deleted]).values():
        future.result()
    wait_for(lambda: deleted not in kafka.admin.list_topics(timeout=10).topics, 30, f"{deleted} gone")

    [group] = describe_groups([str(location)], bootstrap_servers=kafka.bootstrap_servers)
    assert group.error is None
    assert {(p.topic, p.partition): (p.spso, p.log_end_offset, p.lag, p.error) for p in group.partitions} == {
        (kept, 0): (3, 10, 7, None),
        (deleted, 0): (3, None, None, f"{deleted}[0] is not in the cluster (topic or partition deleted)"),
        (deleted, 1): (3, None, None, f"{deleted}[1] is not in the cluster (topic or partition deleted)")}
    with pytest.raises(ValueError, match=rf"{deleted}\[0\], {deleted}\[1\] not in the cluster"):
        reset_offsets(str(location), to="earliest", bootstrap_servers=kafka.bootstrap_servers)


def test_an_unreachable_cluster_is_each_groups_error_and_their_state_is_still_described(tmp_path, monkeypatch):
    monkeypatch.setattr(admin.cluster, "KAFKA_TIMEOUT_S", 1.0)
    for name in ("first", "second"):
        _group_at(tmp_path / name, name, 4, [("orders", 0)])
    first, second = describe_groups([str(tmp_path / "first"), str(tmp_path / "second")],
                                    bootstrap_servers="127.0.0.1:1")
    for group in (first, second):
        assert group.error.startswith("cannot reach Kafka at bootstrap.servers=127.0.0.1:1"), group.error
        assert [(p.spso, p.log_end_offset, p.lag) for p in group.partitions] == [(4, None, None)]
    [offline] = describe_groups([str(tmp_path / "first")])
    assert (offline.error, offline.note) == (None, "no bootstrap servers given: log offsets and lag were not looked up")


@pytest.mark.spark
def test_a_broker_coordinated_querys_state_is_described_and_agrees_with_kafkas_tool(spark, kafka, tmp_path, capsys):
    setup = StreamSetup(kafka, kafka.new_topic(2), kafka.new_group(), tmp_path)
    kafka.produce_numbered(setup.topic, 300, 2)
    query = setup.file_sink(spark, maxRecordsPerTrigger=100)
    query.awaitTermination(180)
    assert query.exception() is None
    wait_for(setup.every_epoch_acked, 60, "every epoch acknowledged")
    setup.wait_until_member_left()

    [group] = describe_groups([str(setup.state)], bootstrap_servers=kafka.bootstrap_servers)
    code, out, err = _cli(capsys, "describe", str(setup.state), "--bootstrap-servers", kafka.bootstrap_servers)
    print(out)
    assert code == 0 and err == ""
    assert (group.group_id, group.kind, group.error, group.members) == (setup.group, "broker", None, ())
    assert group.unsettled_epochs == 0 and group.dead_letter_count == 0
    assert sum(p.acknowledged for p in group.partitions) == 300
    ledger = [(p.partition, p.acquired, p.ack_failed) for p in group.partitions]
    assert ledger == [(0, 0, 0), (1, 0, 0)]
    if kafka.apache is None:  # librdkafka's embedded broker answers no share-group admin request
        assert group.note.startswith("the broker could not say: the Kafka cluster has no share-group admin API")
        assert group.note.endswith("shown is what this query's ledger knows")
        assert [(p.spso, p.lag, p.log_end_offset) for p in group.partitions] == [(None, None, None)] * 2
        return
    assert group.note is None and group.state == "Empty" and group.coordinator is not None
    # Kafka's own view of the same group, the broker's SPSO and lag: what describe printed
    reports: list[str] = []

    def kafka_rows() -> dict[int, tuple[int, int]]:
        reports.append(_share_groups(kafka.apache, setup, "--offsets"))
        rows = [r for r in _table(reports[-1], setup.group) if r.get("TOPIC") == setup.topic and "LAG" in r]
        return {int(r["PARTITION"]): (int(r["START-OFFSET"]), int(r["LAG"])) for r in rows}

    theirs = wait_for(lambda: len(kafka_rows()) == 2 and kafka_rows(), 30, "kafka-share-groups --offsets rows",
                      interval_s=1, state=lambda: reports[-1])
    print(reports[-1])
    [group] = describe_groups([str(setup.state)], bootstrap_servers=kafka.bootstrap_servers)
    assert {p.partition: (p.spso, p.lag) for p in group.partitions} == theirs
    assert [p.log_end_offset for p in group.partitions] == [150, 150]

    # A member of the group holds records while describe runs: Kafka lists it and nobody else
    kafka.produce_numbered(setup.topic, 20, 2, first=300)
    client_id = f"holder-{setup.group}"
    with ShareClient(kafka.config(**{"group.id": setup.group, "client.id": client_id}), [setup.topic]) as holder:
        held = wait_for(lambda: holder.poll(1), 60, "records for the holding member", interval_s=0)
        for _ in range(3):
            describe_groups([str(setup.state)], bootstrap_servers=kafka.bootstrap_servers)
            assert _cli(capsys, "describe", str(setup.state), "--bootstrap-servers", kafka.bootstrap_servers)[0] == 0
        members = _share_groups(kafka.apache, setup, "--members")
        print(members)
        assert [r.get("CLIENT-ID") for r in _table(members, setup.group)] == [client_id], members
        [group] = describe_groups([str(setup.state)], bootstrap_servers=kafka.bootstrap_servers)
        assert group.state == "Stable"
        assert [(m.client_id, m.kind, m.assignment) for m in group.members] == [
            (client_id, "consumer", ((setup.topic, 0), (setup.topic, 1)))]
        holder.acknowledge(Ack(m.topic(), m.partition(), m.offset()) for m in held)
        assert all(result.ok for result in holder.commit()), "the held records stayed held"

        # A query's member (its share consumer is configured as ShareClient configures it) is KIND query, also
        # when the group is described by its id; the holder, another client of the group, stays a consumer
        with ShareClient(kafka.config(**{"group.id": setup.group}), [setup.topic]) as member:
            def kinds() -> list[tuple[str | None, str]]:
                member.poll(0.2)
                [by_id] = describe_groups(groups=[setup.group], bootstrap_servers=kafka.bootstrap_servers)
                return sorted((m.client_id, m.kind) for m in by_id.members)

            expected = sorted([(client_id, "consumer"), ("sharegroup-source", "query")])
            wait_for(lambda: kinds() == expected, 30, "both members described", interval_s=0.5, state=kinds)


def test_the_docs_name_every_subcommand_and_option_of_the_cli():
    """The operating page shows every admin subcommand with each of its options and the session timeout; the other
    subcommands (the local brokers) are shown somewhere in the documentation."""
    text = "\n".join(path.read_text() for path in DOCS)
    section = OPERATING.read_text()
    commands = next(a for a in cli._parser()._actions if a.dest == "command").choices
    for name, parser in commands.items():
        where, shown = (section, OPERATING.name) if name in cli.ADMIN_COMMANDS else (text, "the documentation")
        assert f"sharegroup {name}" in where, f"{shown} does not show `sharegroup {name}`"
        options = [o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help")]
        missing = [o for o in options if o not in where]
        assert not missing, f"{shown} does not name {missing} of `sharegroup {name}`"
    assert f"{SESSION_TIMEOUT_MS // 1000} s" in section, f"{OPERATING.name} states the session timeout"


def test_a_reset_where_there_is_no_delta_group_says_how_to_name_a_broker_group(tmp_path, capsys):
    code, _, err = _cli(capsys, "reset-offsets", str(tmp_path), "--to-earliest", "--bootstrap-servers", "127.0.0.1:1")
    assert code == 1 and "no share group at" in err, err
    assert "a coordinator=broker group is reset by its id: --group G" in err, err


def test_acknowledged_counts_each_offset_once_when_records_came_back(kafka, tmp_path, capsys):
    """Records RELEASEd (or reset) come back in a later epoch: ACKNOWLEDGED counts the offsets, each once, which
    never exceed what the log held, not the deliveries acknowledged."""
    store, group_id = StateStore(str(tmp_path / "state")), kafka.new_group()
    store.ledger.fence(group_id, "run-0")
    delivered_twice = tuple((offset, 2) for offset in range(100))
    epochs = [(1, OffsetRange.of_spans("t", 0, [(0, 99)])),
              (2, OffsetRange.of_spans("t", 0, [(0, 99)], delivered_twice)),
              (3, OffsetRange.of_spans("t", 0, [(100, 149)]))]
    for epoch, offsets in epochs:
        store.ledger.write_epoch(LedgerEntry(group_id, epoch, (offsets,), "run-0", 0, 30_000, EpochStatus.ACQUIRED))
    store.ledger.set_statuses(group_id, {1: EpochStatus.ACKED, 2: EpochStatus.ACKED})

    [group] = admin.describe_groups([str(store.location)], bootstrap_servers=kafka.bootstrap_servers)
    [partition] = group.partitions
    assert (partition.acknowledged, partition.acquired, partition.max_delivery_count) == (100, 50, 2)
    _, out, _ = _cli(capsys, "describe", str(store.location), "--bootstrap-servers", kafka.bootstrap_servers)
    header, row = [line.split() for line in out.split("\n\n")[1].splitlines()[:2]]
    assert row[header.index("ACKNOWLEDGED")] == "100", out  # the group is unknown to Kafka: code 1, said in a note
