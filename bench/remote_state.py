"""Figure (k): the query's state on local disk against an S3 endpoint, for both coordinators.

``format("sharegroup")`` into Spark's noop sink on Apache Kafka at 16 partitions, ``coordinator=broker``
(the default) and ``coordinator=delta`` (with ``groupLocation``), each with its Delta state
(``stateLocation``, and for delta ``groupLocation``) on local disk and on S3: moto's S3 server on
loopback in a child process (``sharegroup_testing.s3_server.S3Server``: S3's protocol, SigV4,
conditional PUTs made atomic; no network latency, no throttling), reached with the ``stateStorage.<key>``
options of its ``storage_options()``. Every run reads the same topic through a fresh share group (or Delta
group), checkpoint and state location (on S3 a bucket of its own), in batches of ``maxRecordsPerTrigger``
records, so a run has ten batches or more; the four runs go in interleaved rounds (``bench.rounds``), the
median run of each kept.

Per (coordinator, store): the Spark batch p50 (``durationMs.triggerExecution`` of the steady batches,
the second to the last but one, as ``bench.spark_noop`` measures every query), records/s over them, and
Delta commits per batch. The commits are counted per state table from its Delta log (its newest version
+ 1: the locations are fresh, and a log clean-up cannot lower it), both stores alike; per batch over the
whole run (table creation, the fence, the member joining and leaving included) and over the steady window
(commits whose commitInfo timestamp falls between the first steady batch's start and the last one's end,
over the steady batches: what a long-running query pays per batch). Local runs also count their
``_delta_log/<version>.json`` files; S3 runs the commit PUTs the server stored (``S3Server.counts``),
which also hold the location check's scratch table (``state_store.commit_probe``, once per process and
bucket, deleted after), and those it refused (412: a commit a writer lost and retried).

The steady window is a few seconds long: commits made every few seconds rather than per batch (the
progress row every 5 s; with delta, the member's lock renewal and heartbeat every lock duration / 3, 10 s
by default) are in it only as often as that window catches them; the whole run's figure holds them all.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from bench.cluster import produce_dataset
from bench.rounds import measure_rounds
from bench.spark_noop import _at, _into_noop, _steady, sharegroup_frame
from sharegroup_testing.kafka_peers import KafkaUnderTest
from sharegroup_testing.s3_server import S3Server, S3ServerError
from sharegroup_testing.workers import source_workers

__all__ = ["COORDINATORS", "STORES", "StoreSizes", "measure_state_stores"]

#: The coordinators and where their state goes, in the order every output lists them.
COORDINATORS = {"broker": "coordinator=broker (default)", "delta": "coordinator=delta"}
STORES = {"local": "local disk", "s3": "S3 (moto, loopback)"}
#: How long a run waits for its source's driver-side worker to exit after the query stopped.
WORKER_EXIT_S = 60.0
#: A Delta commit file, its version in the name.
_COMMIT_FILE = re.compile(r"(?:^|/)_delta_log/\d{20}\.json$")


@dataclass(frozen=True)
class StoreSizes:
    """How big (k) is: ``records_per_partition`` x ``partitions`` records of 64 B, read in batches of
    ``trigger`` records (maxRecordsPerTrigger), so a run has records / trigger batches."""

    partitions: int
    records_per_partition: int
    trigger: int
    rounds: int
    timeout_s: float = 180.0

    @property
    def records(self) -> int:
        return self.partitions * self.records_per_partition

    @classmethod
    def full(cls) -> StoreSizes:
        return cls(partitions=16, records_per_partition=5_000, trigger=5_000, rounds=3)

    @classmethod
    def quick(cls) -> StoreSizes:
        return cls(partitions=16, records_per_partition=3_000, trigger=4_000, rounds=1, timeout_s=90.0)


def measure_state_stores(kafka: KafkaUnderTest, spark: SparkSession, sizes: StoreSizes, scratch: Path,
                         say: Callable[[str], None]) -> dict[str, Any]:
    """(k) on ``kafka``: both coordinators with their state on local disk and on S3, in interleaved rounds.

    Returns ``{"local": {coordinator: figures}, "s3": {coordinator: figures}, "store_run": {...}}``, or only
    ``"store_run": {"skipped": why}`` when the S3 server cannot start (moto[server] missing: the rest of
    ``make bench`` goes on)."""
    try:
        server = S3Server().start()
    except S3ServerError as error:
        say(f"(k) skipped: {error}")
        return {"store_run": {"skipped": f"the S3 server did not start ({error}); pip install 'moto[server]'"}}
    runs = count()
    every: dict[str, list[dict[str, Any]]] = {}
    with server as s3:
        topic = produce_dataset(kafka, sizes.partitions, sizes.records, 64)
        say(f"(k) produced {sizes.records:,} records of 64 B into {sizes.partitions} partitions")

        def job(coordinator: str, store: str) -> Callable[[], dict[str, Any]]:
            def run() -> dict[str, Any]:
                figures = _run(spark, kafka, topic, sizes, scratch / f"store-{next(runs)}", coordinator,
                               s3 if store == "s3" else None)
                every.setdefault(f"{coordinator}@{store}", []).append(figures)
                return figures
            return run

        jobs = {f"{c}@{s}": job(c, s) for c in COORDINATORS for s in STORES}
        # a fresh JVM's first query is slower (class loading, Python workers): not in round 1's figures
        _run(spark, kafka, topic, StoreSizes(sizes.partitions, sizes.trigger * 3 // sizes.partitions, sizes.trigger,
                                             1, sizes.timeout_s), scratch / "store-warm-up", "broker", None)
        say("(k) warmed up (one broker query on local disk, not counted)")
        labels = {f"{c}@{s}": f"(k) {COORDINATORS[c]}, state on {STORES[s]}" for c in COORDINATORS for s in STORES}
        measured = measure_rounds(jobs, sizes.rounds, say, labels)
    figures: dict[str, Any] = {store: {} for store in STORES}
    for key, run in measured.items():
        coordinator, store = key.split("@")
        figures[store][coordinator] = _summary(run, every.get(key, []))
        if "error" not in run:
            say(f"{labels[key]}: batch p50 {run['batch_p50_ms']:,.0f} ms, {_rate(run):,} records/s, "
                f"{run['commits']['per_batch_steady']} Delta commits per steady batch "
                f"({run['commits']['per_batch']} over the run)")
    figures["store_run"] = {
        "kind": kafka.describe(), "partitions": sizes.partitions, "records": sizes.records, "value_bytes": 64,
        "trigger": sizes.trigger, "rounds": sizes.rounds,
        "s3": "moto's S3 server on loopback (sharegroup_testing.s3_server), a bucket per run",
        "options": {coordinator: _options(coordinator, sizes, "<stateLocation>", "<groupLocation>", {})
                    for coordinator in COORDINATORS},
        "s3_options": "stateStorage.<key> for each key of S3Server.storage_options()",
        "errors": {key: run["error"] for key, run in measured.items() if "error" in run}}
    return figures


def _options(coordinator: str, sizes: StoreSizes, state: str, group: str, storage: Mapping[str, str]
             ) -> dict[str, str]:
    """The source options of a run: its batch size, its locations and, on S3, ``stateStorage.<key>``."""
    options = {"maxRecordsPerTrigger": str(sizes.trigger), "stateLocation": state,
               **{f"stateStorage.{key}": value for key, value in storage.items()}}
    if coordinator == "delta":  # the group's window is the trigger per partition, so it never bounds a batch
        options |= {"coordinator": "delta", "groupLocation": group, "share.auto.offset.reset": "earliest",
                    "share.partition.max.record.locks": str(sizes.trigger)}
    return options


def _shown(options: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in options.items() if not key.lower().startswith("statestorage.")}


def _run(spark: SparkSession, kafka: KafkaUnderTest, topic: str, sizes: StoreSizes, work: Path, coordinator: str,
         s3: S3Server | None) -> dict[str, Any]:
    """One query into noop until it read ``sizes.records`` rows, its state on local disk (``s3`` None) or in a
    fresh bucket of ``s3``; its steady figures and its Delta commits."""
    if s3 is None:
        bucket, storage = None, {}
        state, group = str(work / "state"), str(work / "group")
    else:
        bucket, storage = s3.create_bucket(), s3.storage_options()
        state, group = s3.uri(bucket, "state"), s3.uri(bucket, "group")
    options = _options(coordinator, sizes, state, group, storage)
    frame = sharegroup_frame(spark, kafka, topic, work, **options)
    batches = _into_noop(frame, sizes.records, work, sizes.timeout_s, processingTime="0 seconds")
    # Spark's stop does not wait for the source's driver-side worker, whose stop still commits (the settle of the
    # last batch, the member leaving, the last progress row): counted once it exited
    _, alive = psutil.wait_procs(list(source_workers()), timeout=WORKER_EXIT_S)
    figures = _steady(batches, sizes.records)
    steady = _steady_batches(batches)
    window = (_at(steady[0]) * 1000, (_at(steady[-1]) + steady[-1]["durationMs"]["triggerExecution"] / 1000) * 1000) \
        if steady else (0.0, 0.0)
    locations = [state] + ([group] if coordinator == "delta" else [])
    tables = {f"{'state' if location == state else 'group'}/{name}": commits
              for location in locations for name, commits in _table_commits(location, storage, window).items()}
    total = sum(t["commits"] for t in tables.values())
    in_window = sum(t["in_steady_window"] for t in tables.values())
    commits: dict[str, Any] = {
        "total": total, "per_batch": round(total / max(len(batches), 1), 2),
        "steady_batches": len(steady), "in_steady_window": in_window,
        "per_batch_steady": round(in_window / max(len(steady), 1), 2), "by_table": tables}
    if s3 is None:
        commits["log_files"] = sum(1 for location in locations for path in Path(location).rglob("*.json")
                                   if _COMMIT_FILE.search(path.as_posix()))
    else:
        server = s3.counts(bucket)
        commits |= {"server_commit_puts": server.commits, "server_conflicts": server.conflicts,
                    "outside_the_state_tables": server.commits - total}
    if alive:
        commits["worker_still_running"] = True  # its last commits may be missing from the counts
    return {**figures, "coordinator": coordinator, "store": "local" if s3 is None else "s3",
            "batch_p50_ms": figures["batch_phases_p50_ms"].get("triggerExecution"), "commits": commits,
            "options": _shown(options) | ({"stateStorage.*": "S3Server.storage_options()"} if storage else {})}


def _steady_batches(batches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The batches ``bench.spark_noop._steady`` measures: the second to the last but one."""
    return batches[1:-1] if len(batches) > 3 else batches[1:] if len(batches) > 2 else batches


