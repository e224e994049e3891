"""Figures for the admin on Kafka's own coordinator: ``sharegroup describe --all-groups`` against Kafka's tool.

    python -m bench.admin_broker_bench [--groups 1,100,1000] [--rounds 3]

``run(kafka)`` makes N share groups on ONE Apache Kafka broker (each with start offsets on every partition of
a 4-partition topic, made by AlterShareGroupOffsets: a group exists once its offsets are altered, no member
needed) and describes them all three ways (and two diagnostic ones, below), in interleaved rounds so outside
load falls on all alike: our CLI as a user runs it (``sharegroup describe --all-groups``, a new Python
process), Kafka's own tool as a user runs it (``kafka-share-groups --describe --all-groups --offsets``, a new
JVM) and our Python API in this process (``describe_groups``, no start-up). Per way the median wall seconds
and the Kafka requests sent: the broker's own count (its RequestMetrics, read over JMX) for both tools, so the
JVM's requests are counted as ours are; our API's own per-API Counter besides, asserted O(coordinators): one
request per API for one broker, whatever N, but for DescribeShareGroupOffsets, sent one per group with all of
them in flight at once (one round trip; see below). Both tools must agree on every group's start offset (SPSO) and
lag per partition; whether they did is recorded, with the first disagreements.

Why DescribeShareGroupOffsets goes one group per request, measured in the same rounds: the broker's answer
(the start offsets and, since KIP-1226, the lag) for all N groups in one request, against one request per
group with all in flight at once, as our describe and Kafka's tool send them.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from sharegroup_source.admin import describe_groups, reset_offsets
from sharegroup_source.kafka.share_protocol import ShareGroupProtocol
from sharegroup_testing.apache_kafka import KAFKA_TOOLS, ApacheKafka, free_port, kafka_java
from sharegroup_testing.kafka_peers import KafkaUnderTest, kafka_session

__all__ = ["GROUP_COUNTS", "run"]

GROUP_COUNTS = (1, 100, 1000)
PARTITIONS, RECORDS_PER_PARTITION, ROUNDS = 4, 100, 3
#: a user's run of each tool, the bootstrap server left out
SHAREGROUP = [str(Path(sys.executable).with_name("sharegroup")), "describe", "--all-groups"]
KAFKA_TOOL = ["--describe", "--all-groups", "--offsets"]
_TIMEOUT_S = 600.0
#: Requests brokers send each other (the share coordinator's state, KRaft's heartbeats): what a describe costs
#: the cluster behind its coordinator, counted apart from what the tool itself sent.
_INTER_BROKER = {"BrokerHeartbeat", "BrokerRegistration", "ControllerRegistration", "AllocateProducerIds",
                 "InitializeShareGroupState", "ReadShareGroupState", "ReadShareGroupStateSummary",
                 "WriteShareGroupState", "DeleteShareGroupState"}

Rows = dict[tuple[str, str, int], tuple[str, str]]


def run(kafka: KafkaUnderTest, *, group_counts: tuple[int, ...] = GROUP_COUNTS, rounds: int = ROUNDS,
        say: Callable[[str], None] = print) -> dict[str, Any]:
    """Describe 1, 100 and 1,000 groups (``group_counts``, made in turn, each count adding to the last) both
    ways; ``{"run": setup, "groups": {N: figures}}``. Needs Apache Kafka's own broker (its tool, its JVM)."""
    if kafka.apache is None:
        raise ValueError(f"needs Apache Kafka's broker started by the bench and its tools, not {kafka.describe()}")
    topic = kafka.new_topic(PARTITIONS, prefix="bench-admin-broker")
    kafka.produce_numbered(topic, PARTITIONS * RECORDS_PER_PARTITION, PARTITIONS)
    brokers = len(kafka.admin.list_topics(timeout=30).brokers)
    counted = BrokerRequests(kafka.bootstrap_servers)
    by_count: dict[str, Any] = {}
    made = 0
    for count in sorted(group_counts):
        started = time.perf_counter()
        _make_groups(kafka.bootstrap_servers, topic, made, count)
        created_s, made = round(time.perf_counter() - started, 1), count
        by_count[str(count)] = {"created_s": created_s, **_measure(kafka.apache, kafka.bootstrap_servers, count,
                                                                   brokers, rounds, counted)}
        figures = by_count[str(count)]
        say(f"admin-broker {count} groups (made in {created_s} s): sharegroup {figures['sharegroup']['wall_s']} s, "
            f"kafka-share-groups {figures['kafka_tool']['wall_s']} s, agreed {figures['agreement']['agreed']}")
    counters = [figures["python_api"]["requests"] for figures in by_count.values()]
    return {"run": {"peer": kafka.kind, "brokers": brokers, "partitions": PARTITIONS,
                    "records_per_partition": RECORDS_PER_PARTITION, "rounds": rounds,
                    "made_by": "AlterShareGroupOffsets to the earliest offset (no member)",
                    "sharegroup": " ".join(["sharegroup", *SHAREGROUP[1:], "--bootstrap-servers B"]),
                    "kafka_tool": f"java -cp 'jvm/target/kafka/*' -Xmx{kafka.apache.heap} "
                                  f"{KAFKA_TOOLS['kafka-share-groups']} --bootstrap-server B {' '.join(KAFKA_TOOL)}",
                    "broker_requests_counted": counted.reason or "broker RequestMetrics over JMX, untimed pass",
                    "python_api_requests_independent_of_groups": all(c == counters[0] for c in counters)},
            "groups": by_count}


