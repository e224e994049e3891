"""An upgrade keeps a query's state: the previous release runs a query until about half of the records are in, and
this release resumes it from the same checkpointLocation, stateLocation and groupLocation.

The previous release (PREVIOUS_RELEASE, a commit of this repository) is built into a wheel at test time and installed
in a venv of its own that borrows this venv's dependencies, as tests/test_install.py does: the first half runs that
wheel's package in processes of its own (a query with its own Spark, a DeltaShareConsumer worker), never the working
tree. The second half runs this code: the query in this session's Spark, the worker in this venv. For each
coordinator: every record once (in the query's sink, or among what the worker beside a ``coordinator=delta`` query
acknowledged), the poison records each half rejected in the dead letters, and Spark's batches, the source's epochs
and its progress rows going on where the first half stopped, none lost or started over.
"""

from __future__ import annotations

import collections
import inspect
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sharegroup_source
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from state_store.progress import PROGRESS_ADDED_COLUMNS, PROGRESS_FORMAT
from state_store.table_open import FORMAT_PROPERTY
from tests import delta_worker
from tests.delta_worker import spawn
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup
from tests.test_delta_coordinator import DeltaSetup
from tests.test_delta_share_consumer import tell, worker_config
from tests.test_install import SOURCES, fresh_venv, install_command

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("upgrade")]  # one worker builds the previous release once

ROOT = Path(__file__).resolve().parent.parent
#: The previous release: the last commit before format versions, whose state, checkpoints and groups this one reads.
PREVIOUS_RELEASE = "984572e"
RECORDS = 1600
PARTITIONS = 2
POISON_PER_HALF = 3
POISON = "poison"
REASON = "poison record"


def reject_poison(batch: DataFrame, options: dict[str, str]) -> DataFrame:
    """The job of both halves (the previous release's runs this function's source): REJECT the poison records into
    the dead letters, return the others for the sink."""
    checked = batch.withColumn("poison", F.col("value").cast("string").startswith(POISON)).cache()
    sharegroup_source.acknowledge(checked.filter("poison"), "REJECT", REASON, options=options)
    return checked.filter("not poison").drop("poison")


def previous_release_query(options_json: str, sink: str, checkpoint: str) -> None:
    """The previous release's query, run by its venv's python (this function's source is the script): the job into
    a foreachBatch sink laid out as StreamSetup.batch_sink lays it out, until a line on stdin says stop. It stops
    between two batches if one ends within 5 s (a stop during a batch cancels it, and the next release runs it
    again), says how the query ended, and keeps Spark up until another line, while the test waits for its member to
    leave the group. A batch every 3 s leaves time between batches, unless the machine is loaded."""
    import pyspark_sharegroup  # the module Spark found the format in

    options = json.loads(options_json)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())

    def write(frame: DataFrame, batch_id: int) -> None:
        reject_poison(frame, options).write.mode("overwrite").parquet(f"{sink}/batch={batch_id}")

    query = (spark.readStream.format("sharegroup").options(**options).load().writeStream.foreachBatch(write)
             .option("checkpointLocation", checkpoint).trigger(processingTime="3 seconds").start())
    print("started", sharegroup_source.__file__, pyspark_sharegroup.__file__, flush=True)
    sys.stdin.readline()
    deadline = time.monotonic() + 5
    while query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.01)
    query.stop()
    print("stopped", query.exception(), flush=True)
    sys.stdin.readline()
    spark.stop()


SCRIPT_HEAD = f"""from __future__ import annotations

import json
import sys
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sharegroup_source

POISON, REASON = {POISON!r}, {REASON!r}

"""


