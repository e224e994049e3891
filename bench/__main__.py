"""``make bench``: every figure of the source in one run, the throughput story first.

    python -m bench [--quick] [--only state|delta|admin|admin-broker|state-store|members]
                    [--peers apache,embedded] [--out-dir bench/results]

The throughput story, on Apache Kafka (the broker the bench starts from the jars, or the cluster of
SHAREGROUP_TEST_BOOTSTRAP), in ONE table and one plot (``bench.story``): records/s of 64 B records over
2, 4, 8 and 16 partitions for five consumers of the same topic, each on a fresh group or checkpoint:
``plain`` (the plain confluent-kafka ShareConsumer loop, max.poll.records = partitions x 10,000),
``broker`` (format("sharegroup") with its default options into noop: one poll per batch, sized by the
share-partitions' in-flight windows), ``broker_tuned`` (the broker coordinator with the README's recommended
checkpointLocation and one task per batch however many records the windows hold),
``delta`` (coordinator=delta, maxRecordsPerTrigger 100,000, maxRecordsPerPartition 50,000: the default) and
``spark_kafka`` (Spark's format("kafka"), maxOffsetsPerTrigger 100,000), plus Kafka's own share consumer
perf tool (the Java client) as a second plain yardstick; medians of 3 interleaved
rounds (round r runs every consumer at every partition count before round r+1). Beside them the
per-partition limit, a physical limit measured in the same rounds: partitions x lock limit /
(ShareFetch time + Spark's own batch time at that batch size), ShareFetch time = the batch / the plain
loop's rate at that partition count, Spark's own batch = the trivial in-memory source of
``bench.spark_limit`` at partitions x 2,000 rows, the better of 1 task and one per core. Every cell
carries its ratio to spark_kafka and to the limit; the done-when checks (broker(16) / broker(2) >= 3,
broker(16) / limit(16) >= 0.8, delta(16) / spark_kafka(16) >= 0.8) are printed and stored, met or not.

The other figures, at 4 partitions. On every peer: latency from produce to commit at a steady rate
well below the sharegroup query's (``bench.latency``), throughput at lock limits 2,000 and 10,000
(``bench.lock_limit``; 2,000 reuses the story's runs) and (h) coordinator=delta: a plain Consumer
reading the same records by assign + seek into Arrow (the data path's limit) against coordinator=delta,
the broker coordinator with the same batch options and, on Apache Kafka, format("kafka") (there on the
story's 4-partition topic, whose delta and format("kafka") runs it reuses). On the first peer: (c) the
driver methods' cost per micro-batch and where it goes; (d) the default-batch query over
maxRecordsPerPartition (the story's default and tuned runs and one more value); (e) the state store's
cost per epoch; (f) driver memory per 10,000 records in flight; (i) describing 100 Delta groups. With Apache
Kafka among the peers, on a broker of its own: (j) ``sharegroup describe --all-groups`` against Kafka's own
``kafka-share-groups --describe --all-groups --offsets`` over 1, 100 and 1,000 share groups
(``bench.admin_broker_bench``, into ``"admin": {"broker_groups": {N: ...}}``). On Apache Kafka: (k) the state
store on local disk against S3 (``bench.remote_state``): both coordinators (``broker``, the default, and
``delta`` with ``groupLocation``) at 16 partitions into noop, 80,000 records in batches of 5,000
(maxRecordsPerTrigger), their state (stateLocation, and groupLocation) on local disk and on moto's S3 server on
loopback (``stateStorage.<key>`` options), each run on a fresh group, checkpoint and location, medians of 3
interleaved rounds: the Spark batch p50 (triggerExecution of the steady batches), records/s and Delta commits
per batch (steady, and over the whole run; per table), into ``"state_store": {"local": {coordinator: ...},
"s3": {coordinator: ...}, "store_run": ...}`` beside (e)'s figures. On Apache Kafka too: (l) the queue's scaling
(``bench.members``), every member a process of its own doing 5 ms of work per record (``time.sleep``, a stand-in
for I/O-bound work) one record after another: 1, 2, 4 and 8 members on ONE partition, 1,600 records, in five
series (a Delta group's DeltaShareConsumers, and with a coordinator=delta query among them; a broker group's
confluent-kafka ShareConsumers on the producer's own large batches, on one-record batches, and on one-record
batches with a coordinator=broker query among them), and 1, 2 and 3 queries, each a Spark application of its
own, as the only members of one broker group on 6 partitions; records/s from the members' start to the last
record acknowledged, how the records split among the members, and every record worked on once (duplicates and
missing kept, and printed loudly), into ``"members": {"delta": {series: {members: records/s}}, "broker": ...,
"queries": {N: {"records_per_s", "split", "duplicates", "missing"}}, "runs": ...}``; one round. On the
embedded broker (no format("kafka"): Java clients cannot talk to it; 5 MiB per partition) there is no
story: the plain loop and the default sharegroup query run once on a 50,000-record topic for the
figures above. Without Kafka: (g) bounded state, a driver's restart on 10,000 epochs against 10, and one
compacted-topic epoch's ledger row in the current and the first encoding. Once, at the end: what the
session's checkpoint setting (conf/spark-defaults.conf) saves per batch against Spark's default
checkpoint manager (the trivial source).

The story replaces what it supersedes: the headline (four consumers at 4 partitions, with Kafka's
ShareConsumerPerformance tool, now not run), (a) and (b) over 1..16 partitions, and the limit and
(d) on the one-poll batch of 10,000 records. (d) shrank to one extra run.

A full run takes about 25 minutes on two cores, most of it the story (60 consumer runs and 24 of
Spark's own batch), about 5 of it (j), (k) adds about 3.5 (12 runs) and (l) about 5 (23 runs, and the
start of its 8 consumer processes and 3 Spark applications); ``--quick`` about 5 minutes, 1.5 for (k) and
2 for (l) (one round, smaller topics and batches; (l): 400 records, 1 and 4 members, 2 queries). ``--only
state`` measures (g) alone, in about two minutes, into ``<date>-state.*``; ``--only delta`` (h) alone into
``<date>-delta.*``; ``--only admin`` (i) alone; ``--only admin-broker`` (j) alone, in about five minutes,
into ``<date>-admin-broker.*``; ``--only state-store`` (k) alone, in about four minutes (two with --quick),
into ``<date>-state-store.*``; ``--only members`` (l) alone, in about five minutes (two with --quick), into
``<date>-members.*``. Writes ``<out-dir>/<date>.json`` and
``<date>.png`` (``<date>-quick.*`` with --quick) and prints the table. The JSON carries
``"scaling": {peer: {consumer: {partitions: records/s}}}`` and ``"limit_per_partition": {peer:
{partitions: records/s}}``, with the runs, options, batch sizes, the limit's terms and the checks
under ``"story": {peer: ...}``.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

import confluent_kafka
import deltalake
import psutil
import pyarrow as pa
import pyspark
from pyspark.sql import SparkSession

from bench import admin_bench, admin_broker_bench
from bench.baseline import plain_share_consumer
from bench.bounded_state import bounded_state
from bench.cluster import BOOTSTRAP_ENV, PEERS, bench_kafka, produce_dataset
from bench.delta_coordinator import measure_delta
from bench.driver_loop import DriverJob, measure_driver
from bench.latency import measure_latency
from bench.lock_limit import DEFAULT_RECORD_LOCK_LIMIT, measure_lock_limits
from bench.members import MemberSizes, measure_members
from bench.plot import plot, plot_admin_broker, plot_bounded_state, plot_delta, plot_members, plot_state_store
from bench.remote_state import StoreSizes, measure_state_stores
from bench.report import (
    TARGET_RATIO,
    admin_broker_table,
    admin_table,
    delta_only_table,
    members_only_table,
    state_only_table,
    state_store_only_table,
    table,
    write_json,
)
from bench.sizes import Sizes
from bench.spark_limit import spark_settings
from bench.spark_noop import source_into_noop
from bench.state_store_bench import ledger_latency
from bench.story import PLAIN_POLL_RECORDS_PER_PARTITION, measure_story
from sharegroup_source.options import SourceOptions
from sharegroup_testing.jars import jar_dir
from sharegroup_testing.kafka_peers import KafkaUnderTest
from sharegroup_testing.spark import local_spark


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
           figures: dict[str, Any], reuse: dict[str, Any] | None = None) -> None:
    """(h) on this peer into ``figures`` (the first peer measured also gets the details); on the story's topic
    and with its runs where ``reuse`` has them (``topic``, ``records``, ``known``)."""
    reuse = reuse or {}
    delta = replace(sizes.delta, records=reuse["records"]) if "records" in reuse else sizes.delta
    measured = measure_delta(kafka, spark, delta, sizes.main_partitions, scratch / "delta", sizes.run_timeout_s,
                             say, details="peers" not in figures, topic=reuse.get("topic"), known=reuse.get("known"))
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


#: (j): interleaved rounds of describing every broker group both ways (--quick: one).
ADMIN_BROKER_ROUNDS = 3


def _admin_broker(quick: bool, say: Callable[[str], None]) -> dict[str, Any]:
    """(j) on a fresh broker of its own: ``--all-groups`` must list the bench's N groups only, and the story's
    broker holds dozens of its own. A cluster of SHAREGROUP_TEST_BOOTSTRAP is skipped: other groups, and no
    Kafka tool of ours to run at it."""
    if os.environ.get(BOOTSTRAP_ENV):
        return {"broker_groups_run": {"skipped": f"{BOOTSTRAP_ENV} is set: (j) needs a broker of its own"}}
    with bench_kafka("apache") as kafka:
        figures = admin_broker_bench.run(kafka, rounds=1 if quick else ADMIN_BROKER_ROUNDS, say=say)
    return {"broker_groups": figures["groups"], "broker_groups_run": figures["run"]}


def run_admin_broker_only(quick: bool) -> dict[str, Any]:
    """``--only admin-broker``: (j) alone, on Apache Kafka whatever --peers says."""
    started = time.monotonic()
    admin = _admin_broker(quick, lambda message: _say(message, started))
    return {"date": str(date.today()), "only": "admin-broker", "quick": quick, "machine": _machine(),
            "elapsed_s": round(time.monotonic() - started), "admin": admin}


def _state_stores(kafka: KafkaUnderTest, spark: SparkSession, quick: bool, scratch: Path,
                  say: Callable[[str], None]) -> dict[str, Any]:
    """(k) on Apache Kafka: both coordinators with their state on local disk and on an S3 server, in interleaved
    rounds (``bench.remote_state``)."""
    return measure_state_stores(kafka, spark, StoreSizes.quick() if quick else StoreSizes.full(),
                                scratch / "state-store", say)


def run_state_store_only(quick: bool) -> dict[str, Any]:
    """``--only state-store``: (k) alone, on Apache Kafka whatever --peers says; one Spark session."""
    started = time.monotonic()
    spark = local_spark()
    try:
        with bench_kafka("apache") as kafka, tempfile.TemporaryDirectory(prefix="sharegroup-bench-") as scratch:
            stores = _state_stores(kafka, spark, quick, Path(scratch), lambda message: _say(message, started))
    finally:
        spark.stop()
    return {"date": str(date.today()), "quick": quick, "only": "state-store", "machine": _machine(),
            "elapsed_s": round(time.monotonic() - started), "state_store": stores}


def _members(kafka: KafkaUnderTest, quick: bool, scratch: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """(l) on Apache Kafka: members with per-record work on one partition, and N queries in one broker group
    (``bench.members``); their own processes, so no Spark session of ours."""
    return measure_members(kafka, MemberSizes.quick() if quick else MemberSizes.full(), scratch / "members", say)


def run_members_only(quick: bool) -> dict[str, Any]:
    """``--only members``: (l) alone, on Apache Kafka whatever --peers says."""
    started = time.monotonic()
    with bench_kafka("apache") as kafka, tempfile.TemporaryDirectory(prefix="sharegroup-bench-") as scratch:
        members = _members(kafka, quick, Path(scratch), lambda message: _say(message, started))
    return {"date": str(date.today()), "quick": quick, "only": "members", "machine": _machine(),
            "elapsed_s": round(time.monotonic() - started), "members": members}


def run(sizes: Sizes, quick: bool, peers: list[str]) -> dict[str, Any]:
    """(g), then on every peer the throughput story (Apache Kafka) or the main topic's two runs (the embedded
    broker), latency, the lock limits and (h), and (k) and (l) on Apache Kafka; (c) to (f) and (i) on the first
    peer; (j) on a broker of its own with Apache Kafka among the peers; then what the checkpoint setting saves of
    Spark's own batch cost. One Spark session of ours ((l)'s queries have their own)."""
    started = time.monotonic()
    by_peer: dict[str, Any] = {}
    stories: dict[str, Any] = {}
    delta = _delta_figures(sizes, peers)
    stores: dict[str, Any] = {"store_run": {"skipped": "(k) runs on Apache Kafka, which --peers leaves out"}}
    members: dict[str, Any] = {"skipped": "(l) runs on Apache Kafka, which --peers leaves out"}
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
                main = _main_runs(kafka, spark, sizes, scratch, say, stories)
                if index == 0:
                    details = {**_details(kafka, spark, main.topic, sizes, scratch, say),
                               **_per_partition_limit(kafka, spark, main, sizes, scratch, say)}
                    admin = _admin(kafka, scratch, say)
                by_peer[peer] = _latency_and_locks(kafka, spark, sizes, scratch, say, main.known)
                _delta(kafka, spark, sizes, scratch, say, delta, main.delta)
                if peer == "apache":
                    stores = _state_stores(kafka, spark, quick, scratch, say)
                    members = _members(kafka, quick, scratch, say)
        if "apache" in peers:
            admin.update(_admin_broker(quick, lambda message: _say(f"apache: {message}", started)))
        # last: a query's first batches in a fresh JVM are slower, which would count against whichever setting
        # ran first; by now every setting meets the same warm JVM
        with tempfile.TemporaryDirectory(prefix="sharegroup-bench-spark-") as scratch_dir:
            settings = spark_settings(spark, sizes.main_partitions * DEFAULT_RECORD_LOCK_LIMIT, sizes.main_partitions,
                                      sizes.spark_cost_batches, sizes.settings_rounds, Path(scratch_dir),
                                      lambda message: _say(message, started))
    finally:
        spark.stop()
    _delta_verdict(delta)
    commits = next(b for b in details["driver"]["profile"]["buckets"] if b["bucket"].startswith("Delta commits"))
    details["state_store"].update(stores)  # (e) and (k) under one key: (e)'s figures, "local", "s3", "store_run"
    return {
        "date": str(date.today()), "quick": quick, "machine": _machine(),
        "elapsed_s": round(time.monotonic() - started),
        "kafka": {"detail_peer": peers[0], "peers": peers, "bootstrap_env": BOOTSTRAP_ENV,
                  "record_lock_limit": DEFAULT_RECORD_LOCK_LIMIT},
        "dataset": {"value_bytes": sizes.value_bytes, "key": "record number, decimal",
                    "story_records_per_topic": sizes.story.records, "main_records_embedded": sizes.records},
        "main_partitions": sizes.main_partitions,
        "scaling": {peer: story.pop("scaling") for peer, story in stories.items()},
        "limit_per_partition": {peer: story.pop("limit_per_partition") for peer, story in stories.items()},
        "story": stories,
        "peers": by_peer,
        "spark_settings": settings,
        **details,
        "delta_commits_per_epoch": commits["calls_per_epoch"],
        "bounded_state": state,
        "delta": delta,
        "admin": admin,
        "members": members,
    }


@dataclass
class _Main:
    """A peer's topic at the main partition count and what was measured on it already: ``known`` the plain
    loop and the sharegroup query with its defaults (and, from the story, tuned), ``delta`` what (h) takes
    from the story (its topic, records and runs), ``records`` what a broker run reads of it."""

    topic: str
    records: int
    known: dict[str, dict[str, Any]]
    delta: dict[str, Any] = field(default_factory=dict)


def _main_runs(kafka: KafkaUnderTest, spark: SparkSession, sizes: Sizes, scratch: Path, say: Callable[[str], None],
               stories: dict[str, Any]) -> _Main:
    """On Apache Kafka the throughput story (into ``stories``), whose runs at the main partition count the other
    figures reuse; on the embedded broker (no format("kafka"), 5 MiB per partition) the plain loop and the
    sharegroup query once each on a small topic at the main partition count."""
    partitions, story_sizes = sizes.main_partitions, sizes.story
    if kafka.is_embedded or partitions not in story_sizes.partition_counts:
        topic = produce_dataset(kafka, partitions, sizes.records, sizes.value_bytes)
        known = {"plain": plain_share_consumer(kafka, topic, sizes.records, sizes.run_timeout_s,
                                               max_poll_records=partitions * PLAIN_POLL_RECORDS_PER_PARTITION),
                 "sharegroup": source_into_noop(spark, kafka, topic, sizes.records, scratch / "main",
                                                sizes.run_timeout_s)}
        say(f"{partitions} partitions, {sizes.records:,} records: plain "
            f"{known['plain']['throughput']['records_per_s']:,} records/s, sharegroup (defaults) "
            f"{known['sharegroup']['throughput']['records_per_s']:,} records/s")
        return _Main(topic, sizes.records, known)
    story = measure_story(kafka, spark, story_sizes, DEFAULT_RECORD_LOCK_LIMIT, sizes.value_bytes,
                          scratch / "story", sizes.run_timeout_s, say)
    stories[kafka.kind] = story
    main, runs = str(partitions), story["runs"]
    known = {"plain": runs["plain"][main], "sharegroup": runs["broker"][main],
             "sharegroup_tuned": runs["broker_tuned"][main]}
    same_batches = (story_sizes.trigger, story_sizes.task) == (sizes.delta.trigger, sizes.delta.task)
    return _Main(story["topics"][main], story["records"]["broker"][main], known,
                 {"topic": story["topics"][main], "records": story_sizes.records,
                  "known": {name: runs[name][main] for name in ("delta", "spark_kafka")} if same_batches else {}})


def _details(kafka: KafkaUnderTest, spark: SparkSession, main_topic: str, sizes: Sizes, scratch: Path,
             say: Callable[[str], None]) -> dict[str, Any]:
    """Figures (c), (e) and (f) on the first peer."""
    driver = measure_driver(DriverJob(kafka.bootstrap_servers, main_topic, sizes.records, str(scratch / "driver"),
                                      tuple(kafka.new_group() for _ in range(sizes.driver_passes)),
                                      kafka.new_group(), kafka.new_group(), sizes.memory_batches,
                                      sizes.run_timeout_s))
    say(f"(c, f) driver methods: {driver['timing']['records_per_s']:,} records/s, per batch p50 "
        f"{driver['timing']['source_calls']['p50_ms']} ms")
    state = ledger_latency(scratch / "ledger", sizes.ledger_epochs)
    say(f"(e) ledger write+read p50 {state['write_plus_read']['p50_ms']} ms")
    return {"driver": driver, "state_store": state}


def _per_partition_limit(kafka: KafkaUnderTest, spark: SparkSession, main: _Main, sizes: Sizes, scratch: Path,
                         say: Callable[[str], None]) -> dict[str, Any]:
    """(d), and which value is the source's default: the sharegroup query with its default batch over
    maxRecordsPerPartition, at the main partition count; the source's default and the story's tuned value are
    runs measured already, one run at each other value."""
    default = SourceOptions.parse({"kafka.bootstrap.servers": kafka.bootstrap_servers, "kafka.group.id": "default",
                                   "subscribe": main.topic, "stateLocation": str(scratch)}).max_records_per_partition
    by_limit = {str(default): main.known["sharegroup"]}
    if "sharegroup_tuned" in main.known:
        by_limit[main.known["sharegroup_tuned"]["options"]["maxRecordsPerPartition"]] = main.known["sharegroup_tuned"]
    for limit in sizes.max_records_per_partition:
        run = source_into_noop(spark, kafka, main.topic, main.records, scratch / f"per-partition-{limit}",
                               sizes.run_timeout_s, maxRecordsPerPartition=limit)
        say(f"(d) sharegroup -> noop, {sizes.main_partitions} partitions, maxRecordsPerPartition={limit}: "
            f"{run['throughput']['records_per_s']:,} records/s")
        by_limit[str(limit)] = run
    return {"max_records_per_partition": dict(sorted(by_limit.items(), key=lambda item: int(item[0]))),
            "max_records_per_partition_default": str(default)}


def _latency_and_locks(kafka: KafkaUnderTest, spark: SparkSession, sizes: Sizes, scratch: Path,
                       say: Callable[[str], None], known: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Latency at a steady rate well below the sharegroup query's (``known``); throughput over the lock limit (at
    the default limit the plain loop and sharegroup query of ``known``)."""
    rate = sizes.latency_share * known["sharegroup"]["throughput"]["records_per_s"]
    latency = measure_latency(spark, kafka, sizes.main_partitions, rate, sizes.latency_seconds, sizes.value_bytes,
                              scratch, say)
    locks = measure_lock_limits(kafka, spark, sizes.lock_limits, sizes.main_partitions, sizes.value_bytes, scratch,
                                sizes.run_timeout_s, say, known)
    return {"latency": latency, "lock_limits": locks}


