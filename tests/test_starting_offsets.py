"""The share group from Python: ``startingOffsets`` and ``groupConfig.*`` set the group's configs, with no Kafka tool.

A new share group starts at the log end (Kafka's default ``share.auto.offset.reset``), so a user's
first query over a topic that holds records read nothing, and the cure needed Kafka's shell tools.
``startingOffsets=earliest`` (Spark's option) now sets the group's start before its first fetch, on a
broker group and on a Delta group alike, and changes nothing on a group that has fetched already,
saying so. ``groupConfig.<key>`` sets any share-group config where the group's differs, old -> new
in the log; Kafka's refusal of a value is one line with its reason. On Apache Kafka 4.4.0 (the
suite's broker) and 4.3.1 (the previous release, which lacks the dead-letter-queue configs).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from pathlib import Path

import pytest

from sharegroup_source import DeltaShareConsumer
from sharegroup_source.coordinators.broker.group_setup import set_up_group as broker_setup
from sharegroup_source.coordinators.delta.group_setup import set_up_group as delta_setup
from sharegroup_source.coordinators.delta.member import GroupMember
from sharegroup_source.driver.micro_batch import MicroBatchDriver
from sharegroup_source.errors import GroupConfigError
from sharegroup_source.kafka.group_configs import read_group_configs
from sharegroup_source.options import SourceOptions
from sharegroup_testing.jars import kafka_version
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from state_store import EpochStatus
from state_store.group import GroupSettings, GroupStore
from tests.conftest import PREVIOUS_KAFKA
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup

RECORDS = 10_000
PARTITIONS = 4
LOGGERS = ("sharegroup_source.coordinators.broker.group_setup", "sharegroup_source.coordinators.delta.group_setup")


def _new_setup(kafka: KafkaUnderTest, tmp_path: Path, records: int = RECORDS) -> tuple[StreamSetup, set]:
    """A topic already holding ``records`` records and a share group nobody configured (Kafka's defaults: it would
    start at the log end)."""
    setup = StreamSetup(kafka, kafka.new_topic(PARTITIONS), f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    return setup, kafka.produce_numbered(setup.topic, records, PARTITIONS)


def _delta(setup: StreamSetup) -> dict[str, str]:
    return {"coordinator": "delta", "groupLocation": str(setup.root / "group")}


def _group_start(setup: StreamSetup, coordinator: str) -> str:
    if coordinator == "delta":
        return GroupStore.existing(str(setup.root / "group")).settings.auto_offset_reset
    return read_group_configs(setup.kafka.config(), setup.group)["share.auto.offset.reset"].value


@pytest.mark.spark
@pytest.mark.parametrize("coordinator", ["broker", "delta"])
def test_a_first_query_with_starting_offsets_earliest_reads_what_the_topic_holds(spark, kafka, tmp_path,
                                                                                 coordinator):
    setup, produced = _new_setup(kafka, tmp_path)
    assert coordinator == "delta" or _group_start(setup, coordinator) == "latest", "Kafka's default for a new group"
    query = setup.file_sink(spark, startingOffsets="earliest", **(_delta(setup) if coordinator == "delta" else {}))
    query.awaitTermination(240)
    assert query.exception() is None
    rows = setup.sink_rows(spark)
    assert_exactly_once(rows, produced)
    assert {dc for _, _, dc in rows} == {1}
    assert setup.every_epoch_acked()
    assert _group_start(setup, coordinator) == "earliest"


@pytest.mark.parametrize("coordinator", ["broker", "delta"])
def test_starting_offsets_changes_nothing_on_a_group_that_fetched_and_says_so(kafka, tmp_path, caplog, coordinator):
    setup, _ = _new_setup(kafka, tmp_path, records=40)
    extra = _delta(setup) if coordinator == "delta" else {}
    first = _drain(setup, 40, startingOffsets="earliest", **extra)
    assert first == 40
    later = kafka.produce_numbered(setup.topic, 8, PARTITIONS, first=40)
    another_query = dataclasses.replace(setup, root=tmp_path / "another-query")  # its own state, the same group
    with caplog.at_level(logging.INFO, logger=LOGGERS[coordinator == "delta"]):
        second = _drain(another_query, len(later), startingOffsets="latest", **extra)
    assert second == len(later), "the group went on from where it was: the records produced since, not the log end"
    said = [r.getMessage() for r in caplog.records if "already has a position" in r.getMessage()]
    assert len(said) == 1, said
    assert "startingOffsets=latest changes nothing" in said[0]
    target = f"--group {setup.group}" if coordinator == "broker" else str(setup.root / "group")
    assert f"sharegroup reset-offsets {target} --topic {setup.topic} --to-latest" in said[0]
    assert _group_start(setup, coordinator) == "earliest", "the group's start was not changed"


def test_starting_offsets_on_a_delta_group_a_worker_started_there_says_so_without_a_warning(kafka, tmp_path, caplog):
    """A worker (DeltaShareConsumer) joined the new Delta group first, at earliest, and gave back what it took: the
    query's startingOffsets=earliest is where the group is, which is said at INFO, naming the worker."""
    setup, _ = _new_setup(kafka, tmp_path, records=40)
    extra = _delta(setup)
    config = {"bootstrap.servers": kafka.bootstrap_servers, "group.id": setup.group,
              "group.location": extra["groupLocation"], "share.auto.offset.reset": "earliest"}
    with DeltaShareConsumer(config) as worker:
        worker.subscribe([setup.topic])
        wait_for(lambda: worker.poll(1), 60, "the worker's first records", interval_s=0)
    with caplog.at_level(logging.INFO, logger=LOGGERS[1]):
        assert _drain(setup, 40, startingOffsets="earliest", **extra) == 40
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "startingOffsets=earliest" in r.getMessage()]
    assert len(said) == 1, said
    level, line = said[0]
    print(line)
    assert level == "INFO" and "already has a position" not in line, said
    assert line.startswith(f"share group {setup.group} has started already: its first member, a "
                           "DeltaShareConsumer worker on "), line
    assert ("at share.auto.offset.reset=earliest as startingOffsets=earliest asks: the query goes on from where the "
            "group is") in line, line


