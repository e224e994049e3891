"""Shared fixtures: one SparkSession, and one Kafka peer of each kind, per test session.

A test that takes ``kafka`` runs on Apache Kafka's own broker (started from jvm/target/kafka): a
behaviour counts as working when it holds there. Tests marked ``embedded`` run on the embedded
broker too: they use its fault hooks, pin how it differs, or stand for ``make demo``, which runs
on it. SHAREGROUP_TEST_KAFKA picks otherwise: ``both`` runs every test on both peers, ``embedded``
or ``apache`` every test on that one (``standard``, the default, is the above).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sharegroup_source.kafka.consumer_pool import consumer_pool
from sharegroup_testing.apache_kafka import PERFORMANCE_OPTS_ENV
from sharegroup_testing.embedded_broker import API_KEYS
from sharegroup_testing.kafka_peers import (
    BOOTSTRAP_ENV,
    EMBEDDED_SESSION_TIMEOUT_MS,
    PEERS,
    KafkaUnderTest,
    kafka_session,
)

PEERS_ENV = "SHAREGROUP_TEST_KAFKA"
#: The JVMs the suite starts compile with C1 alone, beside the serial collector: Spark in this process and in the
#: scripts it runs (spark-submit reads SPARK_SUBMIT_OPTS), Apache Kafka's brokers and tools (as their scripts read
#: KAFKA_JVM_PERFORMANCE_OPTS). They live minutes on two busy cores, where C2's compiler threads cost more than
#: they give back: tests/test_delta_coordinator.py and test_available_now.py took 138 CPU-seconds instead of 175
#: (2026-11-28). Set either variable to keep your own.
LEAN_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_SUBMIT_OPTS", LEAN_JVM)
os.environ.setdefault(PERFORMANCE_OPTS_ENV, LEAN_JVM)
#: The previous Apache Kafka release (jvm/pom.xml's kafka.previous.version), for the fixture ``previous_kafka``.
PREVIOUS_KAFKA = "4.3.1"


def _peers_setting() -> str:
    value = os.environ.get(PEERS_ENV, "standard").strip().lower()
    if value not in (*PEERS, "both", "standard"):
        raise ValueError(f"{PEERS_ENV}={value!r}: expected standard, both, embedded or apache")
    return value


def selected_peers() -> list[str]:
    """The peers ``kafka`` is parametrized with, from ``SHAREGROUP_TEST_KAFKA`` (``standard`` and ``both``: the two;
    under ``standard`` only tests marked ``embedded`` keep their embedded variant)."""
    value = _peers_setting()
    return list(PEERS) if value in ("both", "standard") else [value]


#: Session fixtures too costly to start on every pytest-xdist worker (the three-node cluster takes 7-11 s and
#: three JVMs, the secured broker a certificate authority and ACLs): the tests using one run on one worker.
#: Apache Kafka's broker (``kafka``), the embedded one and the SparkSession start on each worker that needs them.
_ONE_WORKER = {"kafka_cluster": "cluster", "secured_kafka": "secured", "previous_kafka": "previous-kafka"}


def pytest_collection_modifyitems(config, items) -> None:
    """Under ``standard``, deselect the embedded variant of tests not marked ``embedded``; put the tests of each
    costly session fixture in one xdist group (``--dist loadgroup`` runs a group on one worker)."""
    for item in items:
        group = next((name for fixture, name in _ONE_WORKER.items() if fixture in item.fixturenames), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if _peers_setting() != "standard":
        return
    dropped = [item for item in items if getattr(item, "callspec", None) is not None
               and item.callspec.params.get("kafka") == "embedded" and item.get_closest_marker("embedded") is None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in set(dropped)]


def pytest_report_header(config) -> str:
    external = os.environ.get(BOOTSTRAP_ENV)
    apache = f"the cluster at {external}" if external else "Apache Kafka's broker started by the suite"
    names = {"embedded": "embedded broker (librdkafka mock cluster)", "apache": apache}
    peers = "; ".join(names[peer] for peer in selected_peers())
    standard = " (embedded: tests marked embedded only)" if _peers_setting() == "standard" else ""
    return f"kafka peers: {peers}{standard}"


@pytest.fixture(scope="session", params=selected_peers())
def kafka(request) -> Iterator[KafkaUnderTest]:
    with kafka_session(request.param) as under_test:
        yield under_test
        # consumers pooled in this process (replays and read-backs the driver ran here) leave before their broker
        # stops, instead of complaining that it is gone until the process ends
        consumer_pool().close()


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaUnderTest]:
    """Three Apache Kafka brokers (tests marked ``cluster``), started once per session: 7-11 s here."""
    with kafka_session("cluster") as under_test:
        assert under_test.cluster is not None
        print(f"\nthree-broker Apache Kafka started in {under_test.cluster.start_seconds:.1f} s")
        yield under_test
        consumer_pool().close()


@pytest.fixture(scope="session")
def previous_kafka() -> Iterator[KafkaUnderTest]:
    """The previous Apache Kafka release jvm/pom.xml names (jvm/target/kafka-<version>), started once per session
    beside the default one, for behaviour that differs between the two (group configs Kafka 4.4 added)."""
    from sharegroup_testing.apache_kafka import ApacheKafka
    from sharegroup_testing.jars import KAFKA_VERSION_ENV, kafka_version

    version = PREVIOUS_KAFKA
    with pytest.MonkeyPatch.context() as env:
        env.setenv(KAFKA_VERSION_ENV, version)
        assert kafka_version() == version, f"jvm/target holds no Apache Kafka {version}: run make jars"
        apache = ApacheKafka().start()
    try:
        with KafkaUnderTest(None, apache.bootstrap_servers, apache) as under_test:
            yield under_test
            consumer_pool().close()
    finally:
        apache.cleanup()


@pytest.fixture(scope="session")
def secured_kafka():
    """Apache Kafka with a SASL_SSL listener and ACLs (tests marked ``secured``): users alice and bob."""
    from sharegroup_testing.secured_kafka import SecuredKafka

    with SecuredKafka(users={"alice": "alice-Secret-1", "bob": "bob-Secret-2"}) as secured:
        yield secured
        consumer_pool().close()  # consumers pooled here leave before their broker stops, as for the other peers


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed Kafka-facing test says which peer it ran on and where that broker's log is."""
    report = yield
    funcargs = getattr(item, "funcargs", {})
    under_test = funcargs.get("kafka", funcargs.get("kafka_cluster"))
    if report.failed and isinstance(under_test, KafkaUnderTest):
        report.sections.append(("kafka peer", under_test.describe()))
    return report