#: Apache Kafka first: the story runs there, and the first peer's figures reuse its runs.
DEFAULT_PEERS = ("apache", "embedded")


def _peers(value: str) -> list[str]:
    peers = [p.strip() for p in value.split(",") if p.strip()]
    unknown = [p for p in peers if p not in PEERS]
    if not peers or unknown or len(set(peers)) < len(peers):
        raise argparse.ArgumentTypeError(f"{value!r}: expected distinct peers from {', '.join(PEERS)}")
    return peers


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round, fewer records (about 5 minutes)")
    parser.add_argument("--peers", default=",".join(DEFAULT_PEERS), type=_peers,
                        help=f"comma-separated Kafka peers, from {', '.join(PEERS)} (default: "
                             f"{','.join(DEFAULT_PEERS)}); the throughput story runs on Apache Kafka, figures "
                             "(c) to (f) and (i) on the first peer")
    parser.add_argument("--only", choices=["state", "delta", "admin", "admin-broker", "state-store", "members"],
                        help="state: only (g) bounded state, without Kafka or Spark (--quick: 2,000 epochs); "
                             "delta: only (h) coordinator=delta, on every peer of --peers; "
                             "admin: only (i) describing 100 groups, on the first peer; "
                             "admin-broker: only (j) sharegroup describe --all-groups against Kafka's "
                             "kafka-share-groups over 1, 100 and 1,000 groups, on Apache Kafka (--quick: 1 round); "
                             "state-store: only (k) both coordinators' state on local disk against an S3 server, "
                             "on Apache Kafka (--quick: 1 round); "
                             "members: only (l) members with per-record work on one partition and N queries in one "
                             "broker group, on Apache Kafka (--quick: 400 records, 1 and 4 members, 2 queries)")
    parser.add_argument("--out-dir", type=Path, default=Path("bench/results"), help="where the JSON and PNG go")
    args = parser.parse_args(argv)
    sizes = Sizes.quick() if args.quick else Sizes.full()
    runs = {"state": lambda: run_state_only(sizes, args.quick),
            "delta": lambda: run_delta_only(sizes, args.quick, args.peers),
            "admin": lambda: run_admin_only(args.peers),
            "admin-broker": lambda: run_admin_broker_only(args.quick),
            "state-store": lambda: run_state_store_only(args.quick),
            "members": lambda: run_members_only(args.quick)}
    figures = runs[args.only]() if args.only else run(sizes, args.quick, args.peers)
    stem = f"{figures['date']}{'-quick' if args.quick else ''}{'-' + args.only if args.only else ''}"
    write_json(figures, args.out_dir / f"{stem}.json")
    outputs = {None: (plot, table), "state": (plot_bounded_state, state_only_table),
               "delta": (plot_delta, delta_only_table), "admin": (None, admin_table),
               "admin-broker": (plot_admin_broker, admin_broker_table),
               "state-store": (plot_state_store, state_store_only_table),
               "members": (plot_members, members_only_table)}
    draw, text = outputs[args.only]
    if draw is not None:
        draw(figures, args.out_dir / f"{stem}.png")
    print()
    print(text(figures))
    print(f"\nfigures written to {args.out_dir / stem}.json{' and .png' if draw is not None else ''}")
    return figures


if __name__ == "__main__":
    main()
