"""The driver's process gives Arrow's freed pages back (jemalloc) unless the user chose a pool."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sharegroup_source.driver.arrow_pool import POOL_VARIABLE

PROBE = ("import pyarrow as pa; from sharegroup_source.driver.arrow_pool import use_a_returning_pool; "
         "before = pa.default_memory_pool().backend_name; print(before, use_a_returning_pool(), "
         "pa.default_memory_pool().backend_name)")


@pytest.mark.parametrize(("chosen", "expected"), [(None, "mimalloc jemalloc jemalloc"),
                                                  ("system", "system system system")])
def test_the_driver_s_process_takes_jemalloc_unless_a_pool_was_chosen(chosen: str | None, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != POOL_VARIABLE}
    if chosen is not None:
        env[POOL_VARIABLE] = chosen
    probe = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60,
                           check=True)
    assert probe.stdout.split() == expected.split(), probe.stderr