@dataclass(frozen=True)
class PreviousRelease:
    """The previous release's venv: ``python`` imports its wheel's package from ``site``; ``work`` holds its scripts."""

    python: Path
    site: Path
    work: Path

    @property
    def env(self) -> dict[str, str]:
        """Spark's Python workers run this venv's python too; nothing puts the working tree on the path."""
        return {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")},
                "PYSPARK_PYTHON": str(self.python), "PYSPARK_DRIVER_PYTHON": str(self.python)}

    def start_query(self, options: dict[str, str], setup: StreamSetup) -> subprocess.Popen:
        """The previous release's query, started; it said so from the wheel's package."""
        query = self._spawn("previous_query.py", json.dumps(options), str(setup.sink), str(setup.checkpoint))
        said = query.stdout.readline().split()
        if said[:1] != ["started"]:
            query.kill()
            raise AssertionError(f"the previous release's query did not start; it said {said!r}")
        assert all(path.startswith(str(self.site)) for path in said[1:]), f"not the previous release's package: {said}"
        return query

    def start_worker(self, config: dict[str, Any], topic: str, out: Path) -> subprocess.Popen:
        """tests/delta_worker.py's ``share`` mode on the previous release's DeltaShareConsumer, once it joined."""
        worker = self._spawn("delta_worker.py", json.dumps(config), topic, "share", str(out))
        assert worker.stdout.readline().strip() == "joined"
        return worker

    def _spawn(self, script: str, *args: str) -> subprocess.Popen:
        return subprocess.Popen([str(self.python), str(self.work / script), *args], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, cwd=self.work, env=self.env)


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> PreviousRelease:
    """PREVIOUS_RELEASE's wheel, built from the repository's history and installed in a fresh venv."""
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"],
                           capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"commit {PREVIOUS_RELEASE} (the previous release) is not in this clone ({found.stderr.strip()}): "
                    "a shallow clone? git fetch --unshallow")
    work = tmp_path_factory.mktemp("previous-release")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", PREVIOUS_RELEASE, *SOURCES],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(work / "source", filter="data")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w",
                    str(work / "dist"), str(work / "source")], check=True, cwd=work)
    (wheel,) = (work / "dist").glob("sharegroup_source-*.whl")
    python, site = fresh_venv(work / "venv")
    subprocess.run(install_command(wheel, site), check=True)
    (work / "previous_query.py").write_text(
        SCRIPT_HEAD + inspect.getsource(reject_poison) + "\n\n" + inspect.getsource(previous_release_query)
        + "\n\nprevious_release_query(*sys.argv[1:])\n")
    shutil.copy(delta_worker.__file__, work / "delta_worker.py")
    return PreviousRelease(python, site, work)


@contextmanager
def ended(*processes: subprocess.Popen | None) -> Iterator[None]:
    """Processes a failing test leaves behind are killed, not left to hold the group's records."""
    try:
        yield
    finally:
        for process in processes:
            if process is not None and process.poll() is None:
                process.kill()


def accepted_by_workers(*outputs: Path) -> list[tuple[int, bytes, int]]:
    """(partition, value, delivery count) of what workers acknowledged, from their files' complete lines."""
    lines = [line for path in outputs if path.exists() for line in path.read_text().split("\n")[:-1]]
    return [(int(p), bytes.fromhex(v), int(dc)) for p, v, dc in (line.split() for line in lines)]


def batch_ids(setup: StreamSetup) -> set[int]:
    """Spark's batches the sink holds, complete ones."""
    return {int(d.name.split("=")[1]) for d in setup.sink.glob("batch=*") if (d / "_SUCCESS").exists()}


def dead_letters(setup: StreamSetup) -> list[dict[str, Any]]:
    return setup.state_store().dead_letters.read().to_pylist()


def runs(setup: StreamSetup) -> dict[str, dict[str, Any]]:
    """Each run's latest progress row (its counters are cumulative for the run)."""
    rows = sorted(setup.state_store().progress.table.snapshot().rows(), key=lambda r: r["commit_version"])
    return {r["run_id"]: r for r in rows if r["query_id"] == setup.group}


def logged_offsets(setup: StreamSetup) -> dict[int, dict[str, Any]]:
    """The source's offset Spark logged for each batch: the line after the version and the metadata of offsets/N."""
    return {int(f.name): json.loads(f.read_text().splitlines()[2])
            for f in (setup.checkpoint / "offsets").iterdir() if f.name.isdigit()}


def format_versions(*roots: Path) -> dict[str, str | None]:
    """Each Delta table's format version property under ``roots``, None where it has none."""
    return {str(table): DeltaTable(str(table)).metadata().configuration.get(FORMAT_PROPERTY)
            for root in roots for table in root.iterdir() if (table / "_delta_log").is_dir()}


def produce_poison(kafka: KafkaUnderTest, topic: str, half: str) -> set[bytes]:
    values = [f"{POISON}-{half}-{i}".encode() for i in range(POISON_PER_HALF)]
    kafka.produce(topic, [(0, None, value) for value in values])
    return set(values)


