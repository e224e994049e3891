"""Apache Kafka's own broker, single-node KRaft, started from the jars ``jvm/pom.xml`` pins.

The embedded broker is a re-implementation of the share-group protocol; this is the real
one, so a behaviour counts as working when it holds here. One JVM runs the broker and the
controller on loopback, on free ports, with its data in a temporary folder and its log in
``kafka.log`` there. Share groups are switched on the way Kafka 4.2+ wants it: the storage
is formatted with the ``share.version=1`` feature (no broker property needed); Kafka 4.4's
``share.version=2`` (the broker's dead-letter queue, KIP-1191) is an operator's upgrade
(``kafka-features upgrade``), which tests/test_kafka_share_dlq.py does. Which Apache Kafka runs:
``jvm/pom.xml``'s default, or ``SHAREGROUP_KAFKA_VERSION`` (:mod:`~sharegroup_testing.jars`).

The JVM dies with the process that started it (``setpriv --pdeathsig`` where available),
so an interrupted test run leaves no broker behind.
"""

from __future__ import annotations

import atexit
import base64
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from sharegroup_testing.jars import java, kafka_classpath

__all__ = ["EPHEMERAL_PORTS", "FIRST_CHOSEN_PORT", "KAFKA_TOOLS", "PERFORMANCE_OPTS_ENV", "TEST_SETTINGS",
           "ApacheKafka", "BrokerStartError", "KafkaNode", "create_topic", "free_port", "kafka_java", "new_cluster_id",
           "orphan_guard", "set_group_configs", "wait_ready"]

#: Main classes of the Kafka tools the project runs (what bin/*.sh would run).
KAFKA_TOOLS = {
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-share-consumer-perf-test": "org.apache.kafka.tools.ShareConsumerPerformance",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
}

#: Settings that differ from Kafka's defaults, and why.
TEST_SETTINGS = {
    # Tests use locks of a few seconds; Kafka refuses a group lock below this minimum (15 s).
    "group.share.min.record.lock.duration.ms": "1000",
    # A member learns its assignment from a heartbeat: at Kafka's 5 s interval every query start
    # waits about 5 s for its partitions. Tests start hundreds of queries; production keeps 5 s.
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "1000",
    # Lets a test give a group a session timeout under Kafka's 45 s minimum, so a SIGKILLed
    # member's partitions come back within the test's time (the soak uses 12 s).
    "group.share.min.session.timeout.ms": "3000",
    # Only the ceiling of share.partition.max.record.locks (a static broker setting): the bench measures a
    # group with 10,000 records in flight; every group's default stays 2,000.
    "group.share.max.partition.max.record.locks": "10000",
    # One node: internal topics cannot have three replicas.
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
}

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


#: Kafka's tools print their results on stdout: their own logging goes to stderr, warnings only.
_TOOLS_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
"""


class BrokerStartError(RuntimeError):
    """Apache Kafka's broker did not come up; the message names its log file."""


def wait_ready(bootstrap_servers: str, brokers: int, nodes: Sequence[KafkaNode], timeout_s: float) -> None:
    """Wait until the cluster's metadata lists ``brokers`` brokers; fail at once when a node's JVM ended."""
    deadline = time.monotonic() + timeout_s
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    while time.monotonic() < deadline:
        for node in nodes:
            node.check_alive()
        try:
            if len(admin.list_topics(timeout=1).brokers) >= brokers:
                return
        except Exception:  # not up yet: any client error means "try again"
            time.sleep(0.2)
    logs = ", ".join(str(node.log_path) for node in nodes)
    raise BrokerStartError(f"Apache Kafka was not ready within {timeout_s:.0f}s; see {logs}")


def create_topic(admin: AdminClient, name: str, partitions: int, timeout_s: float = 30.0,
                 replication_factor: int = 1) -> None:
    admin.create_topics([NewTopic(name, partitions, replication_factor)])[name].result(timeout_s)


def set_group_configs(admin: AdminClient, group: str, settings: Mapping[str, str], timeout_s: float = 30.0) -> None:
    """Set share-group configs (``share.auto.offset.reset``, ``share.record.lock.duration.ms``...).

    On Kafka these are per group (IncrementalAlterConfigs on the GROUP resource), so no
    cluster-wide default has to change for one group to start at the earliest offset.
    """
    entries = [ConfigEntry(key, str(value), incremental_operation=AlterConfigOpType.SET)
               for key, value in settings.items()]
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout_s)


