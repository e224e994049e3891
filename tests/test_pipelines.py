"""Spark Declarative Pipelines: ``examples/pipelines`` run for real with ``spark-pipelines run`` (docs/pipelines.md).

The example's spec is copied with its folders moved under the test's and its topic and group replaced by the
test's, and run with the command the page gives. ``spark-pipelines`` (Spark 4.1+) starts a local Spark Connect
server whose Python workers run the source; a triggered run reads a streaming table's input with
``Trigger.AvailableNow``, so the run ends by itself once the share group is drained. The streaming table must
then hold every produced record once, and the group nothing of the query's: every epoch ACKED in the ledger,
and a fresh member of the group gets nothing but its markers.

Not marked ``compat``: the compatibility slices (Spark 4.0, 4.1, 4.3) do not run it; on a pyspark before 4.1
it skips, saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq
import pyspark
import pytest

from sharegroup_testing.kafka_peers import KafkaUnderTest
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup, spark_connect_port

EXAMPLE = Path(__file__).parents[1] / "examples" / "pipelines"
#: The example's spec puts storage, warehouse and state under this folder: the test moves them under its own
EXAMPLE_HOME = "/tmp/sharegroup-pipeline"
SPARK_PIPELINES = Path(sys.executable).parent / "spark-pipelines"
SPARK = tuple(int(part) for part in pyspark.__version__.split(".")[:2])
#: What a run in the example's folder leaves there: not part of the example
RUN_LEFTOVERS = shutil.ignore_patterns("__pycache__", "metastore_db", "derby.log", "spark-warehouse")

pytestmark = [
    pytest.mark.spark, pytest.mark.timing,
    pytest.mark.skipif(SPARK < (4, 1), reason=f"Spark Declarative Pipelines need Spark 4.1 or newer; this is "
                                              f"pyspark {pyspark.__version__}"),
    pytest.mark.skipif(not SPARK_PIPELINES.exists(), reason=f"no spark-pipelines beside {sys.executable}"),
]


def _pipeline(setup: StreamSetup) -> Path:
    """The example, with the test's folders, topic and group in its spec."""
    project = setup.root / "pipeline"
    shutil.copytree(EXAMPLE, project, ignore=RUN_LEFTOVERS)
    spec = project / "spark-pipeline.yml"
    text = spec.read_text(encoding="utf-8").replace(EXAMPLE_HOME, str(setup.root))
    text = text.replace("payments.topic: payments", f"payments.topic: {setup.topic}")
    text = text.replace("payments.group: payments-workers", f"payments.group: {setup.group}")
    assert setup.topic in text and setup.group in text and str(setup.state) in text, text
    spec.write_text(text, encoding="utf-8")
    return project


def _run(setup: StreamSetup, project: Path, timeout_s: float = 300) -> str:
    """``spark-pipelines run`` as docs/pipelines.md runs it, in the project's folder; returns what it printed.

    A Hive catalog (Derby, in the project's folder) holds the table across runs; the warehouse is the test's.
    The run is a process group of its own (the CLI's JVM, its Python, the local server's JVM and their Python
    workers): a run that outlasts ``timeout_s`` is ended whole, not only its first process.
    """
    env = {**os.environ, "BOOTSTRAP": setup.kafka.bootstrap_servers,
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    command = [str(SPARK_PIPELINES), "--conf", "spark.sql.catalogImplementation=hive",
               "--conf", f"spark.sql.warehouse.dir={setup.root / 'warehouse'}", "run"]
    started = time.monotonic()
    with spark_connect_port(), open(setup.root / "spark-pipelines.log", "w+") as log:
        run = subprocess.Popen(command, cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            returncode = run.wait(timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _end_group(run, wait_s=0 if returncode is None else 30)
        log.seek(0)
        printed = log.read()
    print(f"spark-pipelines run: exit {returncode} after {time.monotonic() - started:.1f} s")
    assert returncode == 0, f"spark-pipelines run: exit {returncode}\n{printed[-8000:]}"
    return printed


def _end_group(run: subprocess.Popen, wait_s: float) -> None:
    """Let the run's process group end by itself for up to ``wait_s`` (a Python worker may still be leaving the
    group when the CLI has exited), then kill what is left of it."""
    def group_gone() -> bool:
        try:
            os.killpg(run.pid, 0)
        except ProcessLookupError:
            return True
        return False

    deadline = time.monotonic() + wait_s
    while not group_gone() and time.monotonic() < deadline:
        time.sleep(0.2)  # polling the process group
    if not group_gone():
        print(f"spark-pipelines: processes left in its group after {wait_s} s: killed")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
    run.wait()


def table_rows(table: Path) -> list[tuple[int, bytes, int]]:
    """(partition, value, deliveryCount) of every row of a streaming table's files, duplicates kept.

    The files are those its file sink's log (``_spark_metadata``) committed, as Spark reads the table: the
    newest compacted log file and the batches after it.
    """
    log = table / "_spark_metadata"
    batches = {int(path.name.split(".")[0]): path for path in log.iterdir() if path.name.split(".")[0].isdigit()}
    compacted = max((batch for batch, path in batches.items() if path.name.endswith(".compact")), default=-1)
    files: dict[str, bool] = {}
    for batch in sorted(batch for batch in batches if batch >= compacted):
        for line in batches[batch].read_text(encoding="utf-8").splitlines()[1:]:
            entry = json.loads(line)
            files[entry["path"]] = entry["action"] == "add"
    paths = [unquote(urlparse(path).path) for path, added in files.items() if added]
    if not paths:
        return []
    rows = pq.read_table(paths, columns=["partition", "value", "deliveryCount"]).to_pylist()
    return [(row["partition"], row["value"], row["deliveryCount"]) for row in rows]


@pytest.mark.timeout(480)
def test_a_streaming_table_reads_the_share_group_exactly_once(kafka: KafkaUnderTest, tmp_path: Path):
    setup = StreamSetup(kafka, kafka.new_topic(2), kafka.new_group(), tmp_path)
    produced = kafka.produce_numbered(setup.topic, 500, 2)

    printed = _run(setup, _pipeline(setup))

    # a triggered run: the flow drains what the topic held and the run ends by itself
    assert "Flow spark_catalog.default.payments has COMPLETED." in printed and "Run is COMPLETED." in printed, \
        printed[-8000:]
    # SDP keeps the flow's checkpoint under the spec's storage; the streaming table is in the warehouse
    assert (tmp_path / "storage" / "_checkpoints" / "spark_catalog" / "default" / "payments" / "payments" / "0"
            / "commits").is_dir()
    rows = table_rows(tmp_path / "warehouse" / "payments")
    assert_exactly_once(rows, produced)
    assert {count for _, _, count in rows} == {1}, "a record was delivered more than once"
    # the broker accepted all: every epoch ACKED, and the group hands a new member nothing it held
    assert setup.every_epoch_acked(), [(e.epoch, e.status, e.record_count) for e in setup.ledger_entries()]
    assert setup.leftovers_for_a_fresh_member() == []