@dataclass
class Upgrade:
    """One query's upgrade: its setup, the options both halves add to the setup's, and the files its workers write."""

    spark: SparkSession
    setup: StreamSetup
    extra: dict[str, str]
    worker_config: dict[str, Any] | None  # coordinator=delta: a DeltaShareConsumer beside the query
    outputs: tuple[Path, Path]  # what each half's worker acknowledged

    @property
    def options(self) -> dict[str, str]:
        return self.setup.options(**self.extra)

    def acknowledged(self) -> list[tuple[int, bytes, int]]:
        """The records taken for good: the query's sink, and what the workers acknowledged."""
        return self.setup.sink_rows(self.spark) + accepted_by_workers(*self.outputs)

    def taken(self) -> int:
        """How many records were taken for good, as the ledger's acknowledged epochs and the workers' files say: what
        ``acknowledged`` counts, without a Spark job per look (the first one of a session took seconds)."""
        ledgered = sum(r.record_count for e in self.setup.ledger_entries() if e.status == "ACKED" for r in e.ranges
                       if r.topic == self.setup.topic)
        return ledgered + len(accepted_by_workers(*self.outputs))

    def describe(self) -> str:
        return f"{len(accepted_by_workers(*self.outputs))} acknowledged by workers; {self.setup.describe(self.spark)}"

    def runs_in_the_ledger(self) -> set[str]:
        return {e.member_id for e in self.setup.ledger_entries()}

    def first_epoch_of_a_new_run(self, known: set[str]) -> None:
        """Wait until a run not ``known`` ledgered an epoch: a worker that went before would take all the records."""
        wait_for(lambda: any(e.member_id not in known for e in self.setup.ledger_entries()), 120,
                 "the query's first epoch", interval_s=0.2, state=self.describe)

    def members_left(self) -> None:
        """The query's member (and the worker's) left the group: the next half's take over."""
        self.setup.wait_until_member_left(60)
        if isinstance(self.setup, DeltaSetup):
            wait_for(self.setup.members_left, 60, "every member to leave the Delta group")


def previous_half(upgrade: Upgrade, release: PreviousRelease, kafka: KafkaUnderTest) -> set[tuple[int, bytes]]:
    """The previous release's query (and worker): once the query rejected the first poison records, RECORDS records
    are produced, and both run until about half of them are in. Returns the records produced.

    The poison goes first: a broker-mode acquisition may take every record at once and admit the poison last."""
    worker = None if upgrade.worker_config is None else release.start_worker(
        upgrade.worker_config, upgrade.setup.topic, upgrade.outputs[0])
    with ended(worker):
        query = release.start_query(upgrade.options, upgrade.setup)
        with ended(query):
            if worker is not None:
                upgrade.first_epoch_of_a_new_run(set())
                tell(worker, "go")
            wait_for(lambda: len(dead_letters(upgrade.setup)) == POISON_PER_HALF, 120, "the first poison rejected",
                     interval_s=0.2, state=upgrade.describe)
            produced = kafka.produce_numbered(upgrade.setup.topic, RECORDS, PARTITIONS)
            wait_for(lambda: upgrade.taken() >= RECORDS // 2, 240, "half of the records", interval_s=0.1,
                     state=upgrade.describe)
            for process in (worker, query):
                if process is not None:
                    tell(process, "stop")
            assert query.stdout.readline().split() == ["stopped", "None"]
            assert worker is None or worker.wait(60) == 0
            upgrade.members_left()
            tell(query, "exit")
            assert query.wait(120) == 0
    return produced


def current_half(upgrade: Upgrade, poison: int) -> None:
    """This release's query (and worker) from where the previous one stopped, until every record and poison is in."""
    setup = upgrade.setup
    worker = None if upgrade.worker_config is None else spawn(upgrade.worker_config, setup.topic, "share",
                                                              str(upgrade.outputs[1]))
    with ended(worker):
        if worker is not None:
            assert worker.stdout.readline().strip() == "joined"
        known = upgrade.runs_in_the_ledger()
        query = setup.batch_sink(upgrade.spark, lambda frame, _batch: reject_poison(frame, upgrade.options),
                                 available_now=False, **upgrade.extra)
        try:
            if worker is not None:
                upgrade.first_epoch_of_a_new_run(known)
                tell(worker, "go")
            wait_for(lambda: upgrade.taken() >= RECORDS and len(dead_letters(setup)) == poison
                     and setup.every_epoch_acked(), 240, "every record in and every poison rejected", interval_s=0.2,
                     state=upgrade.describe)
            if worker is not None:
                tell(worker, "stop")
                assert worker.wait(60) == 0
        finally:
            query.stop()
    assert query.exception() is None
    upgrade.members_left()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("coordinator", ["broker", "delta"])