def _table_commits(location: str, storage: Mapping[str, str], window: tuple[float, float]
                   ) -> dict[str, dict[str, Any]]:
    """Per Delta table under ``location``: its commits (newest version + 1), how many of them fall in ``window``
    (epoch ms), and by operation."""
    tables: dict[str, dict[str, Any]] = {}
    for name in _tables(location, storage):
        table = DeltaTable(f"{location.rstrip('/')}/{name}", storage_options=dict(storage))
        history = table.history()
        operations = Counter(commit.get("operation", "?") for commit in history)
        stamps = [commit.get("timestamp", 0) for commit in history]
        tables[name] = {"commits": table.version() + 1,
                        "in_steady_window": sum(window[0] <= stamp <= window[1] for stamp in stamps),
                        "by_operation": dict(operations)}
    return tables


def _tables(location: str, storage: Mapping[str, str]) -> list[str]:
    """The names of the Delta tables directly under ``location``: local, or an ``s3://`` URI."""
    parsed = urlparse(location)
    if parsed.scheme != "s3":
        return sorted(log.parent.name for log in Path(location).glob("*/_delta_log"))
    import boto3  # type: ignore[import-untyped]  # moto[server] brings it; only S3 runs need it

    client = boto3.client("s3", endpoint_url=storage["aws_endpoint_url"], region_name=storage["aws_region"],
                          aws_access_key_id=storage["aws_access_key_id"],
                          aws_secret_access_key=storage["aws_secret_access_key"])
    prefix = parsed.path.strip("/") + "/"
    names: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=parsed.netloc, Prefix=prefix):
        for item in page.get("Contents", []):
            name, _, rest = item["Key"][len(prefix):].partition("/")
            if rest.startswith("_delta_log/"):
                names.add(name)
    return sorted(names)


def _rate(run: dict[str, Any]) -> int:
    return run["throughput"]["records_per_s"]


def _summary(median: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run (by records/s), with every run's batch p50 and commits per batch beside its records/s."""
    if "error" in median and "throughput" not in median:
        return median
    return {**median,
            "runs_batch_p50_ms": [run["batch_p50_ms"] for run in runs],
            "runs_commits_per_batch_steady": [run["commits"]["per_batch_steady"] for run in runs],
            "runs_commits_per_batch": [run["commits"]["per_batch"] for run in runs]}
