"""Three Apache Kafka brokers on loopback, as production runs them: replicated topics, and brokers that die.

Each node is one KRaft JVM (broker and controller in one process, three voters), on free ports,
with its own folder under one temporary directory (``node-N/kafka.log`` is its log, appended to
across restarts). Topics are created with replication factor 3 and ``min.insync.replicas`` 2, and
so are the internal ones: ``__consumer_offsets`` (the group coordinator's, which runs a share
group's membership) and ``__share_group_state`` (the share coordinator's, which persists each
share-partition's SPSO and in-flight state). A producer with acks=all keeps writing while one node
is down.

Faults: :meth:`KafkaCluster.kill` (kill -9: no controlled shutdown; the controller fences the node
when its session times out), :meth:`KafkaCluster.restart` (start again on the same data and
ports), :meth:`KafkaCluster.pause` / :meth:`KafkaCluster.resume` (SIGSTOP: a node that stops
answering), and :meth:`KafkaCluster.rolling_restart`. :meth:`KafkaCluster.leader_of` and
:meth:`KafkaCluster.share_coordinator` say whom to kill.

Sized for a 2-core, 24 GiB machine: 384 MiB heaps (about 200 MiB resident each), the serial
collector, the C1 compiler only (a test cluster's load never pays back C2's compile time: a start
and a rolling restart took 17 s of CPU instead of 33 s), two network and two I/O threads per node,
a 16 MiB log-cleaner buffer. Every JVM dies with the thread that started it (as
:class:`~sharegroup_testing.apache_kafka.ApacheKafka`'s does): start, restart and stop from
one long-lived thread (the main thread). Starting costs 6-7 s on an idle such machine, formatting
included (:attr:`KafkaCluster.start_seconds`); a restarted node is back in every ISR 3-14 s later,
depending on what else runs.
"""

from __future__ import annotations

import atexit
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka.admin import AdminClient

from sharegroup_testing.apache_kafka import (
    TEST_SETTINGS,
    BrokerStartError,
    KafkaNode,
    new_cluster_id,
    wait_ready,
)

__all__ = ["CLUSTER_SETTINGS", "SHARE_STATE_TOPIC", "KafkaCluster"]

SHARE_STATE_TOPIC = "__share_group_state"
OFFSETS_TOPIC = "__consumer_offsets"

#: What differs from the single broker's :data:`TEST_SETTINGS`, and why.
CLUSTER_SETTINGS = {
    **TEST_SETTINGS,
    # Production's durability: three copies, acks=all needs two in sync, no unclean elections.
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "unclean.leader.election.enable": "false",
    # Few internal partitions: each costs three replicas to create and to fail over, and one
    # __share_group_state partition makes its leader the share coordinator of every group.
    "offsets.topic.num.partitions": "3",
    "share.coordinator.state.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "3",
    # A killed node is fenced (its leaderships move) after this, not Kafka's 9 s.
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    # Small: three JVMs share two cores with Spark.
    "num.network.threads": "2",
    "num.io.threads": "2",
    "num.replica.fetchers": "1",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
}