def _make_groups(servers: str, topic: str, first: int, count: int) -> None:
    """Groups ``first+1..count``: the first by ``reset_offsets`` (the API a user calls), the rest by one
    conversation's AlterShareGroupOffsets each, under 15 ms a group where a reset_offsets call (new clients,
    a plan) takes 400 ms: 1,000 groups in under 10 seconds, not 7 minutes."""
    groups = [_group(n) for n in range(first + 1, count + 1)]
    if first == 0:
        reset_offsets(group=groups.pop(0), to="earliest", topics=[topic], execute=True, bootstrap_servers=servers)
    if not groups:
        return
    with ShareGroupProtocol({"bootstrap.servers": servers}, 30) as protocol:
        for group in groups:
            outcome = protocol.alter_start_offsets(group, {(topic, p): 0 for p in range(PARTITIONS)})
            assert isinstance(outcome, dict) and not any(outcome.values()), f"{group}: {outcome}"


def _group(number: int) -> str:
    return f"bench-g-{number:04}"


def _measure(apache: ApacheKafka, servers: str, count: int, brokers: int, rounds: int,
             counted: BrokerRequests) -> dict[str, Any]:
    """The ways to describe every group, interleaved over ``rounds``, after an untimed pass that counts the
    requests: its JVMs reading the broker's counts and the coordinator's first reads of new groups stay out of
    the timed rounds."""
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    counters: Counter[str] = Counter()

    def api() -> None:
        counters.clear()
        listed = describe_groups(all_groups=True, bootstrap_servers=servers, requests=counters)
        failed = [d.error for d in listed if d.error is not None]
        assert not failed and len(listed) == count, f"{len(listed)} groups listed, {count} made; {failed[:3]}"

    ways: dict[str, Callable[[], None]] = {
        "sharegroup": lambda: outputs.update(sharegroup=_checked(subprocess.run(
            [*SHAREGROUP, "--bootstrap-servers", servers], capture_output=True, text=True, timeout=_TIMEOUT_S))),
        "kafka_tool": lambda: outputs.update(kafka_tool=_checked(apache.run_tool(
            "kafka-share-groups", "--bootstrap-server", servers, *KAFKA_TOOL, timeout_s=_TIMEOUT_S))),
        "python_api": api,
        "offsets_one_request": lambda: _start_offsets(servers, [_group(n) for n in range(1, count + 1)], True),
        "offsets_one_per_group": lambda: _start_offsets(servers, [_group(n) for n in range(1, count + 1)], False),
    }
    requests: dict[str, dict[str, Any]] = {}
    for way, describe in ways.items():
        before = counted.read() if way in ("sharegroup", "kafka_tool") else None
        describe()
        if before is not None:
            requests[way] = _split(counted.read(), before, count)
    walls: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(rounds):
        for way, describe in ways.items():
            started = time.perf_counter()
            describe()
            walls[way].append(time.perf_counter() - started)
    api_requests = dict(sorted(counters.items()))
    per_coordinator = {api: n for api, n in api_requests.items() if api != "DescribeShareGroupOffsetsRequest"}
    assert max(per_coordinator.values()) <= brokers, f"not O(coordinators) with {brokers} broker(s): {api_requests}"
    assert api_requests["DescribeShareGroupOffsetsRequest"] == count, api_requests
    figures = {way: {"wall_s": round(statistics.median(walls[way]), 3),
                     "wall_s_rounds": [round(w, 3) for w in walls[way]], **requests.get(way, {})} for way in ways}
    figures["python_api"]["requests"] = api_requests
    return {"rounds": rounds, **figures, "agreement": _agreement(servers, outputs["kafka_tool"].stdout, count),
            "kafka_tool_over_sharegroup": round(figures["kafka_tool"]["wall_s"] / figures["sharegroup"]["wall_s"], 2)}


def _start_offsets(servers: str, groups: list[str], one_request: bool) -> None:
    """DescribeShareGroupOffsets for ``groups``: in one request, or one per group all in flight at once (what
    ``ShareGroupProtocol.start_offsets`` sends); a conversation of its own, like a describe's."""
    with ShareGroupProtocol({"bootstrap.servers": servers}, 60) as protocol:
        answers = protocol.start_offsets(groups, group_per_request=not one_request)
        assert all(isinstance(a, dict) and len(a) == PARTITIONS for a in answers.values()), answers


