"""A share group's settings set (``sharegroup configure``) and shown (``sharegroup describe``) with no Kafka tool.

Real Apache Kafka: the suite's 4.4.0, the previous release (``previous_kafka``, 4.3.1: no dead-letter queue), and a
secured broker whose ACLs decide who may change a group's configs. The broker is the oracle of what a
group's settings are (DescribeConfigs, read through ``describe_group_configs``), and of which values it
refuses: its own reason is what the command prints.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest

from sharegroup_source.admin import ConfigPlan, GroupDescription, configure_group, describe_groups, reset_offsets
from sharegroup_source.kafka.group_configs import SHARE_GROUP_CONFIGS, ConfigChange, GroupConfig, describe_group_configs
from sharegroup_testing.apache_kafka import create_topic
from sharegroup_testing.jars import KAFKA_VERSION_ENV, kafka_version
from sharegroup_testing.kafka_peers import KafkaUnderTest
from sharegroup_testing.secured_kafka import SecuredKafka
from state_store.group import GroupSettings, GroupStore
from tests.test_admin import _cli
from tests.test_secured_admin import _properties

LOCK = "share.record.lock.duration.ms"
LIMIT = "share.delivery.count.limit"
LOCKS = "share.partition.max.record.locks"
RESET = "share.auto.offset.reset"
DLQ = "errors.deadletterqueue.topic.name"
DRY_RUN = "dry run: nothing changed; add --execute to apply"
APPLIED = "applied by the group's coordinator; its members follow the new settings"
COMMITTED = "applied: committed to the group's settings table; its members adopt them at their next heartbeat"
#: Apache Kafka 4.4's share-group configs of a group nothing was set for, on the suite's broker (TEST_SETTINGS
#: sets group.share.heartbeat.interval.ms, the one the broker's own setting decides).
DEFAULTS_4_4 = {
    "errors.deadletterqueue.copy.record.enable": ("false", "default"), DLQ: ("", "default"),
    "share.assignment.interval.ms": ("1000", "default"), RESET: ("latest", "default"), LIMIT: ("5", "default"),
    "share.heartbeat.interval.ms": ("1000", "broker"), "share.isolation.level": ("read_uncommitted", "default"),
    LOCKS: ("2000", "default"), LOCK: ("30000", "default"), "share.renew.acknowledge.enable": ("true", "default"),
    "share.session.timeout.ms": ("45000", "default"),
}


def _rows(out: str) -> list[list[str]]:
    """A printed table's rows and last line, cells split on the padding (no cell here has a space)."""
    return [line.split() for line in out.strip().splitlines() if line]


def _broker_group(kafka: KafkaUnderTest) -> str:
    """A share group that exists on the broker (describe finds it): its start offsets set, no member."""
    topic = kafka.new_topic(1, prefix="configured")
    group = f"configured-{uuid.uuid4().hex[:8]}"
    reset_offsets(group=group, to="earliest", topics=[topic], execute=True, bootstrap_servers=kafka.bootstrap_servers)
    return group


def _configs(servers_or_config: str | dict, group: str) -> dict[str, tuple[str, str]]:
    """What the broker says the group's settings are: key -> (value, source)."""
    config = servers_or_config if isinstance(servers_or_config, dict) else {"bootstrap.servers": servers_or_config}
    configs = describe_group_configs(config, [group])[group]
    assert isinstance(configs, dict), configs
    return {key: (c.value, c.source) for key, c in configs.items()}


def _described_settings(capsys, *args: str) -> dict[str, tuple[str, str]]:
    """``sharegroup describe ARGS --json``'s settings of its one group: key -> (value, source)."""
    code, out, err = _cli(capsys, "describe", *args, "--json")
    assert code == 0, err
    [described] = json.loads(out)
    assert all(list(s) == ["key", "value", "source"] for s in described["settings"]), described["settings"]
    return {s["key"]: (s["value"], s["source"]) for s in described["settings"]}


