"""Admin describe of broker share groups on three Apache Kafka brokers: many coordinators in one call, and
coordinators that die or freeze while they are asked.

A share group's coordinator is the leader of its ``__consumer_offsets`` partition (Kafka's
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``), so the tests pick group ids that
land on every partition and, with one leader election, on every broker. Groups are created without
a member, by AlterShareGroupOffsets (``reset_offsets``): each starts at its own offset, so a group
described with another group's numbers shows. Nothing is mocked: the brokers are real, their faults
are kill -9 and SIGSTOP, and every wait polls (``wait_for``) or is bounded.
"""

from __future__ import annotations

import re
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import NewTopic

from sharegroup_source import cli
from sharegroup_source.admin import GroupDescription, describe_groups, reset_offsets
from sharegroup_source.kafka.share_protocol import KAFKA_TIMEOUT_S, NO_SHARE_GROUP_ADMIN
from sharegroup_testing.kafka_cluster import CLUSTER_SETTINGS, OFFSETS_TOPIC, SHARE_STATE_TOPIC, KafkaCluster
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

OFFSETS_PARTITIONS = int(CLUSTER_SETTINGS["offsets.topic.num.partitions"])
#: Groups per ``__consumer_offsets`` partition: 12 groups, 4 on each coordinator.
GROUPS_PER_PARTITION = 4
RECORDS_PER_PARTITION = 20
#: What a describe may take beyond one Kafka request's timeout: the stages a dead coordinator does not
#: hold up (bootstrap, DescribeShareGroupOffsets and ListOffsets of the other groups, each one round trip
#: to live nodes) and the JVMs' scheduling on a small machine.
MARGIN_S = 10.0
BOUND_S = KAFKA_TIMEOUT_S + MARGIN_S


# -- where groups live -----------------------------------------------------------------------------------
def _java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit overflow)."""
    value = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        value = (31 * value + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _offsets_partition(group_id: str) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's ``Utils.abs(hashCode) % partitions``."""
    code = _java_hash(group_id)
    return (0 if code == -(1 << 31) else abs(code)) % OFFSETS_PARTITIONS


def _group_ids() -> list[str]:
    """Fresh group ids, GROUPS_PER_PARTITION on each ``__consumer_offsets`` partition."""
    prefix = f"adm-{uuid.uuid4().hex[:6]}"
    by_partition: dict[int, list[str]] = {p: [] for p in range(OFFSETS_PARTITIONS)}
    i = 0
    while any(len(ids) < GROUPS_PER_PARTITION for ids in by_partition.values()):
        group = f"{prefix}-{i}"
        if len(by_partition[_offsets_partition(group)]) < GROUPS_PER_PARTITION:
            by_partition[_offsets_partition(group)].append(group)
        i += 1
    return sorted(g for ids in by_partition.values() for g in ids)


def _spread_coordinators(cluster: KafkaCluster) -> dict[int, int]:
    """Each ``__consumer_offsets`` partition's leader, after a preferred leader election: the three
    partitions' preferred replicas are three brokers, but a node killed by an earlier test hands its
    leaderships over and gets them back only at the next automatic rebalance (minutes)."""
    partitions = [TopicPartition(OFFSETS_TOPIC, p) for p in range(OFFSETS_PARTITIONS)]
    leaders: dict[int, int] = {}
    elections: list[object] = []

    def spread() -> bool:
        leaders.update({p: cluster.leader_of(OFFSETS_TOPIC, p) for p in range(OFFSETS_PARTITIONS)})
        if len(set(leaders.values())) == min(OFFSETS_PARTITIONS, len(cluster.nodes)):
            return True
        # asked again until it takes: a preferred replica that a restart just brought back is not in the
        # ISR yet, and the election refuses it (PREFERRED_LEADER_NOT_AVAILABLE) until it caught up
        elections[:] = [cluster.admin.elect_leaders(ElectionType.PREFERRED, partitions).result(30)]
        return False

    wait_for(spread, 60, "a different leader for each __consumer_offsets partition", interval_s=1,
             state=lambda: f"leaders {leaders}, last election {elections}")
    return dict(leaders)


