"""What a soak runs in: the Kafka it soaks on, a local Spark session, and the folder its sinks, checkpoints and
state go to; and the command-line options that choose them.

Shared by ``python -m soak`` and ``python -m soak.long``, so both start, name and clean up their
Kafka and Spark the same way.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from sharegroup_testing.embedded_broker import EmbeddedBroker
from sharegroup_testing.kafka_cluster import KafkaCluster
from sharegroup_testing.kafka_peers import BOOTSTRAP_ENV, KafkaUnderTest
from sharegroup_testing.spark import local_spark

__all__ = ["KAFKA_KINDS", "add_session_arguments", "soak_session"]

#: ``embedded``: a three-node embedded broker (or the cluster in SHAREGROUP_TEST_BOOTSTRAP); ``cluster``: three
#: Apache Kafka brokers from ``make jars``, which the soak kills and restarts.
KAFKA_KINDS = ("embedded", "cluster")


def add_session_arguments(parser: argparse.ArgumentParser, kafka: str) -> None:
    """``--kafka`` (``kafka`` by default), ``--seed`` and ``--keep``."""
    parser.add_argument("--kafka", choices=KAFKA_KINDS, default=kafka,
                        help="the three-node embedded broker, or three Apache Kafka brokers with kills and restarts")
    parser.add_argument("--seed", type=int, default=932, help="seed of the fault schedule")
    parser.add_argument("--keep", type=Path, help="keep the sinks, checkpoints and state in this folder")


@contextmanager
def _kafka(kind: str) -> Iterator[tuple[KafkaUnderTest, str]]:
    """The Kafka to soak on and how to name it; stopped (the cluster's folders removed) when the block ends."""
    if kind == "cluster":
        cluster = KafkaCluster().start()
        kafka = KafkaUnderTest(None, cluster.bootstrap_servers, cluster=cluster)
        try:
            yield kafka, (f"three Apache Kafka brokers (started in {cluster.start_seconds:.0f} s; logs in "
                          f"{cluster.directory})")
        finally:
            kafka.close()
            cluster.cleanup()
    elif os.environ.get(BOOTSTRAP_ENV):
        with KafkaUnderTest(None, os.environ[BOOTSTRAP_ENV]) as kafka:
            yield kafka, "the cluster in " + BOOTSTRAP_ENV
    else:
        broker = EmbeddedBroker(brokers=3).start()
        kafka = KafkaUnderTest(broker, broker.bootstrap_servers)
        try:
            yield kafka, "the embedded broker"
        finally:
            kafka.close()
            broker.close()


@contextmanager
def _work_dir(keep: Path | None, prefix: str) -> Iterator[Path]:
    """``keep`` (made if missing, left behind), or a temporary folder removed when the block ends."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as work:
        yield Path(work)


@contextmanager
def soak_session(args: argparse.Namespace, prefix: str, heading: Callable[[str], str],
                 java_options: str = "") -> Iterator[tuple[SparkSession, KafkaUnderTest, Path]]:
    """The Kafka ``args.kafka`` names, a local Spark session (its driver JVM given ``java_options``) and the work
    folder (``args.keep``, or a temporary one named ``prefix...``); ``heading(name of the Kafka)`` is printed once
    the Kafka is up. Spark stops before the Kafka does, whatever ends the block."""
    with _kafka(args.kafka) as (kafka, name):
        print(heading(name), flush=True)
        spark = local_spark(java_options)
        try:
            with _work_dir(args.keep, prefix) as work:
                yield spark, kafka, work
        finally:
            spark.stop()