#: Lighter JVMs: a small starting heap, the serial collector's few threads, no C2 compiler threads.
_JVM_OPTIONS = ("-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


class KafkaCluster:
    """A throw-away three-node Apache Kafka (KRaft) with share groups enabled.

    >>> with KafkaCluster() as cluster:
    ...     cluster.kill(cluster.leader_of("orders", 0)); cluster.restart(...)
    """

    def __init__(self, nodes: int = 3, settings: Mapping[str, str] | None = None, *, heap: str = "384m",
                 startup_timeout_s: float = 120.0):
        self.settings = {**CLUSTER_SETTINGS, **(settings or {})}
        self.size = nodes
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self.directory: Path | None = None
        self.nodes: dict[int, KafkaNode] = {}
        self.start_seconds = 0.0  #: what the last start() took, formatting included
        self._admin: AdminClient | None = None

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.address for node in self.nodes.values())

    @property
    def log_paths(self) -> list[Path]:
        return [node.log_path for node in self.nodes.values()]

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        return self._admin

    # -- life -------------------------------------------------------------------------------------
    def start(self) -> KafkaCluster:
        started = time.monotonic()
        self.directory = Path(tempfile.mkdtemp(prefix="sharegroup-cluster-"))
        self.nodes = {i: KafkaNode(self.directory / f"node-{i}", i, heap=self.heap, jvm_options=_JVM_OPTIONS)
                      for i in range(1, self.size + 1)}
        voters = ",".join(node.voter for node in self.nodes.values())
        cluster_id = new_cluster_id()
        for node in self.nodes.values():
            node.write_config(voters, self.settings)
        with ThreadPoolExecutor(self.size) as formatting:  # a JVM each, a few seconds: side by side
            list(formatting.map(lambda node: node.format(cluster_id, share_groups=True), self.nodes.values()))
        atexit.register(self.stop)
        for node in self.nodes.values():
            node.start()
        try:
            wait_ready(self.bootstrap_servers, self.size, list(self.nodes.values()), self.startup_timeout_s)
        except BrokerStartError:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        self._admin = None
        for node in self.nodes.values():
            node.kill()  # a throw-away cluster: no controlled shutdown, which would wait for the others
            node.close()
        atexit.unregister(self.stop)

    def cleanup(self) -> None:
        """Stop, then delete the data; the logs stay, for reading a failure afterwards."""
        self.stop()
        for node in self.nodes.values():
            shutil.rmtree(node.directory / "data", ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()

    def describe(self) -> str:
        return f"three-node Apache Kafka at {self.bootstrap_servers} (logs: {self.directory}/node-*/kafka.log)"

    # -- faults -----------------------------------------------------------------------------------
    def kill(self, node_id: int) -> None:
        """kill -9 one node."""
        self.nodes[node_id].kill()

    def stop_node(self, node_id: int) -> None:
        """A controlled shutdown of one node (SIGTERM): it hands its leaderships over before it exits."""
        self.nodes[node_id].stop()

    def restart(self, node_id: int, timeout_s: float = 90.0) -> None:
        """Start a killed or stopped node again on its data, wait until it answers, then until it is back in every
        ISR."""
        self.nodes[node_id].start()
        self._wait_answering([node_id], timeout_s)
        self.wait_in_sync(timeout_s)

    def _wait_answering(self, node_ids: list[int], timeout_s: float) -> None:
        """Wait until each of ``node_ids`` answers a metadata request itself. Until a killed node's session times
        out, the controller still lists it among the brokers with its replicas in sync, so the cluster's metadata
        says "in sync" while the node is still starting: a check of the ISRs alone passed at once, and the long
        soak's next fault took a second node down with the first (2026-11-29: two of three nodes starting at
        once, no controller quorum, a replay read that found no leader for 30 s)."""
        for node_id in node_ids:
            node = self.nodes[node_id]
            wait_ready(node.address, 1, [node], timeout_s)

    def pause(self, node_id: int) -> None:
        """Freeze one node (SIGSTOP): its connections stay open and nothing answers, as behind a dead host."""
        self.nodes[node_id].signal(signal.SIGSTOP)

    def resume(self, node_id: int | None = None) -> None:
        """Unfreeze one node, or every node."""
        for node in self.nodes.values() if node_id is None else [self.nodes[node_id]]:
            node.signal(signal.SIGCONT)

    def rolling_restart(self, timeout_s: float = 90.0) -> list[int]:
        """Restart every node in turn as an upgrade does: controlled shutdown, start, wait for every ISR
        to be whole again before the next. Returns the nodes in the order they were restarted."""
        order = list(self.nodes)
        for node_id in order:
            self.stop_node(node_id)
            self.restart(node_id, timeout_s)
        return order

    def heal(self, timeout_s: float = 90.0) -> None:
        """Every node running and answering, every replica in sync: what the next test starts from."""
        self.resume()
        for node in self.nodes.values():
            node.start()
        self._wait_answering(list(self.nodes), timeout_s)
        self.wait_in_sync(timeout_s)

    # -- where things are -------------------------------------------------------------------------
    def running(self) -> list[int]:
        return [i for i, node in self.nodes.items() if node.is_running()]

    def leader_of(self, topic: str, partition: int, timeout_s: float = 60.0) -> int:
        """The node that leads ``topic``'s ``partition`` (waits while it has none, or the topic is not there yet)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                found = self.admin.list_topics(topic, timeout=5).topics.get(topic)
                if found is not None and found.error is None and partition in found.partitions:
                    leader = found.partitions[partition].leader
                    if leader in self.nodes:
                        return leader
            except Exception:  # a node being down: metadata comes from another one on the next try
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no leader of {topic}[{partition}] within {timeout_s:.0f}s on {self.describe()}")
            time.sleep(0.2)

    def share_coordinator(self, timeout_s: float = 60.0) -> int:
        """The share coordinator of every group: the leader of the one ``__share_group_state`` partition.

        The topic is created when a share group first persists state (its first member's first
        fetch), so this waits for it.
        """
        return self.leader_of(SHARE_STATE_TOPIC, 0, timeout_s)

    def in_sync(self) -> bool:
        """Every partition of every topic (internal ones included) has all its replicas in sync."""
        metadata = self.admin.list_topics(timeout=5)
        if len(metadata.brokers) < self.size:
            return False
        return all(p.error is None and p.leader >= 0 and len(p.isrs) == len(p.replicas)
                   for topic in metadata.topics.values() for p in topic.partitions.values())

    def wait_in_sync(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.in_sync():
                    return
            except Exception:  # metadata from a node that is going away: ask again
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster's replicas were not all in sync within {timeout_s:.0f}s; "
                                   f"see {self.directory}/node-*/kafka.log")
            time.sleep(0.25)