#: Where the kernel picks the port of a socket bound to port 0 and of an outgoing connection (Linux).
EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: The lowest port :func:`free_port` chooses: above the well-known and most registered services' ports.
FIRST_CHOSEN_PORT = 10000


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on right now, below the kernel's ephemeral range where it has one.

    The servers the suite starts each take one. Why not one the kernel hands out: a Kafka client keeps
    reconnecting to a broker the suite has stopped (a consumer pooled in a Spark Python worker does until its
    idle timeout), and a socket the kernel later gives Spark on that port (the one-shot server a ``collect()``
    reads from) takes the stray client's request for its authentication and fails the collect ("serve-DataFrame
    ... Authentication failed", CI, 2026-11-30). A port below the range is never handed to anyone else. Chosen at
    random, as the kernel does, so parallel test processes rarely try the same one.
    """
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(FIRST_CHOSEN_PORT, low) if low > FIRST_CHOSEN_PORT else 0
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(probe.getsockname()[1])
    raise OSError(f"no free port of 127.0.0.1 between {FIRST_CHOSEN_PORT} and {low} in 200 tries")


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 where it cannot be read)."""
    try:
        return int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def new_cluster_id() -> str:
    """A random Kafka Uuid string; like Kafka's own, never one starting with '-' (a CLI option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def orphan_guard() -> list[str]:
    """A prefix that kills the child when this process dies, however it dies (Linux).

    The signal comes when the *thread* that started the child ends (prctl's PR_SET_PDEATHSIG):
    start JVMs from a thread that lives as long as they should, the main thread in the tools.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []


#: The JVM options of a broker or tool besides its heap: bin/kafka-run-class.sh's collector.
JVM_OPTIONS = ("-XX:+UseG1GC",)
#: As in bin/kafka-run-class.sh, this variable replaces those options when set. The test suite sets lighter ones
#: (tests/conftest.py): its brokers live minutes on two busy cores, where C2's compiler threads cost more than
#: they give back.
PERFORMANCE_OPTS_ENV = "KAFKA_JVM_PERFORMANCE_OPTS"


def performance_options() -> tuple[str, ...]:
    """``KAFKA_JVM_PERFORMANCE_OPTS`` split as a shell would, else :data:`JVM_OPTIONS`."""
    return tuple(shlex.split(os.environ.get(PERFORMANCE_OPTS_ENV, ""))) or JVM_OPTIONS


def kafka_java(main_class: str, *args: str, heap: str, log4j: Path | None = None,
               jvm_options: Sequence[str] | None = None) -> list[str]:
    """The command line that runs ``main_class`` from the Kafka jars (what bin/*.sh would run); ``jvm_options``
    default to :func:`performance_options`."""
    options = [f"-Dlog4j2.configurationFile={log4j}"] if log4j else []
    chosen = performance_options() if jvm_options is None else jvm_options
    return [java(), f"-Xmx{heap}", *chosen, *options, "-cp", kafka_classpath(), main_class, *args]


class KafkaNode:
    """One KRaft node's JVM (broker and controller in one process): its folder, config, storage and process.

    :class:`ApacheKafka` runs one; :class:`~sharegroup_testing.kafka_cluster.KafkaCluster` three, and
    kills and restarts them. The folder keeps ``server.properties``, ``data/`` and ``kafka.log`` (appended
    to across restarts, so a failure can be read afterwards).
    """

    def __init__(self, directory: Path, node_id: int, *, heap: str, jvm_options: Sequence[str] | None = None):
        self.directory = directory
        self.node_id = node_id
        self.port, self.controller_port = free_port(), free_port()
        self.heap = heap
        self.jvm_options = None if jvm_options is None else tuple(jvm_options)
        self.process: subprocess.Popen | None = None
        self._log: BinaryIO | None = None
        self.config_path = directory / "server.properties"
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def log_path(self) -> Path:
        return self.directory / "kafka.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def voter(self) -> str:
        """This node's entry in ``controller.quorum.voters``."""
        return f"{self.node_id}@127.0.0.1:{self.controller_port}"

    def java(self, main_class: str, *args: str, log_config: str = "log4j2.properties") -> list[str]:
        return kafka_java(main_class, *args, heap=self.heap, log4j=self.directory / log_config,
                          jvm_options=self.jvm_options)

    def write_config(self, voters: str, settings: Mapping[str, str]) -> None:
        """Write ``server.properties`` (``voters``: the quorum's ``controller.quorum.voters``) and the log setup."""
        config = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.address},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.address}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            **settings,
        }
        self.config_path.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
        (self.directory / "log4j2.properties").write_text(_LOG4J2)
        (self.directory / "tools-log4j2.properties").write_text(_TOOLS_LOG4J2)

    def format(self, cluster_id: str, share_groups: bool, extra: Sequence[str] = ()) -> None:
        """Format the node's storage (once, before its first start) with share groups on or off; ``extra``
        arguments of the storage tool (``--add-scram ...``)."""
        with self.log_path.open("ab") as log:
            formatted = subprocess.run(
                self.java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.config_path),
                          "--feature", f"share.version={int(share_groups)}", *extra),
                stdout=log, stderr=subprocess.STDOUT, timeout=120, check=False)
        if formatted.returncode != 0:
            raise BrokerStartError(f"formatting Kafka's storage failed (exit {formatted.returncode}); "
                                   f"see {self.log_path}")

    def start(self) -> None:
        """Start the JVM on its formatted storage; it dies with the thread that started it."""
        if self.is_running():
            return
        if self._log is None:
            self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [*orphan_guard(), *self.java("kafka.Kafka", str(self.config_path))],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        if not self.is_running():
            raise BrokerStartError(f"Apache Kafka node {self.node_id} exited while starting; see {self.log_path}")

    def signal(self, signum: signal.Signals) -> None:
        if self.is_running():
            assert self.process is not None
            self.process.send_signal(signum)

    def kill(self) -> None:
        """kill -9: no controlled shutdown, the controller learns of it when the broker's session times out."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a frozen JVM is killed all the same, but reaped only once running
            process.kill()
            process.wait(30)

    def stop(self) -> None:
        """A controlled shutdown (SIGTERM: leaders move off first), kill -9 if it takes longer than 60 s."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def close(self) -> None:
        """Stop and let go of the log file."""
        self.stop()
        if self._log is not None:
            self._log.close()
            self._log = None