def _checked(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{done.args[-6:]} exited {done.returncode}: {done.stderr[-2000:]}"
    return done


def _split(after: Counter[str] | None, before: Counter[str] | None, groups: int) -> dict[str, Any]:
    """What the broker received while one tool ran: the tool's own requests per API, and those brokers sent
    each other meanwhile (the share coordinator's reads the describe caused, KRaft heartbeats). Answering
    DescribeShareGroupOffsets v1 (KIP-1226's lag), the coordinator sends a ListOffsets of its own per group,
    which its broker counts as received: those ``groups`` are moved to the broker's own."""
    if after is None or before is None:
        return {"requests": None}
    received = dict(sorted((after - before).items()))
    lag_lookups = min(groups, received.get("ListOffsets", 0))
    received["ListOffsets"] = received.get("ListOffsets", 0) - lag_lookups
    sent = {api: n for api, n in received.items() if api not in _INTER_BROKER and n}
    return {"requests": sent, "requests_total": sum(sent.values()),
            "inter_broker_requests": {**{api: n for api, n in received.items() if api in _INTER_BROKER},
                                      "ListOffsets (the coordinator's lag, one per group)": lag_lookups}}


def _agreement(servers: str, kafka_tool_out: str, count: int) -> dict[str, Any]:
    """Our ``--json`` describe against Kafka's table (GROUP TOPIC PARTITION START-OFFSET LAG; "-" unknown), per
    group and share-partition."""
    done = _checked(subprocess.run([*SHAREGROUP, "--bootstrap-servers", servers, "--json"], capture_output=True,
                                   text=True, timeout=_TIMEOUT_S))
    shown = lambda value: "-" if value is None else str(value)  # noqa: E731
    ours: Rows = {(g["group_id"], p["topic"], p["partition"]): (shown(p["spso"]), shown(p["lag"]))
                  for g in json.loads(done.stdout) for p in g["partitions"]}
    theirs: Rows = {(g, t, int(p)): (start, lag) for g, t, p, start, lag in
                    re.findall(r"^(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s*$", kafka_tool_out, re.MULTILINE)}
    differ = [f"{key}: sharegroup {ours.get(key)}, kafka-share-groups {theirs.get(key)}"
              for key in sorted(set(ours) | set(theirs)) if ours.get(key) != theirs.get(key)]
    return {"agreed": not differ and len(ours) == count * PARTITIONS, "rows": len(ours), "kafka_tool_rows": len(theirs),
            "disagreements": len(differ), "first_disagreements": differ[:5]}


class BrokerRequests:
    """The broker's own count of the requests it received, per API (``kafka.network`` RequestMetrics,
    read over JMX by Kafka's JmxTool): counts the JVM tool's requests the same way as ours. JMX is switched on
    in the running broker (``jcmd ManagementAgent.start``), so the broker starts as every other figure's does;
    where that cannot be done (no jcmd, a broker not on this machine) ``reason`` says so and counts are None."""

    def __init__(self, servers: str):
        self.url: str | None = None
        self.reason: str | None = None
        port = int(servers.rsplit(":", 1)[1])
        pids = {c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
                and c.status == psutil.CONN_LISTEN and c.pid}
        jcmd = shutil.which("jcmd")
        if len(pids) != 1 or jcmd is None:
            self.reason = f"not counted: broker process {pids or 'not found'}, jcmd {jcmd}"
            return
        jmx_port = free_port()
        started = subprocess.run([jcmd, str(pids.pop()), "ManagementAgent.start", f"jmxremote.port={jmx_port}",
                                  "jmxremote.host=127.0.0.1", "jmxremote.authenticate=false", "jmxremote.ssl=false"],
                                 capture_output=True, text=True, timeout=60, check=False)
        if started.returncode != 0 or "successfully" not in started.stdout:
            self.reason = f"not counted: jcmd ManagementAgent.start failed: {started.stdout} {started.stderr}"
            return
        self.url = f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{jmx_port}/jmxrmi"

    def read(self) -> Counter[str] | None:
        """Requests received so far, per API (all versions summed); about a second: a JVM starts to read them."""
        if self.url is None:
            return None
        done = _checked(subprocess.run(kafka_java(
            "org.apache.kafka.tools.JmxTool", "--jmx-url", self.url, "--one-time", "true", "--attributes", "Count",
            "--object-name", "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,version=*",
            "--report-format", "properties", heap="128m"), capture_output=True, text=True, timeout=120))
        counts: Counter[str] = Counter()
        for api, n in re.findall(r"request=(\w+),version=\d+:Count=(\d+)", done.stdout):
            counts[api] += int(n)
        return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default=",".join(map(str, GROUP_COUNTS)), help="comma-separated group counts")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    with kafka_session("apache") as kafka:
        print(json.dumps(run(kafka, group_counts=tuple(int(n) for n in args.groups.split(",")), rounds=args.rounds,
                             say=lambda message: print(message, file=sys.stderr)), indent=2))


if __name__ == "__main__":
    main()
