"""``make bench``: every figure of the source in one run, on the same records.

    python -m bench [--quick] [--only state|delta|admin] [--peers embedded,apache] [--out-dir bench/results]

Headline, on every peer (the embedded broker, and Apache Kafka's own broker started for the
run): four consumers of the same topic, (1) format("sharegroup") into format("noop"), (2) a
plain confluent-kafka ShareConsumer loop, (3) Kafka's own share consumer perf tool (Java client)
and (4) Spark's own format("kafka") into format("noop"), with every ratio to (1) and (2) ((3) and (4)
use Kafka's Java client, which cannot talk to the embedded broker: Apache Kafka only), and
(1)'s ratio to the limit the in-flight window sets: records per batch / (ShareFetch time + Spark's
own batch time), both measured in the run (``bench.spark_limit``). Also on every peer: (a) the
plain loop and (b) the sharegroup query over 1..16 partitions, latency from produce to commit at
a steady rate well below the limit (``bench.latency``), and throughput at lock limits 2,000 and
10,000 (``bench.lock_limit``; 2,000 is the headline's configuration and reuses its runs). Once,
after the peers: what the session's checkpoint setting (conf/spark-defaults.conf) saves per batch
against Spark's default checkpoint manager (the trivial source). On the first peer also: (c) the driver methods' cost
per micro-batch and where it goes; (d) scaling over maxRecordsPerPartition; (e) the state store's
cost per epoch; (f) driver memory per 10,000 records in flight. Without Kafka: (g) bounded state,
a driver's restart on 10,000 epochs against 10, and one compacted-topic epoch's ledger row in the
current and the first encoding (``--only state`` measures (g) alone, in about two minutes, into
``<date>-state.*``). (h) coordinator=delta, on every peer: a plain Consumer reading the same records
by assign + seek into Arrow (the data path's limit) against coordinator=delta and the broker
coordinator into noop, and on Apache Kafka Spark's format("kafka"); on the first peer also the
acquire and settle commits per epoch, the driver's bytes per epoch at 64 B and 4 KiB records, and
1, 2 and 4 member processes on one partition (``--only delta`` measures (h) alone, in about three
minutes, into ``<date>-delta.*``). Writes
``<out-dir>/<date>.json`` and ``<date>.png`` (``<date>-quick.*`` with --quick) and prints a
short table. SHAREGROUP_TEST_BOOTSTRAP, as in the tests, makes the "apache" peer an existing
Kafka 4.2+ cluster instead of a broker the bench starts.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from itertools import count
from pathlib import Path
from typing import Any

import confluent_kafka
import deltalake
import psutil
import pyarrow as pa
import pyspark
from pyspark.sql import SparkSession

from bench import admin_bench
from bench.baseline import plain_share_consumer
from bench.bounded_state import bounded_state
from bench.cluster import BOOTSTRAP_ENV, PEERS, bench_kafka, produce_dataset
from bench.delta_coordinator import measure_delta
from bench.driver_loop import DriverJob, measure_driver
from bench.headline import CONSUMERS, measure_rounds, summary
from bench.latency import measure_latency
from bench.lock_limit import DEFAULT_RECORD_LOCK_LIMIT, measure_lock_limits
from bench.measure import median_run
from bench.perf_tool import kafka_perf_tool
from bench.plot import plot, plot_bounded_state, plot_delta
from bench.report import (
    LIMIT_TARGET,
    TARGET_RATIO,
    admin_table,
    delta_only_table,
    limit_note,
    state_only_table,
    table,
    write_json,
)
from bench.sizes import Sizes
from bench.spark_limit import limit_figures, spark_batch_cost, spark_settings
from bench.spark_noop import kafka_into_noop, source_into_noop
from bench.state_store_bench import ledger_latency
from sharegroup_source.testing.jars import jar_dir
from sharegroup_source.testing.kafka_peers import KafkaUnderTest
from sharegroup_source.testing.spark import local_spark


def _jar_version(profile: str, artifact: str) -> str | None:
    """The version of ``artifact`` among the jars ``make jars`` resolved for ``profile``."""
    for jar in jar_dir(profile).glob(f"{artifact}-*.jar"):
        if found := re.fullmatch(rf"{re.escape(artifact)}-(\d[\w.-]*)\.jar", jar.name):
            return found.group(1)
    return None


def _machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30),
            "python": platform.python_version(), "pyspark": pyspark.__version__,
            "confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0],
            "deltalake": deltalake.__version__, "pyarrow": pa.__version__,
            "apache_kafka": _jar_version("kafka", "kafka-clients"),
            "spark_kafka_clients": _jar_version("spark", "kafka-clients")}


def _say(message: str, started: float) -> None:
    print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)


def _bounded_state(sizes: Sizes, say: Callable[[str], None], built: Callable[[], None] = lambda: None
                   ) -> dict[str, Any]:
    """(g), before any broker or Spark query runs: the restart's time and memory are measured on a quiet machine
    (``built`` is called once the states are built, before the restarts)."""
    with tempfile.TemporaryDirectory(prefix="sharegroup-bench-state-") as scratch:
        return bounded_state(Path(scratch), sizes.state_epochs, sizes.state_records_per_epoch,
                             sizes.state_baseline_epochs, say, built)


def run_state_only(sizes: Sizes, quick: bool) -> dict[str, Any]:
    """``--only state``: (g) alone, no Kafka and no Spark, for a quick check of the state's bounds."""
    started = time.monotonic()
    state = _bounded_state(sizes, lambda message: _say(message, started))
    return {"date": str(date.today()), "quick": quick, "only": "state", "machine": _machine(),
            "elapsed_s": round(time.monotonic() - started), "bounded_state": state}