def test_starting_offsets_on_a_broker_group_started_there_says_so_without_a_warning(kafka, tmp_path, caplog):
    """A second query joins a share group the first one started at earliest: its startingOffsets=earliest is where
    the group is, said at INFO, with the way to read again what the group delivered before."""
    kafka.require_apache("a share group's configs")
    setup, _ = _new_setup(kafka, tmp_path, records=40)
    assert _drain(setup, 40, startingOffsets="earliest") == 40
    later = kafka.produce_numbered(setup.topic, 8, PARTITIONS, first=40)
    another_query = dataclasses.replace(setup, root=tmp_path / "another-query")
    with caplog.at_level(logging.INFO, logger=LOGGERS[0]):
        assert _drain(another_query, len(later), startingOffsets="earliest") == len(later)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "startingOffsets=earliest" in r.getMessage()]
    assert len(said) == 1, said
    level, line = said[0]
    assert level == "INFO" and line.startswith(f"share group {setup.group} has started already ("), said
    assert f"sharegroup reset-offsets --group {setup.group} --topic {setup.topic} --to-earliest" in line, line


def _drain(setup: StreamSetup, expected: int, **options: str) -> int:
    """Run a driver as Spark would (acquire, plan, settle) until ``expected`` records were acquired and every epoch
    settled; returns how many it acquired. A run that gets more than ``expected`` fails."""
    driver = MicroBatchDriver(setup.source_options(**options))
    acquired = 0
    try:
        start = driver.initial_offset()

        def acquired_all() -> bool:
            nonlocal start, acquired
            end = driver.latest_offset(start, None)
            if end != start:
                driver.plan(start, end)
                acquired += driver.store.ledger.get(setup.group, end["epoch"]).record_count
                start = end
            return acquired >= expected

        wait_for(acquired_all, 90, f"{expected} records", interval_s=0, state=lambda: f"{acquired} acquired")
        driver.commit(start["epoch"])
    finally:
        driver.stop()
    assert {e.status for e in driver.store.ledger.entries(setup.group)} == {EpochStatus.ACKED}
    return acquired


def _has_dlq(version: str) -> bool:
    """Kafka 4.4 added the share group's dead-letter-queue configs (KIP-1191)."""
    return tuple(int(part) for part in version.split(".")[:2]) >= (4, 4)


SETTINGS = {"share.record.lock.duration.ms": "45000", "share.delivery.count.limit": "3",
            "share.partition.max.record.locks": "500"}


@pytest.fixture(params=["default", "previous"])
def versioned_kafka(request, kafka: KafkaUnderTest) -> tuple[KafkaUnderTest, str]:
    """The suite's Apache Kafka (4.4.0), and the previous release (4.3.1), with their versions."""
    kafka.require_apache("group configs are Apache Kafka's (the embedded broker has none)")
    if request.param == "default":
        return kafka, kafka_version()
    return request.getfixturevalue("previous_kafka"), PREVIOUS_KAFKA