# -- a broker group, on the suite's Apache Kafka (4.4) ----------------------------------------------------------------
@pytest.fixture
def kafka44(kafka: KafkaUnderTest) -> KafkaUnderTest:
    """The suite's Apache Kafka, when it is 4.4 or later: the release whose configs DEFAULTS_4_4 lists."""
    kafka.require_apache("a share group's configs, which the embedded broker does not keep")
    version = kafka_version()
    if tuple(int(part) for part in version.split(".")[:2]) < (4, 4):
        pytest.skip(f"needs Apache Kafka 4.4 (its dead-letter queue configs); this run's broker is {version} "
                    f"({KAFKA_VERSION_ENV})")
    return kafka


def test_a_dry_run_prints_each_change_and_changes_nothing(kafka44, capsys):
    group, servers = _broker_group(kafka44), kafka44.bootstrap_servers
    code, out, err = _cli(capsys, "configure", "--group", group, "--set", f"{LOCK}=45000", "--set", f"{LIMIT}=3",
                          "--bootstrap-servers", servers)
    assert (code, err) == (0, "")
    assert _rows(out) == [["GROUP", "CONFIG", "VALUE", "NEW-VALUE"], [group, LOCK, "30000", "45000"],
                          [group, LIMIT, "5", "3"], DRY_RUN.split()]
    assert _described_settings(capsys, "--group", group, "--bootstrap-servers", servers) == DEFAULTS_4_4
    assert configure_group(group=group, set={LOCK: 45000}, bootstrap_servers=servers) == ConfigPlan(
        group, None, "broker", (ConfigChange(LOCK, "30000", "45000"),), False)
    assert _configs(servers, group) == DEFAULTS_4_4


def test_execute_sets_each_setting_and_describe_shows_whose_value_applies(kafka44, capsys):
    group, servers = _broker_group(kafka44), kafka44.bootstrap_servers
    wanted = {LOCK: "45000", LIMIT: "3", LOCKS: "500", RESET: "earliest", DLQ: f"dlq.{group}"}
    code, out, err = _cli(capsys, "configure", "--group", group, *[a for k, v in wanted.items() for a in
                                                                    ("--set", f"{k}={v}")],
                          "--bootstrap-servers", servers, "--execute")
    assert (code, err) == (0, "")
    assert _rows(out) == [["GROUP", "CONFIG", "VALUE", "NEW-VALUE"], [group, LOCK, "30000", "45000"],
                          [group, LIMIT, "5", "3"], [group, LOCKS, "2000", "500"], [group, RESET, "latest", "earliest"],
                          [group, DLQ, "''", f"dlq.{group}"], APPLIED.split()]
    expected = {**DEFAULTS_4_4, **{key: (value, "group") for key, value in wanted.items()}}
    assert _configs(servers, group) == expected
    assert _described_settings(capsys, "--group", group, "--bootstrap-servers", servers) == expected

    code, out, err = _cli(capsys, "describe", "--group", group, "--bootstrap-servers", servers)
    assert (code, err) == (0, "")
    settings = out.split("\n\n")[2]
    assert _rows(settings) == [["GROUP", "CONFIG", "VALUE", "SOURCE"],
                               *[[group, key, value or "''", source]
                                 for key, (value, source) in sorted(expected.items())]]


def test_delete_puts_a_setting_back_to_its_default(kafka44, capsys):
    group, servers = _broker_group(kafka44), kafka44.bootstrap_servers
    configure_group(group=group, set={LOCK: "45000", LIMIT: "3"}, execute=True, bootstrap_servers=servers)
    code, out, err = _cli(capsys, "configure", "--group", group, "--delete", LOCK, "--bootstrap-servers", servers,
                          "--execute")
    assert (code, err) == (0, "")
    assert _rows(out) == [["GROUP", "CONFIG", "VALUE", "NEW-VALUE"], [group, LOCK, "45000", "(default)"],
                          APPLIED.split()]
    assert _configs(servers, group) == {**DEFAULTS_4_4, LIMIT: ("3", "group")}

    code, out, err = _cli(capsys, "configure", "--group", group, "--delete", LOCK, "--set", f"{LIMIT}=3",
                          "--bootstrap-servers", servers, "--execute")
    assert (code, out.strip(), err) == (0, f"no change: share group '{group}' already has these settings", "")


