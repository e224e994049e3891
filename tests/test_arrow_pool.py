"""The connector's processes take jemalloc as Arrow's pool, which gives freed pages back, unless the user chose one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sharegroup_source.arrow_pool import POOL_VARIABLE, worker_environment

#: pyarrow loaded after the package: Arrow's own pool is the one the package chose
PACKAGE_FIRST = ("import os, sharegroup_source, pyarrow as pa; "
                 f"print(pa.default_memory_pool().backend_name, os.environ['{POOL_VARIABLE}'])")
#: pyarrow loaded before the package (Spark's runner): pyarrow's calls take the chosen pool when the driver is built
PYARROW_FIRST = ("import pyarrow as pa; from sharegroup_source.arrow_pool import use_a_returning_pool; "
                 "before = pa.default_memory_pool().backend_name; print(before, use_a_returning_pool(), "
                 "pa.default_memory_pool().backend_name)")


def _run(probe: str, chosen: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != POOL_VARIABLE}
    if chosen is not None:
        env[POOL_VARIABLE] = chosen
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60,
                         check=True)
    return run.stdout.split()


@pytest.mark.parametrize(("chosen", "expected"), [(None, "jemalloc jemalloc"), ("system", "system system")])
def test_importing_the_package_chooses_arrow_s_pool_unless_the_user_did(chosen: str | None, expected: str) -> None:
    assert _run(PACKAGE_FIRST, chosen) == expected.split()


@pytest.mark.parametrize(("chosen", "expected"), [(None, "mimalloc jemalloc jemalloc"),
                                                  ("system", "system system system")])
def test_a_process_that_loaded_pyarrow_first_gives_pyarrow_s_calls_the_chosen_pool(chosen: str | None,
                                                                                    expected: str) -> None:
    assert _run(PYARROW_FIRST, chosen) == expected.split()


def test_workers_take_this_process_s_pool_unless_their_environment_chose_one(monkeypatch) -> None:
    monkeypatch.setenv(POOL_VARIABLE, "jemalloc")
    assert worker_environment({"PYTHONHASHSEED": "0"}) == {"PYTHONHASHSEED": "0", POOL_VARIABLE: "jemalloc"}
    assert worker_environment({POOL_VARIABLE: "system"}) == {POOL_VARIABLE: "system"}
    monkeypatch.delenv(POOL_VARIABLE)
    assert worker_environment({"PYTHONHASHSEED": "0"}) == {"PYTHONHASHSEED": "0"}