class ApacheKafka:
    """A throw-away single-node Apache Kafka, with share groups enabled unless told otherwise.

    >>> with ApacheKafka() as kafka:
    ...     print(kafka.bootstrap_servers)
    """

    def __init__(self, settings: Mapping[str, str] | None = None, *, startup_timeout_s: float = 60.0,
                 heap: str = "768m", share_groups: bool = True):
        self.settings = {**TEST_SETTINGS, **(settings or {})}
        self.share_groups = share_groups
        self.startup_timeout_s = startup_timeout_s
        self.heap = heap
        self.directory: Path | None = None
        self.bootstrap_servers = ""
        self._node: KafkaNode | None = None

    @property
    def log_path(self) -> Path:
        if self.directory is None:
            raise BrokerStartError("the broker was never started")
        return self.directory / "kafka.log"

    def _java(self, main_class: str, *args: str, log_config: str = "log4j2.properties") -> list[str]:
        log4j = self.directory / log_config if self.directory else None
        return kafka_java(main_class, *args, heap=self.heap, log4j=log4j)

    def start(self) -> ApacheKafka:
        self.directory = Path(tempfile.mkdtemp(prefix="sharegroup-kafka-"))
        node = self._node = KafkaNode(self.directory, 1, heap=self.heap)
        self.bootstrap_servers = node.address
        settings, format_args = self._configure(node)
        node.write_config(node.voter, {**self.settings, **settings})
        node.format(new_cluster_id(), self.share_groups, format_args)
        node.start()
        atexit.register(self.stop)
        try:
            wait_ready(self.ready_servers, 1, [node], self.startup_timeout_s)
        except BrokerStartError:
            self.stop()
            raise
        return self

    def _configure(self, node: KafkaNode) -> tuple[Mapping[str, str], Sequence[str]]:
        """Settings over :data:`TEST_SETTINGS` and the storage tool's extra arguments: none here; a secured
        broker's listeners, TLS, SASL users and authorizer (:mod:`~sharegroup_testing.secured_kafka`)."""
        return {}, ()

    @property
    def ready_servers(self) -> str:
        """Where readiness is checked: the clients' listener, or the internal one of a secured broker."""
        return self.bootstrap_servers

    def run_tool(self, tool: str, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run one of :data:`KAFKA_TOOLS` against this broker; output is returned, not printed."""
        return subprocess.run(self._java(KAFKA_TOOLS[tool], *args, log_config="tools-log4j2.properties"),
                              capture_output=True, text=True, timeout=timeout_s, check=False)

    def spawn_tool(self, tool: str, args: Sequence[str], **popen: Any) -> subprocess.Popen:
        """Start a long-running tool (a console share consumer); it dies with this process."""
        command = self._java(KAFKA_TOOLS[tool], *args, log_config="tools-log4j2.properties")
        return subprocess.Popen([*orphan_guard(), *command], **popen)

    def pause(self) -> None:
        """Freeze the broker's JVM (SIGSTOP): clients see a broker that stopped answering."""
        if self._node is not None:
            self._node.signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._node is not None:
            self._node.signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._node is not None:
            self._node.close()
        atexit.unregister(self.stop)

    def cleanup(self) -> None:
        """Stop, then delete the data; the log stays, for reading a failure afterwards."""
        self.stop()
        if self.directory is not None:
            shutil.rmtree(self.directory / "data", ignore_errors=True)

    def __enter__(self) -> ApacheKafka:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()