@pytest.mark.parametrize(("setting", "reason"), [
    (f"{LOCKS}=100000", f"{LOCKS} must be in the range 100 to 10000 inclusive."),
    (f"{LOCK}=500", f"Invalid value 500 for configuration {LOCK}: Value must be at least 1000"),
])
def test_a_value_out_of_the_brokers_bounds_is_one_line_with_its_reason(kafka44, capsys, setting, reason):
    group, servers = _broker_group(kafka44), kafka44.bootstrap_servers
    for execute in ((), ("--execute",)):
        code, out, err = _cli(capsys, "configure", "--group", group, "--set", f"{LIMIT}=3", "--set", setting,
                              "--bootstrap-servers", servers, *execute)
        assert (code, out) == (1, "")
        assert err.splitlines() == [f"sharegroup: error: share group '{group}': Kafka at bootstrap.servers={servers} "
                                    f"refused {setting}: {reason}"]
    assert _configs(servers, group) == DEFAULTS_4_4


def test_each_refused_setting_is_a_line_of_its_own(kafka44, capsys):
    group, servers = _broker_group(kafka44), kafka44.bootstrap_servers
    code, out, err = _cli(capsys, "configure", "--group", group, "--set", f"{LOCKS}=100000", "--set", f"{LOCK}=500",
                          "--bootstrap-servers", servers, "--execute")
    refused = f"sharegroup: error: share group '{group}': Kafka at bootstrap.servers={servers} refused"
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"{refused} {LOCKS}=100000: {LOCKS} must be in the range 100 to 10000 inclusive.",
        f"{refused} {LOCK}=500: Invalid value 500 for configuration {LOCK}: Value must be at least 1000"]
    assert _configs(servers, group) == DEFAULTS_4_4


def test_a_key_that_is_no_share_group_config_is_refused_by_name(kafka44, capsys):
    group, servers = _broker_group(kafka44), kafka44.bootstrap_servers
    code, out, err = _cli(capsys, "configure", "--group", group, "--set", "share.lock.duration=60000",
                          "--bootstrap-servers", servers, "--execute")
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"sharegroup: error: share group '{group}': 'share.lock.duration' is not a share group's config (did you "
        f"mean {LOCK}?); they are: {', '.join(SHARE_GROUP_CONFIGS)}"]
    assert _configs(servers, group) == DEFAULTS_4_4


def test_configure_says_what_it_lacks(capsys):
    """Before any request: no broker listens at the bootstrap servers given."""
    code, out, err = _cli(capsys, "configure", "--group", "g", "--bootstrap-servers", "127.0.0.1:1")
    assert (code, out, err) == (1, "", "sharegroup: error: configure what? give settings to set or delete\n")
    code, out, err = _cli(capsys, "configure", "--group", "g", "--set", f"{LOCK}=45000")
    assert (code, out) == (1, "")
    assert err == "sharegroup: error: a broker group's settings are its coordinator's: give bootstrap servers\n"
    code, out, err = _cli(capsys, "configure", "--group", "g", "--set", LOCK, "--bootstrap-servers", "127.0.0.1:1")
    assert (code, out) == (1, "")
    assert err == (f"sharegroup: error: --set '{LOCK}': give KEY=VALUE, e.g. share.record.lock.duration.ms=60000\n")


# -- a broker group on the previous Apache Kafka (4.3.1): no dead-letter queue ----------------------------------------
def test_the_previous_kafka_configures_a_lock_duration(previous_kafka, capsys):
    servers, group = previous_kafka.bootstrap_servers, f"previous-{uuid.uuid4().hex[:8]}"
    code, out, err = _cli(capsys, "configure", "--group", group, "--set", f"{LOCK}=45000", "--bootstrap-servers",
                          servers, "--execute")
    assert (code, err) == (0, "")
    assert _rows(out) == [["GROUP", "CONFIG", "VALUE", "NEW-VALUE"], [group, LOCK, "30000", "45000"],
                          APPLIED.split()]
    assert _configs(servers, group)[LOCK] == ("45000", "group")
    assert DLQ not in _configs(servers, group)


