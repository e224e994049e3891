"""A new user's first script, run as a new user runs it: a venv's python, no ``PYSPARK_PYTHON``, ``python3`` on
``PATH`` another Python without the package.

Each script runs in its own process (its own Spark), since what is tested is decided when a session starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: A typo'd option, imported before the session starts: the format is found, and the typo is the connector's line.
TYPO = textwrap.dedent("""
    import sharegroup_source
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    try:
        (spark.readStream.format("sharegroup").option("kafka.bootstrap.servers", "127.0.0.1:1")
         .option("kafka.group.id", "g").option("subscribe", "t").option("stateLocation", "/tmp/nowhere")
         .option("maxRecordPerTrigger", "5").load())
    except Exception as error:
        print("ERROR>>" + str(error) + "<<ERROR")
    spark.stop()
""")

#: A session started before the import, then ``register``: its workers' Python is fixed, and lacks the package.
LATE_IMPORT = textwrap.dedent("""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    import sharegroup_source
    try:
        sharegroup_source.register(spark)
        print("registered")
    except sharegroup_source.WorkerPythonError as error:
        print(f"{type(error).__name__}: {error}")
    spark.stop()
""")


@pytest.fixture(scope="module")
def new_users_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a user who runs ``.venv/bin/python job.py`` from a shell whose ``python3`` is another
    Python: ``PATH`` starts with a folder whose ``python3`` has neither pyspark nor this package."""
    other = shutil.which("python3", path="/usr/bin:/bin")
    if other is None:
        pytest.skip("no python3 in /usr/bin or /bin to stand for the PATH's other Python")
    has_it = subprocess.run([other, "-c", "import sharegroup_source"], capture_output=True,
                            cwd=tmp_path_factory.getbasetemp(), env={"PATH": "/usr/bin:/bin"}).returncode == 0
    assert not has_it, f"{other} has sharegroup_source: it cannot stand for a Python without the package"
    folder = tmp_path_factory.mktemp("path")
    (folder / "python3").symlink_to(other)
    java = Path(os.path.realpath(shutil.which("java") or "/usr/bin/java")).parent
    # no PYTHONPATH: the venv finds the package by its install, and the other Python must not find it at all
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "PYTHONPATH"))}
    env.update(PATH=f"{folder}:{java}:/usr/bin:/bin")
    return env


def _run(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    child = subprocess.run([sys.executable, "-c", script], env=env, cwd=cwd, capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 0, child.stderr[-4000:]
    return child


def _python_traceback(message: str) -> list[str]:
    """The Python traceback inside Spark's error message, from its first line to the connector's."""
    lines = message.splitlines()
    start = next(i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("sharegroup_source.errors."))
    return lines[start:end + 1]


def test_a_typo_in_a_script_without_pyspark_python_is_the_connectors_line_logged_first(new_users_env, tmp_path):
    child = _run(TYPO, new_users_env, tmp_path)
    said = child.stdout.split("ERROR>>", 1)[1].split("<<ERROR", 1)[0]
    assert "DATA_SOURCE_NOT_FOUND" not in said, said[:2000]
    line = "OptionError: unknown option 'maxrecordpertrigger' (did you mean maxRecordsPerTrigger?)"
    logged = [row for row in child.stderr.splitlines() if row.startswith(f"sharegroup: {line}")]
    assert len(logged) == 1, child.stderr[-4000:]
    traceback = _python_traceback(said)
    print("\n".join(traceback))
    # the worker's call into the source and the line: no frame of the options' parser, no chained cause
    assert traceback[-1].startswith(f"sharegroup_source.errors.{line}"), traceback
    assert not [row for row in traceback if "options.py" in row or "During handling" in row], traceback
    assert len(traceback) <= 8, traceback


def test_register_on_a_session_whose_workers_lack_the_package_says_so_in_one_line(new_users_env, tmp_path):
    child = _run(LATE_IMPORT, new_users_env, tmp_path)
    assert child.stdout.splitlines() == [
        f"WorkerPythonError: Spark's Python workers run python3 ({new_users_env['PATH'].split(':')[0]}/python3), "
        f"which has no sharegroup_source: set PYSPARK_PYTHON={sys.executable} before the session starts (export it, "
        "or os.environ['PYSPARK_PYTHON'] = sys.executable in the script), or import sharegroup_source before it "
        "starts"], child.stdout + child.stderr[-3000:]
