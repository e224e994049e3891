"""``make bench``: every figure of the source in one run, on the same records.

    python -m bench [--quick] [--out-dir bench/results]

(a) a plain ShareConsumer loop; (b) format("sharegroup") into format("noop") and its ratio to
(a); (c) the driver methods' cost per micro-batch and where it goes; (d) scaling over partitions
and maxRecordsPerPartition; (e) the state store's cost per epoch; (f) driver memory per 10,000
records in flight. Writes ``<out-dir>/<date>.json`` and ``<date>.png`` (``<date>-quick.*`` with
--quick) and prints a short table. Uses the embedded broker unless SHAREGROUP_TEST_BOOTSTRAP
names a real Kafka 4.2+ cluster, like the tests.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

import confluent_kafka
import deltalake
import psutil
import pyarrow as pa
import pyspark

from bench.baseline import plain_share_consumer
from bench.cluster import BOOTSTRAP_ENV, bench_kafka, produce_dataset
from bench.driver_loop import DriverJob, measure_driver
from bench.measure import median_run
from bench.plot import plot
from bench.report import TARGET_RATIO, limit_note, table, write_json
from bench.sizes import Sizes
from bench.spark_noop import source_into_noop
from bench.state_store_bench import ledger_latency
from tests.kafka_under_test import KafkaUnderTest
from tests.spark_session import local_spark

#: group.share.partition.max.record.locks' default, which the embedded broker applies too.
DEFAULT_RECORD_LOCK_LIMIT = 2_000


def _machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30),
            "python": platform.python_version(), "pyspark": pyspark.__version__,
            "confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0],
            "deltalake": deltalake.__version__, "pyarrow": pa.__version__}


def _say(message: str, started: float) -> None:
    print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)


def run(sizes: Sizes, quick: bool) -> dict[str, Any]:
    started = time.monotonic()
    with bench_kafka() as kafka, tempfile.TemporaryDirectory(prefix="sharegroup-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        topics = {p: produce_dataset(kafka, p, sizes.records, sizes.value_bytes) for p in sizes.partition_counts}
        _say(f"produced {sizes.records:,} records into topics with {', '.join(map(str, topics))} partitions", started)
        baseline = {}
        for partitions, topic in topics.items():
            runs = [plain_share_consumer(kafka, topic, sizes.records, sizes.run_timeout_s)
                    for _ in range(sizes.baseline_repeats)]
            baseline[str(partitions)] = median_run(runs)
            _say(f"(a) plain ShareConsumer, {partitions} partition(s): "
                 f"{baseline[str(partitions)]['runs_records_per_s']} records/s", started)
        main_topic = topics[sizes.main_partitions]
        driver = measure_driver(DriverJob(kafka.bootstrap_servers, main_topic, sizes.records, str(scratch / "driver"),
                                          tuple(kafka.new_group() for _ in range(sizes.source_repeats)),
                                          kafka.new_group(), kafka.new_group(), sizes.memory_batches,
                                          sizes.run_timeout_s))
        _say(f"(c, f) driver methods: {driver['timing']['records_per_s']:,} records/s, per batch p50 "
             f"{driver['timing']['source_calls']['p50_ms']} ms", started)
        source, per_limit = _spark_runs(kafka, topics, sizes, scratch, started)
        state = ledger_latency(scratch / "ledger", sizes.ledger_epochs)
        _say(f"(e) ledger write+read p50 {state['write_plus_read']['p50_ms']} ms", started)
    main = str(sizes.main_partitions)
    ratio = source[main]["throughput"]["records_per_s"] / max(baseline[main]["throughput"]["records_per_s"], 1)
    commits = next(b for b in driver["profile"]["buckets"] if b["bucket"].startswith("Delta commits"))
    batch_s = source[main]["batch_phases_p50_ms"].get("triggerExecution", 0) / 1000
    return {
        "date": str(date.today()), "quick": quick, "machine": _machine(),
        "elapsed_s": round(time.monotonic() - started),
        "kafka": {"kind": "embedded" if kafka.is_embedded else "real", "bootstrap_env": BOOTSTRAP_ENV,
                  "record_lock_limit": DEFAULT_RECORD_LOCK_LIMIT},
        "dataset": {"records": sizes.records, "value_bytes": sizes.value_bytes, "key": "record number, decimal"},
        "main_partitions": sizes.main_partitions,
        "baseline": baseline, "source": source, "max_records_per_partition": per_limit,
        "ratio": round(ratio, 3), "target": TARGET_RATIO, "target_met": ratio >= TARGET_RATIO,
        "driver": driver, "state_store": state, "delta_commits_per_epoch": commits["calls_per_epoch"],
        "limit_note": limit_note(DEFAULT_RECORD_LOCK_LIMIT, batch_s),
    }


def _spark_runs(kafka: KafkaUnderTest, topics: dict[int, str], sizes: Sizes, scratch: Path,
                started: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """(b) and (d): one Spark session, one query per configuration, each on a fresh share group."""
    spark = local_spark()
    default_limit = max(sizes.max_records_per_partition)
    runs = 0

    def one(partitions: int, limit: int) -> dict[str, Any]:
        nonlocal runs
        runs += 1
        result = source_into_noop(spark, kafka, topics[partitions], sizes.records, scratch / f"spark-{runs}",
                                  sizes.run_timeout_s, maxRecordsPerPartition=limit)
        _say(f"(b) sharegroup -> noop, {partitions} partition(s), maxRecordsPerPartition={limit}: "
             f"{result['throughput']['records_per_s']:,} records/s", started)
        return result

    try:
        source = {}
        for partitions in topics:
            repeats = sizes.source_repeats if partitions == sizes.main_partitions else sizes.scaling_repeats
            source[str(partitions)] = median_run([one(partitions, default_limit) for _ in range(repeats)])
        per_limit = {str(default_limit): source[str(sizes.main_partitions)]}
        for limit in sizes.max_records_per_partition:
            if limit != default_limit:
                per_limit[str(limit)] = one(sizes.main_partitions, limit)
    finally:
        spark.stop()
    return source, dict(sorted(per_limit.items(), key=lambda item: int(item[0])))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and configurations (about a minute)")
    parser.add_argument("--out-dir", type=Path, default=Path("bench/results"), help="where the JSON and PNG go")
    args = parser.parse_args(argv)
    figures = run(Sizes.quick() if args.quick else Sizes.full(), args.quick)
    stem = f"{figures['date']}{'-quick' if args.quick else ''}"
    write_json(figures, args.out_dir / f"{stem}.json")
    plot(figures, args.out_dir / f"{stem}.png")
    print()
    print(table(figures))
    print(f"\nfigures written to {args.out_dir / stem}.json and .png")
    return figures


if __name__ == "__main__":
    main()