@pytest.fixture(autouse=True)
def _faults_end_with_the_test(request):
    """Injected errors a test left unconsumed, a node left down, or a short session timeout (the
    embedded broker's is cluster-wide) must not leak into the next test."""
    yield
    if "kafka" in request.fixturenames:
        under_test = request.getfixturevalue("kafka")
        if under_test.embedded is not None:
            for api in API_KEYS:
                under_test.embedded.clear_failures(api)
            under_test.embedded.set_up(-1)
            under_test.embedded.set_session_timeout(EMBEDDED_SESSION_TIMEOUT_MS)
        if under_test.apache is not None:
            under_test.apache.resume()
    if "kafka_cluster" in request.fixturenames:  # a node a test killed or froze is back for the next one
        request.getfixturevalue("kafka_cluster").cluster.heal()


@pytest.fixture(scope="session")
def spark():
    from sharegroup_testing.spark import local_spark

    session = local_spark()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def delta_spark(spark):
    """The test session, failing (not skipping) when Delta's Spark classes are not loaded.

    ``spark.jars`` reaches Spark's own class loader, not the JVM's system one, so the class is
    looked up the way Spark's data source lookup does: through the thread's context loader.
    """
    delta_source = "org.apache.spark.sql.delta.sources.DeltaDataSource"
    try:
        spark._jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(delta_source)
    except Exception as exc:  # py4j wraps ClassNotFoundException
        pytest.fail(f"delta-spark is not on this SparkSession's classpath ({delta_source}: "
                    f"{str(exc).splitlines()[0]}); spark.jars={spark.conf.get('spark.jars', '<unset>')}. "
                    "The test session loads it from jvm/target/spark: run `make jars`", pytrace=False)
    return spark