def _delta(kafka: KafkaUnderTest, spark: SparkSession, sizes: Sizes, scratch: Path, say: Callable[[str], None],
           figures: dict[str, Any]) -> None:
    """(h) on this peer into ``figures`` (the first peer measured also gets the details)."""
    measured = measure_delta(kafka, spark, sizes.delta, sizes.main_partitions, scratch / "delta", sizes.run_timeout_s,
                             say, details="peers" not in figures)
    figures.setdefault("peers", {})[kafka.kind] = measured.pop("comparison")
    figures.update(measured)


def _delta_figures(sizes: Sizes, peers: list[str]) -> dict[str, Any]:
    """What (h) ran with, before any peer adds its figures."""
    delta = sizes.delta
    return {"detail_peer": peers[0], "partitions": sizes.main_partitions, "records": delta.records, "value_bytes": 64,
            "options": {"maxRecordsPerTrigger": delta.trigger, "maxRecordsPerPartition": delta.task,
                        "share.partition.max.record.locks": delta.trigger},
            "reader_passes": delta.reader_passes, "rounds": delta.rounds, "target": TARGET_RATIO}


def _delta_verdict(figures: dict[str, Any]) -> None:
    """Whether coordinator=delta reached the target share of the plain reader, and of format("kafka"), per peer."""
    for peer in figures["peers"].values():
        to_reader = peer["ratio_to_plain_reader"]["delta"]
        to_kafka = peer["ratio_to_spark_kafka"]["delta"]
        peer["target_met"] = {"plain_reader": None if to_reader is None else to_reader >= TARGET_RATIO,
                              "spark_kafka": None if to_kafka is None else to_kafka >= TARGET_RATIO}


def run_delta_only(sizes: Sizes, quick: bool, peers: list[str]) -> dict[str, Any]:
    """``--only delta``: (h) alone, on every peer; one Spark session."""
    started = time.monotonic()
    delta = _delta_figures(sizes, peers)
    spark = local_spark()
    try:
        for peer in peers:
            with bench_kafka(peer) as kafka, tempfile.TemporaryDirectory(prefix="sharegroup-bench-") as scratch_dir:
                _delta(kafka, spark, sizes, Path(scratch_dir),
                       lambda message, peer=peer: _say(f"{peer}: {message}", started), delta)
    finally:
        spark.stop()
    _delta_verdict(delta)
    return {"date": str(date.today()), "quick": quick, "only": "delta", "machine": _machine(),
            "elapsed_s": round(time.monotonic() - started), "delta": delta}


