"""Ctrl-C on a driver script, as a terminal sends it: a SIGINT to the script's process group in the middle of a batch.

The script runs in its own process (its own Spark: the signal handling is the driver process's), on the suite's
Kafka; the batch in progress is held until the Ctrl-C was taken, so the signal lands inside it every time. What the
console shows from the Ctrl-C on is counted, and the same query started again in the test's session reads the
rest: every record in the sink once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from sharegroup_source.sinks import DeltaBatchWriter
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from tests.streams import StreamSetup

RECORDS, PARTITIONS, PER_BATCH = 3_000, 2, 500
#: the most lines a Ctrl-C may add to the console (issue 57)
MOST_LINES = 5
#: a child's Spark start and first batch on the loaded 2 cores: 10-20 s usually
START_TIMEOUT_S = 180

#: The documented shape (docs/first-job.md): the package imported before the session, availableNow into a Delta
#: table through DeltaBatchWriter, a summary after awaitTermination, spark.stop().
DOCUMENTED = """
import json, sys
from pathlib import Path
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from sharegroup_source.sinks import DeltaBatchWriter

options, home = json.loads(sys.argv[1]), Path(sys.argv[2])
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
query = (spark.readStream.format("sharegroup").options(**options).load().writeStream
         .foreachBatch(held(DeltaBatchWriter(str(home / "sink"), app_id="ctrl-c")))
         .option("checkpointLocation", options["checkpointLocation"]).trigger(availableNow=True).start())
query.awaitTermination()
print(f"{DeltaTable(str(home / 'sink')).to_pyarrow_table(columns=['value']).num_rows} rows")
spark.stop()
"""

#: A bare script: the package imported first (before pyspark), a processing-time trigger, awaitTermination last.
BARE = """
import json, sys
from pathlib import Path

import sharegroup_source
from pyspark.sql import SparkSession
from sharegroup_source.sinks import DeltaBatchWriter

options, home = json.loads(sys.argv[1]), Path(sys.argv[2])
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
# what Spark's DAGScheduler says at every clean stop, and another of its warnings
scheduler = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger(
    "org.apache.spark.scheduler.DAGScheduler")
scheduler.warn("Failed to cancel job group 0d5a. Cannot find active jobs for it.")
scheduler.warn("Another warning of the DAGScheduler")
query = (spark.readStream.format("sharegroup").options(**options).load().writeStream
         .foreachBatch(held(DeltaBatchWriter(str(home / "sink"), app_id="ctrl-c")))
         .option("checkpointLocation", options["checkpointLocation"]).trigger(processingTime="2 seconds").start())
query.awaitTermination()
"""

#: The first batch says it started and waits for the test's go: the Ctrl-C lands inside it.
HELD = """
import time
from pathlib import Path

def held(write):
    def batch(frame, batch_id):
        home = Path(sys.argv[2])
        (home / f"batch-{batch_id}-started").touch()
        while batch_id == 0 and not (home / "go").exists():
            time.sleep(0.05)
        write(frame, batch_id)
    return batch
"""


def _script(body: str) -> str:
    lines = textwrap.dedent(body).strip().splitlines()
    first_code = next(i for i, line in enumerate(lines) if line.startswith("options,"))
    return "\n".join(lines[:first_code] + HELD.strip().splitlines() + lines[first_code:]) + "\n"


def _sink_values(setup: StreamSetup) -> Counter[bytes]:
    values = DeltaTable(str(setup.sink)).to_pyarrow_table(columns=["value"]).column("value").to_pylist()
    return Counter(bytes(value) for value in values)


@pytest.mark.spark
@pytest.mark.parametrize("shape", ["documented", "bare"])
def test_ctrl_c_inside_a_batch_prints_a_few_lines_and_the_next_start_is_exactly_once(spark, kafka: KafkaUnderTest,
                                                                                   tmp_path: Path, shape: str):
    kafka.require_apache("startingOffsets=earliest needs a share group's configs")
    setup = StreamSetup(kafka, kafka.new_topic(PARTITIONS), f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    produced = {value for _, value in kafka.produce_numbered(setup.topic, RECORDS, PARTITIONS)}
    options = setup.options(startingOffsets="earliest", maxRecordsPerTrigger=PER_BATCH,
                            checkpointLocation=str(setup.checkpoint))
    console = tmp_path / "console.txt"
    script = tmp_path / "job.py"
    script.write_text(_script(DOCUMENTED if shape == "documented" else BARE))
    with console.open("wb") as out:
        child = subprocess.Popen([sys.executable, str(script), json.dumps(options), str(tmp_path)], stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: (tmp_path / "batch-0-started").exists() or child.poll() is not None, START_TIMEOUT_S,
                 "the first batch to start", state=lambda: console.read_text()[-3000:])
        assert child.poll() is None, console.read_text()[-3000:]
        before = console.read_bytes()
        os.killpg(child.pid, signal.SIGINT)  # a terminal's Ctrl-C: the script's whole process group
        wait_for(lambda: b"sharegroup: Ctrl-C: stopping" in console.read_bytes(), 60, "the stop to start",
                 state=lambda: console.read_text()[-3000:])
        (tmp_path / "go").touch()
        child.wait(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    said = console.read_bytes()[len(before):].decode(errors="replace")
    print(said)
    lines = said.splitlines()
    assert len(lines) <= MOST_LINES, said
    assert "Traceback" not in said and "Exception" not in said, said
    stopped = [line for line in lines if line.startswith("sharegroup: stopped query")]
    assert len(stopped) == 1 and "batch 0 was the last committed" in stopped[0], said
    assert child.returncode == 0, said
    everything = console.read_text(errors="replace")
    assert "Failed to cancel job group" not in everything, everything[-3000:]
    # the bare script logs Spark's stop warning itself, and another one, through Spark's default log4j2 profile
    assert ("Another warning of the DAGScheduler" in everything) == (shape == "bare"), everything[-3000:]
    committed = sum(_sink_values(setup).values())  # batch 0, which the stop let finish: a first poll may bring less
    assert 0 < committed <= PER_BATCH, f"the first run committed {committed} records"

    # the same query again, in this session: it goes on from batch 0 and takes the rest
    restart = {**options, "checkpointLocation": str(setup.checkpoint)}
    query = (spark.readStream.format("sharegroup").options(**restart).load().writeStream
             .foreachBatch(DeltaBatchWriter(str(setup.sink), app_id="ctrl-c"))
             .option("checkpointLocation", str(setup.checkpoint)).trigger(availableNow=True).start())
    try:
        started = time.monotonic()
        wait_for(lambda: sum(_sink_values(setup).values()) >= RECORDS or not query.isActive, 180,
                 "the restarted query to read the rest", state=lambda: sum(_sink_values(setup).values()))
        print(f"the restart read the rest in {time.monotonic() - started:.1f} s")
    finally:
        query.stop()
    values = _sink_values(setup)
    assert {value for value, count in values.items() if count > 1} == set()
    assert set(values) == produced


@pytest.mark.parametrize(("kernel", "handler"), [(False, "on_sigint"), (True, "default_int_handler")],
                         ids=["script", "notebook-kernel"])
def test_a_notebook_kernel_keeps_its_interrupt(kernel, handler):
    """Imported in a script, the package takes Ctrl-C; imported in a Jupyter kernel (whose interrupt button sends
    SIGINT for the cell that runs) it leaves the kernel's handler alone."""
    script = ("import sys, signal\n" + ("import ipykernel\n" if kernel else "") +
              "import sharegroup_source\nprint(signal.getsignal(signal.SIGINT).__name__)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == handler