def test_a_query_of_the_previous_release_goes_on_under_this_one(spark, kafka, tmp_path, previous_release,
                                                                 coordinator):
    kind = DeltaSetup if coordinator == "delta" else StreamSetup
    setup = kind(kafka, kafka.new_topic(PARTITIONS), kafka.new_group(), tmp_path)
    poison_topic = kafka.new_topic(1, prefix="poison")  # the query's alone: a worker would accept what it took
    # beside a worker, a smaller batch: an epoch and the one acquired ahead must leave records for this half's worker
    batch = "100" if kind is DeltaSetup else "200"
    extra = {"subscribe": f"{setup.topic},{poison_topic}", "maxRecordsPerTrigger": batch,
             "checkpointLocation": str(setup.checkpoint)}
    config = worker_config(kafka, setup.group, setup.group_location, **{"max.poll.records": 5}) \
        if isinstance(setup, DeltaSetup) else None
    upgrade = Upgrade(spark, setup, extra, config, (tmp_path / "worker-previous.txt", tmp_path / "worker-current.txt"))
    poison = produce_poison(kafka, poison_topic, "previous")

    produced = previous_half(upgrade, previous_release, kafka)
    taken = len(upgrade.acknowledged())
    assert RECORDS // 2 <= taken < RECORDS, f"the previous release took {taken} of {RECORDS} records"
    batches, letters, progress = batch_ids(setup), dead_letters(setup), runs(setup)
    last_epoch = max(e.epoch for e in setup.ledger_entries())
    offsets = logged_offsets(setup)
    roots = (setup.state, setup.group_location) if config else (setup.state,)
    assert not any("v" in offset for offset in offsets.values()), "the previous release wrote no offset version"
    assert set(format_versions(*roots).values()) == {None}, "the previous release wrote no table version"
    poison |= produce_poison(kafka, poison_topic, "current")

    current_half(upgrade, len(poison))
    assert_exactly_once(upgrade.acknowledged(), produced)
    assert not config or all(accepted_by_workers(out) for out in upgrade.outputs), "a half's worker took nothing"

    # the dead letters: the previous half's rows as they were, this half's beside them, each poison record once
    now = dead_letters(setup)
    assert collections.Counter((r["value"], r["reason"], r["group_id"]) for r in now) == \
        collections.Counter((value, REASON, setup.group) for value in poison)
    assert all(row in now for row in letters)
    # Spark's batches and the source's epochs go on from where the previous half stopped
    assert batch_ids(setup) == set(range(max(batch_ids(setup)) + 1)) and max(batch_ids(setup)) > max(batches)
    assert batches <= batch_ids(setup)
    entries = setup.ledger_entries()
    assert [e.epoch for e in entries] == list(range(1, len(entries) + 1)) and len(entries) > last_epoch
    assert {e.status for e in entries} == {"ACKED"}
    # the previous release's offsets and tables as it left them: no version is version 1, and read as such; the
    # progress table gained the counters of its format version 2, and says so
    now_logged = logged_offsets(setup)
    assert {batch: now_logged[batch] for batch in offsets} == offsets and now_logged[max(now_logged)]["v"] == 1
    versions = format_versions(*roots)
    assert versions.pop(str(setup.state / "progress")) == str(PROGRESS_FORMAT.current)
    assert set(versions.values()) == {None}
    # the progress table: the previous half's runs as they ended (the added counters null), this half's after them
    after = runs(setup)
    assert {run: {k: after[run][k] for k in row} for run, row in progress.items()} == progress, \
        "the previous release's progress rows changed"
    assert {after[run][k] for run in progress for k in PROGRESS_ADDED_COLUMNS} == {None}
    current = {run: row for run, row in after.items() if run not in progress}
    assert current and all(row["left_at_ms"] is not None for row in after.values())
    for half in (progress, current):
        assert sum(row["rejected"] for row in half.values()) == POISON_PER_HALF, half
        assert sum(row["dead_lettered"] for row in half.values()) == POISON_PER_HALF, half
        assert sum(row["accepted"] for row in half.values()) > 0, half
    assert setup.progress()["runs"] == len(after)