def test_the_previous_kafka_refuses_a_dead_letter_topic_in_one_line(previous_kafka, capsys):
    servers, group = previous_kafka.bootstrap_servers, f"previous-{uuid.uuid4().hex[:8]}"
    code, out, err = _cli(capsys, "configure", "--group", group, "--set", f"{DLQ}=dlq.{group}", "--bootstrap-servers",
                          servers, "--execute")
    assert (code, out) == (1, "")
    assert err.splitlines() == [f"sharegroup: error: share group '{group}': Kafka at bootstrap.servers={servers} "
                                f"refused {DLQ}=dlq.{group}: Unknown group config name: {DLQ}"]


# -- a delta group: its settings row ----------------------------------------------------------------------------------
def test_a_delta_groups_settings_are_configured_and_described(tmp_path, capsys):
    location = str(tmp_path / "group")
    GroupStore.open(location, "g", {})
    args = ("configure", location, "--set", f"{LOCK}=60000", "--set", f"{RESET}=earliest", "--delete", LIMIT)
    code, out, err = _cli(capsys, *args)
    assert (code, err) == (0, "")
    assert _rows(out) == [["GROUP", "CONFIG", "VALUE", "NEW-VALUE"], ["g", LOCK, "30000", "60000"],
                          ["g", RESET, "latest", "earliest"], DRY_RUN.split()]
    assert GroupStore.existing(location).settings == GroupSettings()

    code, out, err = _cli(capsys, *args, "--execute")
    assert (code, err) == (0, "")
    assert _rows(out) == [["GROUP", "CONFIG", "VALUE", "NEW-VALUE"], ["g", LOCK, "30000", "60000"],
                          ["g", RESET, "latest", "earliest"], COMMITTED.split()]
    assert GroupStore.existing(location).settings == GroupSettings(lock_duration_ms=60000, auto_offset_reset="earliest")
    expected = {LIMIT: ("5", "group"), LOCKS: ("2000", "group"), RESET: ("earliest", "group"), LOCK: ("60000", "group")}
    assert _described_settings(capsys, location) == expected
    [described] = describe_groups([location])
    assert described.settings == tuple(GroupConfig(key, *shown) for key, shown in sorted(expected.items()))
    assert GroupDescription.from_dict(json.loads(json.dumps(described.to_dict()))) == described

    code, out, err = _cli(capsys, "configure", location, "--delete", LOCK, "--execute")
    assert (code, err) == (0, "")
    assert _rows(out)[1] == ["g", LOCK, "60000", "30000"]
    assert GroupStore.existing(location).settings == GroupSettings(auto_offset_reset="earliest")


def test_a_delta_group_refuses_what_its_settings_row_cannot_hold(tmp_path, capsys):
    location = str(tmp_path / "group")
    GroupStore.open(location, "g", {})
    where = f"sharegroup: error: share group 'g' at {location}"
    refusals = {
        f"{LOCK}=0": f"{where}: {LOCK} must be at least 1, got 0",
        f"{LIMIT}=three": f"{where}: {LIMIT}='three' is not an integer",
        "share.isolation.level=read_committed": (
            f"{where}: share.isolation.level is a config of coordinator=broker share groups (its broker applies it); "
            f"a coordinator=delta group has {LOCK}, {LIMIT}, {LOCKS}, {RESET}"),
    }
    for setting, line in refusals.items():
        code, out, err = _cli(capsys, "configure", location, "--set", setting, "--execute")
        assert (code, out, err.splitlines()) == (1, "", [line])
    assert GroupStore.existing(location).settings == GroupSettings()


