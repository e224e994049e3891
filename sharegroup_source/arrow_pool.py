"""Arrow's memory pool in the connector's processes: jemalloc, which gives freed pages back.

The driver-side runner lives as long as its query, and each batch allocates small Arrow buffers in
several threads (Spark's calls, the commit watcher, maintenance, the readers of the state's files).
Arrow's default pool, mimalloc, kept what they freed: over the fifth 2-hour soak (2026-11-29) its
region in the delta lane's runner grew 9 to 68 MB while Arrow had 1-2 MB allocated.

Arrow chooses its process pool once, when pyarrow loads, from ``ARROW_DEFAULT_MEMORY_POOL``, and its
C++ readers (Parquet pages, codecs, file buffers) allocate from that pool whatever pyarrow's own
default is: ``pa.set_memory_pool`` reaches pyarrow's calls only (measured 2026-11-30: a Parquet file
read from bytes still made 12 allocations in mimalloc with jemalloc set as pyarrow's default). So the
choice has to be in a process's environment before pyarrow loads, and Spark's runner loads pyarrow
before the connector's code runs. Hence three steps:

- importing ``sharegroup_source`` puts jemalloc in this process's environment (:func:`returning_pool`):
  a pyarrow loaded afterwards takes it, and so does every process started afterwards, such as the JVM
  of a session built after the import and all of its Python workers;
- ``register(spark)`` gives this process's choice to the format's workers on a session whose JVM
  started earlier, a notebook's (:func:`worker_environment`);
- in the runner, :func:`use_a_returning_pool` makes the chosen pool pyarrow's default where neither
  reached (a ``spark-submit`` job whose driver environment lacks the variable), and says how to reach the rest.

A pool chosen with the variable is always left alone, as is a pyarrow built without jemalloc (its
``arrow/util/config.h`` says which it has; conda-forge's and Windows' builds lack it).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["POOL_VARIABLE", "RETURNING_POOL", "returning_pool", "use_a_returning_pool", "worker_environment"]

log = logging.getLogger(__name__)

#: Arrow's own way of choosing the pool, read once when pyarrow loads.
POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
#: The pool chosen where none is: it returns freed pages to the system at once (pyarrow's decay of 0 ms).
RETURNING_POOL = "jemalloc"


def returning_pool(environment: Mapping[str, str]) -> dict[str, str]:
    """The variable choosing jemalloc, to add to ``environment`` unless it chose a pool or pyarrow lacks jemalloc."""
    if environment.get(POOL_VARIABLE) or not _pyarrow_has_jemalloc():
        return {}
    return {POOL_VARIABLE: RETURNING_POOL}


def worker_environment(workers: Mapping[str, str]) -> dict[str, str]:
    """The workers' variables (a SparkContext's ``environment``) with this process's pool unless they chose one."""
    chosen = os.environ.get(POOL_VARIABLE)
    if not chosen or workers.get(POOL_VARIABLE):
        return dict(workers)
    return {**workers, POOL_VARIABLE: chosen}


def use_a_returning_pool() -> str:
    """Make the chosen pool (jemalloc unless the variable names one) pyarrow's default where Arrow's is another.

    Arrow's is another where pyarrow loaded before the choice reached the process (Spark's runner loads it
    before unpickling the connector): its readers then keep their pool, and the log says so once. Returns the
    name of pyarrow's default pool now.
    """
    import pyarrow as pa

    wanted = os.environ.get(POOL_VARIABLE) or RETURNING_POOL
    process_pool = pa.default_memory_pool().backend_name
    if process_pool != wanted:
        pools = {"jemalloc": pa.jemalloc_memory_pool, "mimalloc": pa.mimalloc_memory_pool,
                 "system": pa.system_memory_pool}
        try:
            pa.set_memory_pool(pools[wanted]())
        except (KeyError, NotImplementedError):
            log.info("this pyarrow has no %s pool: its default stays %s", wanted, process_pool)
        else:
            log.info("Arrow's readers in this process keep its %s pool, which holds on to freed pages over hours: "
                     "set %s=%s in the Spark driver's environment to give them the pool pyarrow's calls now use",
                     process_pool, POOL_VARIABLE, wanted)
    return pa.default_memory_pool().backend_name


def _pyarrow_has_jemalloc() -> bool:
    """Whether the installed pyarrow was built with jemalloc, read from its headers without loading it."""
    spec = importlib.util.find_spec("pyarrow")
    if spec is None or not spec.submodule_search_locations:
        return False
    config = Path(next(iter(spec.submodule_search_locations)), "include", "arrow", "util", "config.h")
    try:
        return "#define ARROW_JEMALLOC\n" in config.read_text(encoding="utf-8")
    except OSError:
        return False
