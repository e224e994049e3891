"""The Python that Spark's workers start, where a local script leaves it to chance.

pyspark starts its Python workers with ``PYSPARK_PYTHON``, else ``python3`` from ``PATH``. A
script run with a venv's python (``.venv/bin/python job.py``, an IDE's interpreter) and no
``PYSPARK_PYTHON`` thus has its workers in another Python, one without this package: Spark's
discovery finds no ``format("sharegroup")`` and the query fails with Spark's bare
``DATA_SOURCE_NOT_FOUND``. Importing the package before the session starts sets the variable to
the importing interpreter, the one that has the package, in exactly that case.

It is left alone when it means something: set by the user; a JVM already running (pyspark under
``spark-submit``, or a session started before the import: the JVM read its environment when it
started); ``python3`` on ``PATH`` already this interpreter (an activated venv). A session with a
remote master whose executors have another Python sets ``PYSPARK_PYTHON`` itself, as Spark asks.

A local session that started before the import keeps its workers' Python: ``register(spark)`` then
checks that Python and, where it lacks the package, says so in one line instead of letting the
query fail in a worker.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from sharegroup_source.errors import WorkerPythonError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_worker_python", "default_worker_python"]

log = logging.getLogger(__name__)


def default_worker_python() -> str | None:
    """Set ``PYSPARK_PYTHON`` to this interpreter where pyspark would start another one; the value set, or None."""
    if "PYSPARK_PYTHON" in os.environ or "PYSPARK_GATEWAY_PORT" in os.environ or _jvm_started():
        return None
    on_path = shutil.which("python3")
    # the same bin folder is the same environment; resolving links would equate a venv with its base Python
    if on_path is not None and os.path.dirname(os.path.abspath(on_path)) == os.path.dirname(sys.executable):
        return None
    os.environ["PYSPARK_PYTHON"] = sys.executable
    log.info("PYSPARK_PYTHON=%s: Spark's Python workers run this Python, which has sharegroup_source, not %s",
             sys.executable, on_path or "a python3 that is not on PATH")
    return sys.executable


def _jvm_started() -> bool:
    """Whether this process already runs a SparkContext, whose JVM took its environment when it started."""
    context = sys.modules.get("pyspark.core.context") or sys.modules.get("pyspark.context")
    return getattr(getattr(context, "SparkContext", None), "_active_spark_context", None) is not None


def check_worker_python(spark: SparkSession) -> None:
    """Refuse, in one line, a local session whose Python workers would run a Python without this package.

    Only a local master is checked: a cluster's workers run on other machines, whose Python this one cannot try.
    """
    context = spark.sparkContext
    worker = shutil.which(context.pythonExec) or context.pythonExec
    if not str(context.master).startswith("local") or os.path.dirname(os.path.abspath(worker)) == os.path.dirname(
            sys.executable):
        return
    try:
        found = subprocess.run([worker, "-c", "import sharegroup_source"], capture_output=True, timeout=60).returncode
    except (OSError, subprocess.TimeoutExpired) as error:
        raise WorkerPythonError(f"Spark's Python workers run {context.pythonExec} ({worker}), which does not start "
                                f"({error}): {_fix()}") from None
    if found != 0:
        raise WorkerPythonError(f"Spark's Python workers run {context.pythonExec} ({worker}), which has no "
                                f"sharegroup_source: {_fix()}")


def _fix() -> str:
    return (f"set PYSPARK_PYTHON={sys.executable} before the session starts (export it, or "
            "os.environ['PYSPARK_PYTHON'] = sys.executable in the script), or import sharegroup_source before it "
            "starts")
