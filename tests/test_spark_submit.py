"""The deployment page's spark-submit recipe, run: a packed venv shipped with --archives, conf/spark-defaults.conf,
the example options file's {{VAR}} variables, and notebooks/spark_submit_job.py into a Delta table.

``local-cluster`` (a standalone master and worker in one machine) because plain ``local`` mode does
not unpack ``--archives`` into the executors' working directory, which the recipe relies on
(``PYSPARK_PYTHON=./environment/bin/python``). The archive holds the package installed from its
wheel; to keep the test offline and small it takes the dependencies (pyspark, pyarrow,
confluent-kafka, deltalake) from this test venv through a ``.pth`` line instead of copying them,
so it proves how executors get the package, not a relocatable dependency set (venv-pack does that).
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from deltalake import DeltaTable

from sharegroup_testing.kafka_peers import KafkaUnderTest
from tests.test_install import fresh_venv, install_command, wheel  # noqa: F401 - wheel is a fixture

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "notebooks" / "spark_submit_job.py"
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


def test_unset_variables_are_named_in_one_error() -> None:
    load_options = runpy.run_path(str(JOB))["load_options"]
    example = ROOT / "conf" / "sharegroup-options.example.json"
    with pytest.raises(SystemExit) as refused:
        load_options(str(example), environ={})
    message = str(refused.value)
    assert "KAFKA_USERNAME" in message and "KAFKA_PASSWORD" in message and str(example) in message
    options = load_options(str(example), environ={"KAFKA_USERNAME": "u", "KAFKA_PASSWORD": "p"})
    assert options["kafka.sasl.username"] == "u" and options["kafka.sasl.password"] == "p"


def test_spark_defaults_leave_the_master_to_the_submitter() -> None:
    settings = [line.split()[0] for line in (ROOT / "conf" / "spark-defaults.conf").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert "spark.master" not in settings


@pytest.mark.embedded
@pytest.mark.timeout(600)
def test_spark_submit_with_a_packed_venv(kafka: KafkaUnderTest, wheel: Path, tmp_path: Path) -> None:  # noqa: F811
    kafka.require_embedded("one recipe run is enough; the job is the same on any broker")
    topic, group = kafka.new_topic(partitions=2), kafka.new_group()
    produced = kafka.produce_numbered(topic, 300, partitions=2)

    python, site = fresh_venv(tmp_path / "venv")
    subprocess.run(install_command(wheel, site), check=True)
    archive = tmp_path / "environment.tar.gz"
    with tarfile.open(archive, "w:gz") as packed:
        packed.add(tmp_path / "venv", arcname=".")

    options = tmp_path / "options.json"
    options.write_text(json.dumps({
        "kafka.bootstrap.servers": "{{KAFKA_BOOTSTRAP}}", "kafka.group.id": group, "subscribe": topic,
        "stateLocation": str(tmp_path / "state"), "maxRecordsPerTrigger": "100"}))
    table = tmp_path / "orders"
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")},
           "KAFKA_BOOTSTRAP": kafka.bootstrap_servers,
           "PYSPARK_DRIVER_PYTHON": str(python), "PYSPARK_PYTHON": "./environment/bin/python"}
    # local-cluster's worker works under SPARK_HOME/work whatever SPARK_WORKER_DIR says: look there, then clean up
    work = Path(sys.executable).parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
        "site-packages" / "pyspark" / "work"
    before = set(work.glob("app-*"))
    done = subprocess.run([str(SPARK_SUBMIT), "--properties-file", "conf/spark-defaults.conf",
                           "--master", "local-cluster[1,1,1024]", "--archives", f"{archive}#environment",
                           str(JOB), str(options), str(table), str(tmp_path / "checkpoint")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    apps = set(work.glob("app-*")) - before
    unpacked = [p for app in apps for p in app.glob("*/environment/lib/python*/site-packages/sharegroup_source")]
    for app in apps:
        shutil.rmtree(app, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"done: {len(produced)} records into {table}" in done.stdout, done.stdout + done.stderr[-4000:]
    rows = DeltaTable(str(table)).to_pyarrow_table(columns=["partition", "value"]).to_pylist()
    assert {(r["partition"], r["value"]) for r in rows} == produced and len(rows) == len(produced)
    assert unpacked, "the executor did not unpack the packed venv"  # its package came from the archive