def test_configure_where_there_is_no_delta_group_says_how_to_name_a_broker_group(tmp_path, capsys):
    code, out, err = _cli(capsys, "configure", str(tmp_path), "--set", f"{LOCK}=60000")
    assert (code, out) == (1, "")
    assert re.fullmatch(r"sharegroup: error: no share group at .*\. A LOCATION is a coordinator=delta group's "
                        r"groupLocation; a coordinator=broker group is configured by its id: --group G\n", err), err


# -- a secured broker: ALTER_CONFIGS and DESCRIBE_CONFIGS on the GROUP ------------------------------------------------
def _secured_group(secured: SecuredKafka) -> tuple[str, str]:
    """A share group on the secured broker (made by its super user) and its topic."""
    topic = f"configured-{uuid.uuid4().hex[:6]}"
    create_topic(secured.admin, topic, 1)
    group = f"configured-{topic}"
    reset_offsets(group=group, to="earliest", topics=[topic], execute=True, kafka_config=secured.client_config("admin"))
    return group, topic


@pytest.mark.secured
def test_only_a_user_allowed_to_alter_the_groups_configs_configures_it(secured_kafka, tmp_path, capsys):
    secured = secured_kafka
    group, _ = _secured_group(secured)
    secured.allow("alice", "GROUP", group, "DESCRIBE_CONFIGS", "ALTER_CONFIGS")
    secured.allow("bob", "GROUP", group, "DESCRIBE_CONFIGS")
    admin = secured.client_config("admin")

    code, out, err = _cli(capsys, "configure", "--group", group, "--set", f"{LOCK}=45000", "--execute",
                          "--command-config", str(_properties(secured, tmp_path, "alice")))
    assert (code, err) == (0, "")
    assert _rows(out)[1] == [group, LOCK, "30000", "45000"]
    assert _configs(admin, group)[LOCK] == ("45000", "group")

    code, out, err = _cli(capsys, "configure", "--group", group, "--set", f"{LOCK}=50000", "--execute",
                          "--command-config", str(_properties(secured, tmp_path, "bob")))
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"sharegroup: error: User:bob is not authorized to ALTER_CONFIGS on GROUP {group} at bootstrap.servers="
        f"{secured.bootstrap_servers} (Group authorization failed.); kafka-acls --add --allow-principal User:bob "
        f"--operation ALTER_CONFIGS --group {group}; setting a share group's configs needs DESCRIBE_CONFIGS and "
        "ALTER_CONFIGS on its GROUP"]
    assert secured.users["bob"] not in out + err
    assert _configs(admin, group)[LOCK] == ("45000", "group")


@pytest.mark.secured
def test_a_group_whose_settings_the_user_may_not_read_is_described_without_them(secured_kafka, capsys, tmp_path):
    secured = secured_kafka
    group, topic = _secured_group(secured)
    secured.allow("alice", "GROUP", group, "DESCRIBE")
    secured.allow("alice", "TOPIC", topic, "DESCRIBE")
    alice = secured.client_config("alice")

    [described] = describe_groups(groups=[group], kafka_config=alice)
    assert (described.error, described.settings) == (None, ())
    assert [(p.topic, p.partition, p.spso) for p in described.partitions] == [(topic, 0, 0)]
    assert described.note == (
        f"its settings could not be read: User:alice is not authorized to DESCRIBE_CONFIGS on GROUP {group} at "
        f"bootstrap.servers={secured.bootstrap_servers} (Group authorization failed.); kafka-acls --add "
        f"--allow-principal User:alice --operation DESCRIBE_CONFIGS --group {group}")
    code, out, err = _cli(capsys, "describe", "--group", group, "--command-config",
                          str(_properties(secured, tmp_path, "alice")))
    assert (code, err) == (0, "")
    assert out.strip().splitlines()[-1] == f"{group}: {described.note}"

    secured.allow("alice", "GROUP", group, "DESCRIBE_CONFIGS")
    [described] = describe_groups(groups=[group], kafka_config=alice)
    assert described.note is None
    assert {s.key: (s.value, s.source) for s in described.settings}[LOCK] == ("30000", "default")