#: (i): describing this many Delta groups of ADMIN_PARTITIONS share-partitions, one call against one per group
#: (one round: the two ways differ several times over, far beyond a round's noise).
ADMIN_GROUPS, ADMIN_PARTITIONS, ADMIN_ROUNDS = 100, 8, 1
#: Consumers on Kafka's Java client, which cannot talk to the embedded broker (see the README): not run there.
JAVA_CONSUMERS = ("kafka_perf_tool", "spark_kafka")


def _admin(kafka: KafkaUnderTest, scratch: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """(i) on this peer: describe_groups over many groups in one call, against the naive loop, same run."""
    figures = admin_bench.run(kafka, scratch / "admin", groups=ADMIN_GROUPS, partitions=ADMIN_PARTITIONS,
                              rounds=ADMIN_ROUNDS)
    say(f"(i) describe {ADMIN_GROUPS} groups: one call {figures['one_call']['wall_s']} s, one at a time "
        f"{figures['one_group_at_a_time']['wall_s']} s")
    return {"peer": kafka.kind, **figures}


def run_admin_only(peers: list[str]) -> dict[str, Any]:
    """``--only admin``: (i) alone, on the first peer."""
    started = time.monotonic()
    with bench_kafka(peers[0]) as kafka, tempfile.TemporaryDirectory(prefix="sharegroup-bench-") as scratch:
        admin = _admin(kafka, Path(scratch), lambda message: _say(message, started))
    return {"date": str(date.today()), "only": "admin", "quick": False, "machine": _machine(),
            "elapsed_s": round(time.monotonic() - started), "admin": admin}


def run(sizes: Sizes, quick: bool, peers: list[str]) -> dict[str, Any]:
    """(g), then on every peer the scaling over partitions, the headline (four consumers) with the limit,
    latency, the lock limits and (h); (c), (e), (f) and (i) on the first peer; then what the checkpoint
    setting saves of Spark's own batch cost. One Spark session."""
    started = time.monotonic()
    headline: dict[str, Any] = {}
    by_peer: dict[str, Any] = {}
    delta = _delta_figures(sizes, peers)
    # Spark's JVM starts while (g) builds its states (tens of seconds), and is up and idle before (g)'s restarts
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-start") as starting:
        session = starting.submit(local_spark)
        state = _bounded_state(sizes, lambda message: _say(message, started), built=lambda: session.result())
    spark = session.result()
    try:
        for index, peer in enumerate(peers):
            with bench_kafka(peer) as kafka, tempfile.TemporaryDirectory(prefix="sharegroup-bench-") as scratch_dir:
                def say(message: str, peer: str = peer) -> None:
                    _say(f"{peer}: {message}", started)

                scratch = Path(scratch_dir)
                scaling = _scaling(kafka, spark, sizes, scratch, say, details=index == 0)
                if index == 0:
                    details = {**_details(kafka, spark, scaling["main_topic"], sizes, scratch, say),
                               "baseline": scaling["baseline"], "source": scaling["source"],
                               "max_records_per_partition": scaling.pop("max_records_per_partition")}
                    admin = _admin(kafka, scratch, say)
                main = str(sizes.main_partitions)
                known = {"sharegroup": scaling["source"][main], "plain": scaling["baseline"][main]}
                headline[peer] = {"kind": kafka.describe(), **summary(
                    _headline(kafka, spark, scaling.pop("main_topic"), sizes, scratch, known, say))}
                by_peer[peer] = {"scaling": scaling,
                                 **_limit_and_latency(kafka, spark, sizes, scratch, say, headline[peer], known)}
                _delta(kafka, spark, sizes, scratch, say, delta)
        # last: a query's first batches in a fresh JVM are slower, which would count against whichever setting
        # ran first; by now every setting meets the same warm JVM
        with tempfile.TemporaryDirectory(prefix="sharegroup-bench-spark-") as scratch_dir:
            settings = spark_settings(spark, sizes.main_partitions * DEFAULT_RECORD_LOCK_LIMIT, sizes.main_partitions,
                                      sizes.spark_cost_batches, sizes.settings_rounds, Path(scratch_dir),
                                      lambda message: _say(message, started))
    finally:
        spark.stop()
    _delta_verdict(delta)
    main = str(sizes.main_partitions)
    ratio = details["source"][main]["throughput"]["records_per_s"] / max(
        details["baseline"][main]["throughput"]["records_per_s"], 1)
    commits = next(b for b in details["driver"]["profile"]["buckets"] if b["bucket"].startswith("Delta commits"))
    batch_s = details["source"][main]["batch_phases_p50_ms"].get("triggerExecution", 0) / 1000
    return {
        "date": str(date.today()), "quick": quick, "machine": _machine(),
        "elapsed_s": round(time.monotonic() - started),
        "kafka": {"detail_peer": peers[0], "peers": peers, "bootstrap_env": BOOTSTRAP_ENV,
                  "record_lock_limit": DEFAULT_RECORD_LOCK_LIMIT},
        "dataset": {"records": sizes.records, "value_bytes": sizes.value_bytes, "key": "record number, decimal"},
        "main_partitions": sizes.main_partitions,
        "headline": headline,
        "peers": by_peer,
        "spark_settings": settings,
        **details,
        "ratio": round(ratio, 3), "target": TARGET_RATIO, "target_met": ratio >= TARGET_RATIO,
        "limit_target": LIMIT_TARGET,
        "delta_commits_per_epoch": commits["calls_per_epoch"],
        "limit_note": limit_note(DEFAULT_RECORD_LOCK_LIMIT, batch_s),
        "bounded_state": state,
        "delta": delta,
        "admin": admin,
    }


def _details(kafka: KafkaUnderTest, spark: SparkSession, main_topic: str, sizes: Sizes, scratch: Path,
             say: Callable[[str], None]) -> dict[str, Any]:
    """Figures (c), (e) and (f) on the first peer."""
    driver = measure_driver(DriverJob(kafka.bootstrap_servers, main_topic, sizes.records, str(scratch / "driver"),
                                      tuple(kafka.new_group() for _ in range(sizes.source_repeats)),
                                      kafka.new_group(), kafka.new_group(), sizes.memory_batches,
                                      sizes.run_timeout_s))
    say(f"(c, f) driver methods: {driver['timing']['records_per_s']:,} records/s, per batch p50 "
        f"{driver['timing']['source_calls']['p50_ms']} ms")
    state = ledger_latency(scratch / "ledger", sizes.ledger_epochs)
    say(f"(e) ledger write+read p50 {state['write_plus_read']['p50_ms']} ms")
    return {"driver": driver, "state_store": state}


def _scaling_records(sizes: Sizes, partitions: int) -> int:
    """The headline's data set at its partition count, else a few lock windows per partition."""
    if partitions == sizes.main_partitions:
        return sizes.records
    return partitions * DEFAULT_RECORD_LOCK_LIMIT * sizes.scaling_windows


def _scaling(kafka: KafkaUnderTest, spark: SparkSession, sizes: Sizes, scratch: Path, say: Callable[[str], None],
             details: bool) -> dict[str, Any]:
    """(a) the plain loop and (b) the sharegroup query over every partition count, the headline's count with
    more repeats; with ``details`` also (d) over maxRecordsPerPartition."""
    topics = {p: produce_dataset(kafka, p, _scaling_records(sizes, p), sizes.value_bytes)
              for p in sizes.partition_counts}
    say("produced " + ", ".join(f"{_scaling_records(sizes, p):,} records in {p}" for p in topics) + " partitions")
    baseline = {}
    for partitions, topic in topics.items():
        records = _scaling_records(sizes, partitions)
        repeats = sizes.baseline_repeats if partitions == sizes.main_partitions else sizes.scaling_repeats
        baseline[str(partitions)] = median_run([plain_share_consumer(kafka, topic, records, sizes.run_timeout_s)
                                                for _ in range(repeats)])
        say(f"(a) plain ShareConsumer, {partitions} partition(s): "
            f"{baseline[str(partitions)]['runs_records_per_s']} records/s")
    source, per_limit = _spark_runs(kafka, spark, topics, sizes, scratch, say, details)
    return {"main_topic": topics[sizes.main_partitions],
            "records": {str(p): _scaling_records(sizes, p) for p in topics}, "baseline": baseline, "source": source,
            **({"max_records_per_partition": per_limit} if details else {})}


def _limit_and_latency(kafka: KafkaUnderTest, spark: SparkSession, sizes: Sizes, scratch: Path,
                       say: Callable[[str], None], headline: dict[str, Any],
                       known: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The limit for the headline's batches and its sharegroup query's ratio to it (added to ``headline``);
    latency at a steady rate well below it; throughput over the lock limit (at the default limit the
    headline's plain loop and sharegroup query, ``known``)."""
    sharegroup, plain = headline["runs"]["sharegroup"], headline["runs"]["plain"]
    rows = round(sharegroup["records_per_batch_p50"])
    # as many tasks as the headline query's batches: its epochs are cut into tasks of maxRecordsPerPartition, and
    # each task costs Spark's Python data source path tens of milliseconds of its own
    tasks = math.ceil(rows / max(sizes.max_records_per_partition))
    cost = spark_batch_cost(spark, rows, tasks, sizes.spark_cost_batches, scratch / "spark-cost")
    limit = limit_figures(rows, plain["throughput"]["records_per_s"], cost["batch_ms_p50"],
                          sharegroup["throughput"]["records_per_s"])
    headline["limit"] = {**limit, "spark_batch": cost, "target": LIMIT_TARGET}
    say(f"limit for {rows:,}-record batches: {limit['limit_records_per_s']:,} records/s (ShareFetch "
        f"{limit['share_fetch_ms']} ms + Spark's own batch {limit['spark_batch_ms']} ms); sharegroup at "
        f"{limit['ratio_to_limit']} of it")
    rate = sizes.latency_share * sharegroup["throughput"]["records_per_s"]
    latency = measure_latency(spark, kafka, sizes.main_partitions, rate, sizes.latency_seconds, sizes.value_bytes,
                              scratch, say)
    locks = measure_lock_limits(kafka, spark, sizes.lock_limits, sizes.main_partitions, sizes.value_bytes, scratch,
                                sizes.run_timeout_s, say, known)
    return {"latency": latency, "lock_limits": locks}


def _headline(kafka: KafkaUnderTest, spark: SparkSession, topic: str, sizes: Sizes, scratch: Path,
              known: dict[str, dict[str, Any]], say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """The four consumers on ``topic``; those in ``known`` were measured already on this peer, and those on
    Kafka's Java client are not run on the embedded broker (their figure says why)."""
    runs = count()
    limit = max(sizes.max_records_per_partition)
    consumers = {
        "sharegroup": lambda: source_into_noop(spark, kafka, topic, sizes.records, scratch / f"head-{next(runs)}",
                                               sizes.run_timeout_s, maxRecordsPerPartition=limit),
        "plain": lambda: plain_share_consumer(kafka, topic, sizes.records, sizes.run_timeout_s),
        "kafka_perf_tool": lambda: kafka_perf_tool(kafka, topic, sizes.records, sizes.run_timeout_s),
        "spark_kafka": lambda: kafka_into_noop(spark, kafka, topic, sizes.records, scratch / f"head-{next(runs)}",
                                               sizes.run_timeout_s, sizes.main_partitions * DEFAULT_RECORD_LOCK_LIMIT),
    }
    skipped = {name: {"error": "not run: Kafka's Java client cannot talk to the embedded broker"}
               for name in (JAVA_CONSUMERS if kafka.is_embedded else ())}
    measured = measure_rounds({k: v for k, v in consumers.items() if k not in known and k not in skipped},
                              sizes.headline_repeats,
                              lambda message: say(f"headline, {sizes.main_partitions} partitions: {message}"))
    return {name: known.get(name) or skipped.get(name) or measured[name] for name in CONSUMERS}


def _spark_runs(kafka: KafkaUnderTest, spark: SparkSession, topics: dict[int, str], sizes: Sizes, scratch: Path,
                say: Callable[[str], None], details: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(b), and with ``details`` (d): one query per configuration, each on a fresh share group."""
    default_limit = max(sizes.max_records_per_partition)
    runs = count()

    def one(partitions: int, limit: int) -> dict[str, Any]:
        result = source_into_noop(spark, kafka, topics[partitions], _scaling_records(sizes, partitions),
                                  scratch / f"spark-{next(runs)}",
                                  sizes.run_timeout_s, maxRecordsPerPartition=limit)
        say(f"(b) sharegroup -> noop, {partitions} partition(s), maxRecordsPerPartition={limit}: "
            f"{result['throughput']['records_per_s']:,} records/s")
        return result

    source = {}
    for partitions in topics:
        repeats = sizes.source_repeats if partitions == sizes.main_partitions else sizes.scaling_repeats
        source[str(partitions)] = median_run([one(partitions, default_limit) for _ in range(repeats)])
    per_limit = {str(default_limit): source[str(sizes.main_partitions)]}
    for limit in sizes.max_records_per_partition if details else ():
        if limit != default_limit:
            per_limit[str(limit)] = one(sizes.main_partitions, limit)
    return source, dict(sorted(per_limit.items(), key=lambda item: int(item[0])))


def _peers(value: str) -> list[str]:
    peers = [p.strip() for p in value.split(",") if p.strip()]
    unknown = [p for p in peers if p not in PEERS]
    if not peers or unknown or len(set(peers)) < len(peers):
        raise argparse.ArgumentTypeError(f"{value!r}: expected distinct peers from {', '.join(PEERS)}")
    return peers


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and configurations (3 to 4 minutes)")
    parser.add_argument("--peers", default=",".join(PEERS), type=_peers,
                        help=f"comma-separated Kafka peers, from {', '.join(PEERS)} (default: both); "
                             "figures (a) to (f) are measured on the first, the headline on each")
    parser.add_argument("--only", choices=["state", "delta", "admin"],
                        help="state: only (g) bounded state, without Kafka or Spark (--quick: 2,000 epochs); "
                             "delta: only (h) coordinator=delta, on every peer of --peers; "
                             "admin: only (i) describing 100 groups, on the first peer")
    parser.add_argument("--out-dir", type=Path, default=Path("bench/results"), help="where the JSON and PNG go")
    args = parser.parse_args(argv)
    sizes = Sizes.quick() if args.quick else Sizes.full()
    runs = {"state": lambda: run_state_only(sizes, args.quick),
            "delta": lambda: run_delta_only(sizes, args.quick, args.peers),
            "admin": lambda: run_admin_only(args.peers)}
    figures = runs[args.only]() if args.only else run(sizes, args.quick, args.peers)
    stem = f"{figures['date']}{'-quick' if args.quick else ''}{'-' + args.only if args.only else ''}"
    write_json(figures, args.out_dir / f"{stem}.json")
    outputs = {None: (plot, table), "state": (plot_bounded_state, state_only_table),
               "delta": (plot_delta, delta_only_table), "admin": (None, admin_table)}
    draw, text = outputs[args.only]
    if draw is not None:
        draw(figures, args.out_dir / f"{stem}.png")
    print()
    print(text(figures))
    print(f"\nfigures written to {args.out_dir / stem}.json{' and .png' if draw is not None else ''}")
    return figures


if __name__ == "__main__":
    main()
