"""How ``make demo``/``make test`` install the checkout, and the check of the running Spark.

The Makefile installs in setuptools' default editable mode (its ``editable_mode=compat`` is
announced to go) and adds a ``.pth`` line with the checkout: the default mode's import hook does
not show top-level modules to ``pkgutil.iter_modules``, which is how Spark discovers
``pyspark_sharegroup``. The test repeats those two steps in a fresh venv and asks a real Spark
for ``format("sharegroup")``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sharegroup_source import SparkVersionError, check_spark
from tests.test_install import NEW_SESSION, ROOT, SOURCES, fresh_venv

MAKEFILE = (ROOT / "Makefile").read_text()


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_the_makefiles_editable_install_is_found_by_sparks_discovery(tmp_path: Path) -> None:
    commands = [line for line in MAKEFILE.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in commands if "editable_mode" in line], "setuptools' default editable mode"
    pth_name = re.search(r"^DEV_PTH := (\S+)$", MAKEFILE, re.M)
    assert pth_name is not None, "the Makefile names the .pth it writes"
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, checkout / name)
    python, site = fresh_venv(tmp_path / "venv")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                              "--no-build-isolation", "--no-index", "-e", str(checkout)],
                             cwd=tmp_path, capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]
    assert "transitional" not in install.stderr, install.stderr
    (site / pth_name.group(1)).write_text(f"{checkout}\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "after.py").write_text(NEW_SESSION)
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")},
           "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)}
    session = subprocess.run([str(python), "after.py", str(tmp_path / "state")], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=300)
    assert session.returncode == 0, session.stderr[-3000:]
    assert session.stdout.startswith("found ['key', 'value'] from "), session.stdout
    assert Path(session.stdout.split(" from ")[1].strip()).resolve().is_relative_to(checkout), session.stdout


@pytest.mark.parametrize("version", ["3.5.8", "3.4.4"])
def test_a_spark_without_python_streaming_sources_is_named_with_the_one_needed(version: str) -> None:
    with pytest.raises(SparkVersionError) as raised:
        check_spark(version)
    message = str(raised.value)
    assert f"Spark {version}" in message and "Spark 4.0 or newer" in message and "\n" not in message


@pytest.mark.parametrize("version", ["4.0.5", "4.1.4", "4.2.0", "4.3.0", "4.3.0.dev1"])
def test_supported_sparks_pass_the_check(version: str) -> None:
    assert check_spark(version) == version
