"""``make soak``: a bounded soak of format("sharegroup") under random faults.

    python -m soak [--kafka embedded|cluster] [--minutes 10] [--seed 932] [--keep DIR]

``--kafka embedded`` (the default) uses a three-node embedded broker (so a node going down takes
only part of the cluster), or the cluster named by SHAREGROUP_TEST_BOOTSTRAP, where the faults that
need the embedded broker are left out. ``--kafka cluster`` starts three Apache Kafka brokers from
the jars of ``make jars`` (replication factor 3, min ISR 2) and adds broker kills (kill -9) and
restarts to the faults. Prints the table of faults and records; exits 1 if anything was lost or
duplicated, or the query failed in a way no fault caused.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from sharegroup_source.testing.embedded_broker import EmbeddedBroker
from sharegroup_source.testing.kafka_cluster import KafkaCluster
from sharegroup_source.testing.kafka_peers import BOOTSTRAP_ENV, KafkaUnderTest
from sharegroup_source.testing.spark import local_spark
from soak.run import SoakSettings, run_soak

#: share of the run spent injecting faults; the rest is left for the drain
FAULT_SHARE = 0.8


def _kafka(kind: str) -> tuple[KafkaUnderTest, EmbeddedBroker | KafkaCluster | None, str]:
    """The Kafka to soak on, what to stop at the end, and how to name it."""
    if kind == "cluster":
        cluster = KafkaCluster().start()
        return (KafkaUnderTest(None, cluster.bootstrap_servers, cluster=cluster), cluster,
                f"three Apache Kafka brokers (started in {cluster.start_seconds:.0f} s; logs in {cluster.directory})")
    if os.environ.get(BOOTSTRAP_ENV):
        return KafkaUnderTest(None, os.environ[BOOTSTRAP_ENV]), None, "the cluster in " + BOOTSTRAP_ENV
    broker = EmbeddedBroker(brokers=3).start()
    return KafkaUnderTest(broker, broker.bootstrap_servers), broker, "the embedded broker"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", choices=("embedded", "cluster"), default="embedded",
                        help="the three-node embedded broker, or three Apache Kafka brokers with kills and restarts")
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the soak runs, drain included")
    parser.add_argument("--seed", type=int, default=932, help="seed of the fault schedule")
    parser.add_argument("--keep", type=Path, help="keep the sink, checkpoint and state in this folder")
    args = parser.parse_args(argv)
    seconds = args.minutes * 60
    settings = SoakSettings(fault_seconds=seconds * FAULT_SHARE, drain_timeout_s=seconds * (1 - FAULT_SHARE),
                            seed=args.seed)
    kafka, broker, name = _kafka(args.kafka)
    print(f"soak for {args.minutes:g} min on {name}, seed {args.seed}", flush=True)
    spark = local_spark()
    try:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            report = run_soak(spark, kafka, args.keep, settings)
        else:
            with tempfile.TemporaryDirectory(prefix="sharegroup-soak-") as work:
                report = run_soak(spark, kafka, Path(work), settings)
    finally:
        spark.stop()
        kafka.close()
        if isinstance(broker, KafkaCluster):
            broker.cleanup()
        elif broker is not None:
            broker.close()
    print(report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
