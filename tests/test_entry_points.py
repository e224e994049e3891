"""Every entry point answers --help in plain text without doing its work; the demo stops cleanly on Ctrl-C."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.demo_runs import interrupt_demo

ROOT = Path(__file__).resolve().parent.parent
SHAREGROUP = Path(sys.executable).parent / "sharegroup"


@pytest.mark.parametrize("command", [
    [sys.executable, "examples/demo.py", "--help"],
    [sys.executable, "notebooks/spark_submit_job.py", "--help"],
    [str(SHAREGROUP), "--help"],
    [str(SHAREGROUP), "broker", "--help"],
    [str(SHAREGROUP), "kafka", "--help"],
    [sys.executable, "-m", "sharegroup_source.cli", "--help"],
], ids=["demo", "spark-submit-job", "sharegroup", "sharegroup-broker", "sharegroup-kafka", "python-m-cli"])
def test_help_is_plain_text_and_does_no_work(command: list[str], tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: "), done.stdout
    assert "``" not in done.stdout and "\\\\" not in done.stdout, done.stdout
    assert time.monotonic() - started < 30
    assert list(tmp_path.iterdir()) == []  # the demo made no work folder


@pytest.mark.timeout(400)
def test_ctrl_c_stops_the_demo_cleanly(tmp_path: Path) -> None:
    """A real SIGINT to the demo's process group, as a terminal's Ctrl-C sends it, once batches flow.

    It arrives as the second batch starts (the first is slow, so the second is due at once): the demo
    lets that batch end and stops the query between batches."""
    run = interrupt_demo(tmp_path)
    output, err = run.output, run.err
    assert run.returncode == 0, f"{output}\n{err}"
    # the batch in progress ended before the stop: no cancelled job's StackOverflowError, killed task's
    # BrokenPipeError or interrupted checkpoint write in Spark's output
    for broken in ("Traceback", "KeyboardInterrupt", "Exception", "Error", "cancelled"):
        assert broken not in err, (broken, err)
    # quiet by default: no raw librdkafka lines, no CONFWARN, no preview notice, no Spark console progress bar
    for noise in ("|FAIL|", "CONFWARN", "Preview", "[Stage ", "ResolveWriteToStream", "Your hostname"):
        assert noise not in err, (noise, err)
    assert "stopping: Ctrl-C" in output and "summary" in output and "stopped by Ctrl-C" in output
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("sharegroup-demo-")] == []


LOG_THROUGH_SPARKS_LOGGERS = """
from sharegroup_testing.spark import local_spark
spark = local_spark()
jvm = spark.sparkContext._jvm
executor = jvm.org.apache.logging.log4j.LogManager.getLogger("org.apache.spark.executor.Executor")
cause = jvm.org.apache.spark.SparkException("Could not find HeartbeatReceiver.")
executor.warn("Issue communicating with driver in heartbeater", cause)
executor.warn("Managed memory leak detected; size = 1 bytes, task 0.0 in stage 0.0 (TID 0)")
jvm.java.lang.System.err.flush()
spark.stop()
"""


def test_the_quiet_log_drops_only_the_heartbeat_race_at_stop(tmp_path: Path) -> None:
    """The executor's heartbeat warning that SparkContext.stop races with (seen in a Ctrl-C run) is
    dropped by the quiet log configuration; another warning of the same logger still reaches stderr."""
    done = subprocess.run([sys.executable, "-c", LOG_THROUGH_SPARKS_LOGGERS], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "Managed memory leak detected" in done.stderr, done.stderr
    assert "heartbeater" not in done.stderr and "HeartbeatReceiver" not in done.stderr, done.stderr