def _internal_topics(kafka: KafkaUnderTest) -> None:
    """``__consumer_offsets`` and ``__share_group_state`` exist: Kafka creates them when a first group needs
    them, so on a fresh cluster a throw-away group is given start offsets (its topic is deleted again)."""
    if {OFFSETS_TOPIC, SHARE_STATE_TOPIC} <= set(kafka.admin.list_topics(timeout=10).topics):
        return
    topic = kafka.new_topic(1, prefix="adm-warmup")
    reset_offsets(group=f"adm-warmup-{uuid.uuid4().hex[:6]}", to="earliest", topics=[topic], execute=True,
                  bootstrap_servers=kafka.bootstrap_servers)
    kafka.admin.delete_topics([topic])[topic].result(30)


def _share_coordinator(kafka: KafkaUnderTest) -> int:
    """The share coordinator of every group: the leader of the one ``__share_group_state`` partition."""
    assert kafka.cluster is not None
    _internal_topics(kafka)
    return kafka.cluster.share_coordinator()


def _topic(kafka: KafkaUnderTest, leaders: list[int]) -> str:
    """A topic whose partition p is led by ``leaders[p]`` (its first replica), RECORDS_PER_PARTITION records each."""
    assert kafka.cluster is not None
    cluster = kafka.cluster
    name = f"adm-{uuid.uuid4().hex[:8]}"
    assignment = [[leader, *(n for n in cluster.nodes if n != leader)] for leader in leaders]
    kafka.admin.create_topics([NewTopic(name, num_partitions=len(leaders), replica_assignment=assignment)]
                              )[name].result(30)
    wait_for(lambda: [cluster.leader_of(name, p) for p in range(len(leaders))] == leaders, 30,
             f"{name}'s partitions led by {leaders}")
    kafka.produce_numbered(name, RECORDS_PER_PARTITION * len(leaders), len(leaders))
    return name


@dataclass
class Groups:
    """Share groups with no member, each started at its own offset of every partition of ``topic``."""

    topic: str
    partitions: int
    start: dict[str, int]  # group id: the start offset (SPSO) it was given
    leaders: dict[int, int]  # __consumer_offsets partition: its leader when the groups were made

    @property
    def ids(self) -> list[str]:
        return list(self.start)

    def coordinator(self, group_id: str) -> int:
        return self.leaders[_offsets_partition(group_id)]

    def expected(self, group_id: str) -> list[tuple[str, int, int | None, int | None, int | None, str | None]]:
        """(topic, partition, spso, lag, log end, error) of each share-partition, as set."""
        spso = self.start[group_id]
        return [(self.topic, p, spso, RECORDS_PER_PARTITION - spso, RECORDS_PER_PARTITION, None)
                for p in range(self.partitions)]


def _make_groups(kafka: KafkaUnderTest, topic_leaders: Callable[[dict[int, int]], list[int]]) -> Groups:
    """Coordinators spread over the brokers, a topic led as ``topic_leaders(coordinators)`` says, and
    12 groups on it, group i starting at offset i: AlterShareGroupOffsets creates the group, no member."""
    assert kafka.cluster is not None
    _internal_topics(kafka)
    leaders = _spread_coordinators(kafka.cluster)
    layout = topic_leaders(leaders)
    topic = _topic(kafka, layout)
    start: dict[str, int] = {}
    for offset, group in enumerate(_group_ids()):
        plan = reset_offsets(group=group, to=offset, topics=[topic], execute=True,
                             bootstrap_servers=kafka.bootstrap_servers)
        assert plan.executed and [(r.partition, r.new_start_offset) for r in plan.partitions] == [
            (p, offset) for p in range(len(layout))], plan
        start[group] = offset
    groups = Groups(topic, len(layout), start, leaders)
    # AlterShareGroupOffsets answers before the coordinator has written that the share-partitions are
    # initialized: a coordinator frozen in between leaves its successor a group with no start offsets
    # and no member to initialize them again. Every group describes as set before a test's fault.
    wait_for(lambda: all(_partitions(d) == groups.expected(d.group_id) for d in describe_groups(
        groups=groups.ids, bootstrap_servers=kafka.bootstrap_servers)), 60, "every group's start offsets",
        interval_s=0.5)
    return groups


@pytest.fixture
def topics(kafka_cluster):
    """Topics a test made, deleted afterwards: every replica left behind would have to catch up at each
    later restart of a node."""
    made: list[str] = []
    yield made
    if made:
        kafka_cluster.cluster.heal()  # a node the test killed or froze is back first: deleting waits for none
    for topic in made:
        kafka_cluster.admin.delete_topics([topic])[topic].result(30)