def test_group_configs_are_set_at_start_where_they_differ(versioned_kafka, tmp_path, caplog):
    kafka, version = versioned_kafka
    setup, _ = _new_setup(kafka, tmp_path, records=600)
    settings = {**SETTINGS, **({"errors.deadletterqueue.topic.name": f"dlq.{setup.group}"} if _has_dlq(version)
                               else {})}
    options = {f"groupConfig.{key}": value for key, value in settings.items()}
    with caplog.at_level(logging.WARNING, logger=LOGGERS[0]):
        assert _drain(setup, 600, startingOffsets="earliest", **options) == 600
    configs = read_group_configs(kafka.config(), setup.group)
    assert {key: (configs[key].value, configs[key].source) for key in [*settings, "share.auto.offset.reset"]} == {
        **{key: (value, "group") for key, value in settings.items()}, "share.auto.offset.reset": ("earliest", "group")}
    assert configs["share.isolation.level"].source == "default"
    said = sorted(r.getMessage() for r in caplog.records if "as the option" in r.getMessage())
    assert said == sorted([
        f"share group {setup.group}: share.auto.offset.reset: latest -> earliest, as the option startingOffsets asks "
        "(every member of the group follows it)",
        *(f"share group {setup.group}: {key}: {old} -> {settings[key]}, as the option groupConfig.{key} asks "
          "(every member of the group follows it)"
          for key, old in [("share.record.lock.duration.ms", "30000"), ("share.delivery.count.limit", "5"),
                           ("share.partition.max.record.locks", "2000"), ("errors.deadletterqueue.topic.name", "''")]
          if key in settings)])
    caplog.clear()
    driver = MicroBatchDriver(setup.source_options(**options))  # the group has them now: nothing is changed
    try:
        assert driver._coordinator.lock_duration_ms == 45_000, "the lock duration the broker has, not lockDurationMs"
    finally:
        driver.stop()
    assert not [r for r in caplog.records if "as the option" in r.getMessage()]


def test_a_value_kafka_refuses_fails_the_start_in_one_line_and_changes_nothing(versioned_kafka, tmp_path):
    kafka, version = versioned_kafka
    setup, _ = _new_setup(kafka, tmp_path, records=0)
    refused = {"groupConfig.share.partition.max.record.locks": "100000",
               "groupConfig.share.record.lock.duration.ms": "60000"}
    if not _has_dlq(version):
        refused["groupConfig.errors.deadletterqueue.topic.name"] = f"dlq.{setup.group}"
    with pytest.raises(GroupConfigError) as error:
        MicroBatchDriver(setup.source_options(**refused))
    message = str(error.value)
    assert "\n" not in message
    assert "share.partition.max.record.locks=100000: share.partition.max.record.locks must be " in message
    assert "share.record.lock.duration.ms" not in message, "a value Kafka takes is not named"
    if not _has_dlq(version):
        assert f"errors.deadletterqueue.topic.name=dlq.{setup.group}: Unknown group config name" in message
    configs = read_group_configs(kafka.config(), setup.group)
    assert configs["share.record.lock.duration.ms"].value == "30000", "nothing changes unless Kafka takes every value"


def test_a_delta_query_sets_its_groups_settings_and_live_members_adopt_them(kafka, tmp_path, caplog):
    setup, _ = _new_setup(kafka, tmp_path, records=0)
    location = str(setup.root / "group")
    # a worker already in the group, renewing (and heartbeating) every second: a third of its 3 s lock
    worker = GroupMember(GroupStore.open(location, setup.group, {"share.record.lock.duration.ms": 3000}), "worker-1",
                         "worker", kafka.config(), [setup.topic])
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGERS[1]):
            driver = MicroBatchDriver(setup.source_options(**_delta(setup), **{
                "groupConfig.share.delivery.count.limit": "3", "groupConfig.share.record.lock.duration.ms": "6000",
                "groupConfig.share.partition.max.record.locks": "2000"}))
        driver.stop()
        said = sorted(r.getMessage() for r in caplog.records if "as the option" in r.getMessage())
        assert said == [f"share group {setup.group} at {location}: {key}: {old} -> {new}, as the option "
                        f"groupConfig.{key} asks (every member of the group follows it)"
                        for key, old, new in [("share.delivery.count.limit", 5, 3),
                                              ("share.record.lock.duration.ms", 3000, 6000)]], "only what differs"
        wanted = GroupSettings(lock_duration_ms=6000, delivery_count_limit=3)
        assert GroupStore.existing(location).settings == wanted
        wait_for(lambda: worker.group.settings == wanted, 30, "the live worker to adopt the group's new settings",
                 state=lambda: str(worker.group.settings))
        assert worker.group.share_state.config.delivery_attempt_limit == 3, "the worker's state machine follows them"
    finally:
        worker.close()


def test_starting_offsets_is_read_in_a_querys_first_run_only(tmp_path):
    """As Spark's Kafka source reads it: a restarted query goes on from its group's position, asking nothing."""
    unreachable = {"kafka.bootstrap.servers": "127.0.0.1:9", "kafka.group.id": "g", "subscribe": "t",
                   "stateLocation": str(tmp_path / "state"), "startingOffsets": "earliest"}
    assert broker_setup(SourceOptions.parse(unreachable), first_run=False) is None, "nothing asked of the cluster"
    delta = SourceOptions.parse({**unreachable, "coordinator": "delta", "groupLocation": str(tmp_path / "group")})
    group = GroupStore.open(str(tmp_path / "group"), "g", {})
    delta_setup(group, delta, first_run=False)
    assert GroupStore.existing(str(tmp_path / "group")).settings.auto_offset_reset == "latest"
    delta_setup(group, delta, first_run=True)
    assert GroupStore.existing(str(tmp_path / "group")).settings.auto_offset_reset == "earliest"