# -- what describe answered -------------------------------------------------------------------------------
def _node(description: GroupDescription) -> int | None:
    """The coordinator's node id, from ``host:port (id)``."""
    found = re.fullmatch(r".+:\d+ \((\d+)\)", description.coordinator or "")
    return int(found.group(1)) if found else None


def _partitions(description: GroupDescription) -> list[tuple[str, int, int | None, int | None, int | None, str | None]]:
    return [(p.topic, p.partition, p.spso, p.lag, p.log_end_offset, p.error) for p in description.partitions]


def _shown(descriptions: list[GroupDescription]) -> str:
    return "\n".join(f"  {d.group_id} state={d.state} coordinator={d.coordinator} error={d.error} "
                     f"partitions={[(p.partition, p.spso, p.lag, p.log_end_offset) for p in d.partitions]}"
                     for d in descriptions)


def _within(what: str, call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()`` in a thread, which must return within BOUND_S; its value and how long it took."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # re-raised in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"admin-{what}", daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(BOUND_S)
    took = time.monotonic() - started
    assert not thread.is_alive(), (f"{what} hangs: still running after {took:.1f}s (bound: KAFKA_TIMEOUT_S "
                                   f"{KAFKA_TIMEOUT_S:.0f}s + {MARGIN_S:.0f}s)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"], took


def _cli(capsys, *args: str) -> tuple[int, str, str, float]:
    """``sharegroup ARGS`` in this process, bounded as :func:`_within`: exit status, stdout, stderr, seconds."""
    earlier = capsys.readouterr()
    code, took = _within("sharegroup " + " ".join(args[:1]), lambda: cli.main(list(args)))
    out, err = capsys.readouterr()
    sys.stdout.write(earlier.out)
    sys.stderr.write(earlier.err)
    return code, out, err, took


def _group_args(groups: list[str]) -> list[str]:
    return [arg for group in groups for arg in ("--group", group)]


# -- tests ------------------------------------------------------------------------------------------------
def test_groups_of_three_coordinators_in_one_call_cost_one_request_per_coordinator(kafka_cluster, topics):
    cluster = kafka_cluster.cluster
    groups = _make_groups(kafka_cluster, lambda leaders: sorted(cluster.nodes))  # the topic led by every node
    topics.append(groups.topic)
    coordinators = {groups.coordinator(g) for g in groups.ids}

    requests: Counter[str] = Counter()
    described = describe_groups(groups=groups.ids, bootstrap_servers=kafka_cluster.bootstrap_servers,
                                requests=requests)
    print(f"{len(described)} groups, requests {dict(requests)}\n{_shown(described)}")

    assert sorted(d.group_id for d in described) == groups.ids
    seen = {_node(d) for d in described}
    assert len(seen) >= 2, (f"all {len(described)} groups have one coordinator ({seen}): this test needs groups "
                            f"of several (__consumer_offsets leaders {groups.leaders}, group ids {groups.ids})")
    for d in described:
        assert (d.kind, d.state, d.error, d.members) == ("broker", "Empty", None, ()), d
        assert _node(d) == groups.coordinator(d.group_id), (
            f"{d.group_id} (__consumer_offsets partition {_offsets_partition(d.group_id)}, led by "
            f"{groups.coordinator(d.group_id)}) described as coordinated by {d.coordinator}")
        assert _partitions(d) == groups.expected(d.group_id), d
    assert seen == coordinators
    # one FindCoordinator for all 12, one ShareGroupDescribe per coordinator, DescribeShareGroupOffsets one per
    # group (all in flight at once: Kafka answers a many-group one seconds late), one ListOffsets per leader
    topic_leaders = {cluster.leader_of(groups.topic, p) for p in range(groups.partitions)}
    assert (requests["FindCoordinatorRequest"], requests["ShareGroupDescribeRequest"],
            requests["DescribeShareGroupOffsetsRequest"], requests["ListOffsetsRequest"]) == (
        1, len(seen), len(described), len(topic_leaders)), requests

    # --all-groups: one ListGroups per broker says which groups each coordinates; no FindCoordinator at all
    listed_requests: Counter[str] = Counter()
    listed = describe_groups(all_groups=True, bootstrap_servers=kafka_cluster.bootstrap_servers,
                             requests=listed_requests)
    print(f"all groups: {len(listed)}, requests {dict(listed_requests)}")
    assert [d for d in listed if d.group_id is None] == [], "a broker did not list its groups"
    ours = {d.group_id: d for d in listed if d.group_id in groups.start}
    assert ours == {d.group_id: d for d in described}
    listing = {_node(d) for d in listed}
    described_listed = [d for d in listed if d.state is not None]  # ShareGroupDescribe answered: offsets asked
    assert (listed_requests["ListGroupsRequest"], listed_requests["FindCoordinatorRequest"],
            listed_requests["ShareGroupDescribeRequest"], listed_requests["DescribeShareGroupOffsetsRequest"]) == (
        len(cluster.nodes), 0, len(listing), len(described_listed)), listed_requests


@pytest.mark.timing
@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_a_dead_coordinators_groups_fail_or_move_and_the_others_are_described(kafka_cluster, topics, fault):
    """One coordinator killed (kill -9: connections refused) or frozen (SIGSTOP: connections open, nothing
    answers) just before the describe. Its groups get an error, or, once the controller fenced it (4 s)
    and another broker loaded its ``__consumer_offsets`` partition, their answer from the new coordinator;
    the other groups are described as if nothing happened, and the call returns within the bound.

    The topic's partitions and the share coordinator are on another node, so the fault is the group
    coordinator's alone. bootstrap.servers names the two live nodes, so that the time bound measures the
    coordinator's fault alone (a frozen node in bootstrap.servers costs a bootstrap attempt: see
    test_a_frozen_node_in_bootstrap_servers_costs_no_group)."""
    cluster = kafka_cluster.cluster
    share_coordinator = _share_coordinator(kafka_cluster)
    groups = _make_groups(kafka_cluster, lambda leaders: [share_coordinator] * 2)
    topics.append(groups.topic)
    victim = min(n for n in set(groups.leaders.values()) if n != share_coordinator)
    on_victim = {g for g in groups.ids if groups.coordinator(g) == victim}
    assert on_victim and len(on_victim) < len(groups.ids), (victim, groups.leaders)
    live = ",".join(node.address for n, node in cluster.nodes.items() if n != victim)

    {"kill": cluster.kill, "pause": cluster.pause}[fault](victim)
    requests: Counter[str] = Counter()
    described, took = _within("describe_groups", lambda: describe_groups(
        groups=groups.ids, bootstrap_servers=live, requests=requests))
    print(f"{fault} node {victim} (coordinator of {len(on_victim)} groups): describe took {took:.1f}s, "
          f"requests {dict(requests)}\n{_shown(described)}")

    assert sorted(d.group_id for d in described) == groups.ids
    moved, failed, loading = [], [], []
    for d in described:
        if d.group_id not in on_victim:
            assert (d.state, d.error, _node(d)) == ("Empty", None, groups.coordinator(d.group_id)), d
            assert _partitions(d) == groups.expected(d.group_id), d
        elif d.error is None:  # asked again, of the broker that took the partition over
            moved.append(d.group_id)
            assert d.state == "Empty" and _node(d) not in (victim, None), d
            if d.partitions == ():  # seen once in a full suite: the new coordinator had no start offsets yet
                loading.append(d.group_id)
            else:
                assert _partitions(d) == groups.expected(d.group_id), d
        else:
            failed.append(d.group_id)
            assert d.state is None and d.partitions == () and NO_SHARE_GROUP_ADMIN not in d.error, d
    print(f"of node {victim}'s groups, {len(moved)} described by their new coordinator ({len(loading)} of them "
          f"with no start offsets yet), {len(failed)} failed")
    assert sorted(moved + failed) == sorted(on_victim)
    if loading:  # Kafka's answer just after a takeover, not ours: the offsets must come back, unchanged
        wait_for(lambda: all(_partitions(d) == groups.expected(d.group_id) for d in describe_groups(
            groups=loading, bootstrap_servers=live)), 60, "the new coordinator's start offsets", interval_s=1)


@pytest.mark.timing
def test_frozen_coordinators_that_cannot_be_replaced_cost_their_groups_only(kafka_cluster, topics, capsys):
    """Two of three nodes frozen (SIGSTOP): the controller quorum is lost, so nobody takes their
    ``__consumer_offsets`` partitions over and their groups cannot be described; the third node's groups
    are, with their own numbers: requests to every coordinator are in flight together, so the frozen ones
    hold up nothing. The API gives each failed group its error; the CLI prints the others and one
    ``sharegroup: error:`` line per failed group, and exits 1. Both return within the bound."""
    cluster = kafka_cluster.cluster
    survivor = _share_coordinator(kafka_cluster)
    groups = _make_groups(kafka_cluster, lambda leaders: [survivor] * 2)
    topics.append(groups.topic)
    frozen = sorted(n for n in cluster.nodes if n != survivor)
    alive = sorted(g for g in groups.ids if groups.coordinator(g) == survivor)
    lost = sorted(g for g in groups.ids if groups.coordinator(g) != survivor)
    assert alive and lost, groups.leaders
    frozen_coordinators = {n: str(d.coordinator) for n in frozen for d in describe_groups(
        groups=[next(g for g in groups.ids if groups.coordinator(g) == n)],
        bootstrap_servers=kafka_cluster.bootstrap_servers)}
    servers = cluster.nodes[survivor].address

    for node in frozen:
        cluster.pause(node)
    requests: Counter[str] = Counter()
    described, took = _within("describe_groups", lambda: describe_groups(
        groups=groups.ids, bootstrap_servers=servers, requests=requests))
    code, out, err, cli_took = _cli(capsys, "describe", *_group_args(groups.ids), "--bootstrap-servers", servers)
    for node in frozen:
        cluster.resume(node)
    print(f"nodes {frozen} frozen: describe took {took:.1f}s (requests {dict(requests)}), the CLI {cli_took:.1f}s\n"
          f"{_shown(described)}\n-- stdout\n{out}\n-- stderr\n{err}")

    by_id = {d.group_id: d for d in described}
    assert sorted(by_id) == groups.ids
    for group in lost:  # never described; the description names the frozen coordinator when it was found
        d = by_id[group]
        assert d.error and NO_SHARE_GROUP_ADMIN not in d.error and d.partitions == () and d.state is None, d
        assert d.coordinator in (frozen_coordinators[groups.coordinator(group)], None), d
    for group in alive:  # described as if nothing happened
        d = by_id[group]
        assert (d.state, d.error, _node(d)) == ("Empty", None, survivor), d
        assert _partitions(d) == groups.expected(group), d

    assert code == 1, (code, err)
    errors = re.findall(r"^sharegroup: error: \(group (\S+)\): \S.*$", err, re.MULTILINE)
    assert len(errors) == len(set(errors)), f"a group with two error lines:\n{err}"
    assert sorted(errors) == lost, err
    assert [line for line in err.splitlines() if line.strip()] == [
        line for line in err.splitlines() if line.startswith("sharegroup: error: ")], err
    rows = re.findall(r"^(\S+)\s+broker\s+\S+:\d+ \((\d+)\)\s+Empty\s+0\s", out, re.MULTILINE)
    assert sorted(rows) == [(g, str(survivor)) for g in alive], out
    for group in alive:  # each described group's share-partitions, at its own start offset and lag
        spso = groups.start[group]
        found = re.findall(rf"^{re.escape(group)}\s+{re.escape(groups.topic)}\s+(\d+)\s+{spso}\s+"
                           rf"{RECORDS_PER_PARTITION - spso}\s", out, re.MULTILINE)
        assert sorted(found) == [str(p) for p in range(groups.partitions)], (group, out)
    assert not any(re.search(rf"^{re.escape(group)}\s", out, re.MULTILINE) for group in lost), out


@pytest.mark.timing
def test_a_frozen_node_in_bootstrap_servers_costs_no_group(kafka_cluster, topics):
    """A frozen node that coordinates none of the groups asked about, named in bootstrap.servers as every
    node is: the groups are described, each of three times (kafka-python picks its bootstrap server at
    random; a frozen pick costs one bootstrap attempt, not the call), within the bound."""
    cluster = kafka_cluster.cluster
    share_coordinator = _share_coordinator(kafka_cluster)
    groups = _make_groups(kafka_cluster, lambda leaders: [share_coordinator] * 2)
    topics.append(groups.topic)
    frozen = min(n for n in set(groups.leaders.values()) if n != share_coordinator)
    asked = sorted(g for g in groups.ids if groups.coordinator(g) == share_coordinator)[:2]

    cluster.pause(frozen)
    answers = []
    for _ in range(3):
        described, took = _within("describe_groups", lambda: describe_groups(
            groups=asked, bootstrap_servers=kafka_cluster.bootstrap_servers))
        print(f"node {frozen} frozen: describe took {took:.1f}s\n{_shown(described)}")
        answers.append([(d.group_id, d.error, _partitions(d)) for d in described])
    cluster.resume(frozen)
    assert answers == [[(g, None, groups.expected(g)) for g in asked]] * 3
