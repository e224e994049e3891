"""The package as a user installs it: the built wheel (not editable) in a fresh venv, used from another folder.

The fresh venv takes the dependencies (pyspark, deltalake, ...) from this test venv through a
``.pth`` line, so nothing is downloaded; the package itself is only the wheel's copy. The
repository is neither the working directory nor on the path, so nothing is found by accident.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from sharegroup_source.arrow_pool import POOL_VARIABLE

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("setup.py", "pyproject.toml", "README.md", "pyspark_sharegroup.py", "sharegroup_source", "state_store")

#: Run in the fresh venv; prints one line per step.
SESSION_BEFORE_INSTALL = textwrap.dedent("""
    import importlib, subprocess, sys
    from pyspark.sql import SparkSession

    OPTIONS = {"kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.group.id": "g", "subscribe": "t",
               "stateLocation": sys.argv[2]}
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()

    def load():
        try:
            spark.readStream.format("sharegroup").options(**OPTIONS).load()
            return "found"
        except Exception as error:  # a Py4JJavaError around SparkClassNotFoundException
            return "DATA_SOURCE_NOT_FOUND" if "DATA_SOURCE_NOT_FOUND" in str(error) else repr(error)[:2000]

    print("before install:", load(), flush=True)
    subprocess.run(sys.argv[1].split("\\x1f"), check=True, stdout=subprocess.DEVNULL)
    importlib.invalidate_caches()
    print("after install:", load(), flush=True)
    import sharegroup_source
    sharegroup_source.register(spark)
    print("after register:", load(), flush=True)
    # what Spark hands the format's Python processes (the driver-side runner among them), and the session's own
    registered = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource("sharegroup")
    print("its workers' pool:", registered.dataSourceCls().envVars().get("ARROW_DEFAULT_MEMORY_POOL"),
          "- the session's:", spark.sparkContext.environment.get("ARROW_DEFAULT_MEMORY_POOL"), flush=True)
    sharegroup_source.register(spark)
    print("after a second register:", load(), flush=True)
    spark.stop()
""")

NEW_SESSION = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    frame = spark.readStream.format("sharegroup").options(**{
        "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.group.id": "g", "subscribe": "t",
        "stateLocation": sys.argv[1]}).load()
    import sharegroup_source
    print("found", frame.columns[:2], "from", sharegroup_source.__file__, flush=True)
    spark.stop()
""")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the sources (the build leaves build/ and *.egg-info behind)."""
    work = tmp_path_factory.mktemp("build")
    source = work / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "-w", str(work / "dist"), str(source)], check=True, cwd=work)
    (built,) = (work / "dist").glob("sharegroup_source-*.whl")
    return built


def fresh_venv(where: Path) -> tuple[Path, Path]:
    """(python, site-packages) of a new venv that sees this venv's packages but not this package."""
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(where)], check=True)  # type: ignore[attr-defined]
    python = where / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([str(python), "-c", "import sharegroup_source"], cwd=where, capture_output=True)
    assert probe.returncode != 0, "the fresh venv must not see the package before the wheel is installed"
    return python, site


def install_command(wheel: Path, site: Path) -> list[str]:
    """pip installing the wheel's files into the fresh venv (not editable; no index, no dependencies)."""
    return [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(site),
            str(wheel)]


@pytest.mark.timeout(600)
def test_the_installed_wheel_is_found_and_register_helps_an_older_session(wheel: Path, tmp_path: Path) -> None:
    python, site = fresh_venv(tmp_path / "venv")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the JVM of a session started before the install lacks the Arrow pool the package chooses (arrow_pool.py)
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", POOL_VARIABLE)},
           "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)}

    # a session started before the install (the %pip-into-a-running-session case)
    (elsewhere / "before.py").write_text(SESSION_BEFORE_INSTALL)
    before = subprocess.run([str(python), "before.py", "\x1f".join(install_command(wheel, site)),
                             str(tmp_path / "state1")], cwd=elsewhere, env=env, capture_output=True, text=True,
                            timeout=300)
    assert before.stdout.splitlines() == [
        "before install: DATA_SOURCE_NOT_FOUND",
        "after install: DATA_SOURCE_NOT_FOUND",
        "after register: found",
        "its workers' pool: jemalloc - the session's: None",
        "after a second register: found",
    ], before.stderr[-3000:]
    # register is idempotent: Spark logs this warning when a registration replaces another
    assert "replaced a previously registered data source" not in before.stderr

    # a session started after the install: Spark's discovery finds pyspark_sharegroup, no register call
    (elsewhere / "after.py").write_text(NEW_SESSION)
    after = subprocess.run([str(python), "after.py", str(tmp_path / "state2")], cwd=elsewhere, env=env,
                           capture_output=True, text=True, timeout=300)
    assert after.returncode == 0, after.stderr[-3000:]
    assert after.stdout.startswith("found ['key', 'value'] from "), after.stdout
    assert after.stdout.split(" from ")[1].strip().startswith(str(site)), after.stdout


def test_the_docs_say_how_a_running_session_finds_the_format() -> None:
    """The Databricks notebook registers the format (a %pip install into a running session is not
    discovered), the deployment page's Databricks section says so, and neither the notebook nor the
    documentation (the README and the site's pages) names an index the package is not on."""
    notebook = (ROOT / "notebooks" / "databricks_orders_job.py").read_text()
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    docs = [(ROOT / "README.md").read_text(), *(page.read_text() for page in sorted((ROOT / "docs").rglob("*.md")))]
    assert "sharegroup_source.register(spark)" in notebook and "DATA_SOURCE_NOT_FOUND" in notebook
    assert "## Databricks" in deployment
    assert "register(spark)" in deployment.split("## Databricks")[1].split("\n## ")[0]
    for text in (notebook, *docs):
        assert "pip install sharegroup-source" not in text


def test_the_wheel_carries_kafkas_share_group_admin_message_definitions(wheel: Path) -> None:
    """kafka-python loads them from the installed package: without them no broker group can be described."""
    with zipfile.ZipFile(wheel) as built:
        names = {n.rsplit("/", 1)[-1] for n in built.namelist() if n.startswith("sharegroup_source/kafka/messages/")}
    assert {f"{api}{kind}.json" for api in ("ShareGroupDescribe", "DescribeShareGroupOffsets", "AlterShareGroupOffsets",
                                             "DeleteShareGroupOffsets") for kind in ("Request", "Response")} <= names


def test_the_wheel_marks_both_packages_typed(wheel: Path) -> None:
    """PEP 561: a type checker reads an installed package's annotations only where its py.typed is."""
    with zipfile.ZipFile(wheel) as built:
        assert {"sharegroup_source/py.typed", "state_store/py.typed"} <= set(built.namelist())


#: Run in a venv that sees only the wheel's install requirements and pyspark: imports every module the wheel ships.
IMPORT_EVERY_MODULE = textwrap.dedent("""
    import importlib, sys
    failed = []
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except Exception as error:
            failed.append(f"{name}: {type(error).__name__}: {error}")
    print("\\n".join(failed) or "every module imported", flush=True)
""")


def _requirement_closure(roots: list[str]) -> set[str]:
    """The installed distributions ``roots`` (requirement strings) need, with what those need, extras left out."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    needed: set[str] = set()
    pending = list(roots)
    while pending:
        requirement = Requirement(pending.pop())
        name = canonicalize_name(requirement.name)
        if name in needed or (requirement.marker is not None and not requirement.marker.evaluate({"extra": ""})):
            continue
        try:
            found = distribution(name)
        except PackageNotFoundError:  # an optional one this venv lacks: not there for the import either
            continue
        needed.add(name)
        pending.extend(found.requires or [])
    return needed


def _only(distributions: set[str], into: Path) -> Path:
    """A folder of links to the top-level files and folders of ``distributions`` in this venv: a sys.path entry with
    those and nothing else."""
    from importlib.metadata import distribution

    purelib = Path(sysconfig.get_paths()["purelib"])
    into.mkdir()
    for name in distributions:
        for top in {Path(str(f)).parts[0] for f in distribution(name).files or [] if not str(f).startswith("..")}:
            if (purelib / top).exists() and not (into / top).exists():
                (into / top).symlink_to(purelib / top)
    return into


def test_the_wheel_holds_the_connector_alone_and_each_of_its_modules_imports_with_its_requirements(
        wheel: Path, tmp_path: Path) -> None:
    """No test tooling in the wheel (sharegroup-testing is its own distribution), and every module it ships imports
    where only its install requirements and pyspark (which every Spark runtime has) are: nothing it ships needs a
    package it does not require."""
    with zipfile.ZipFile(wheel) as built:
        names = built.namelist()
        metadata = next(built.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert not [n for n in names if "testing" in n or n.startswith("tests/")], names
    modules = sorted(n[:-3].replace("/", ".").removesuffix(".__init__") for n in names if n.endswith(".py"))
    assert "sharegroup_source.source" in modules and "state_store.store" in modules, modules
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    deps = _only(_requirement_closure([*requires, "pyspark"]), tmp_path / "deps")
    assert {"pyspark", "confluent_kafka", "deltalake", "kafka"} <= {p.name for p in deps.iterdir()}
    assert not {"psutil", "moto", "azure", "pytest", "delta"} & {p.name for p in deps.iterdir()}
    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # type: ignore[attr-defined]
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "dependencies.pth").write_text(f"{deps}\n")
    subprocess.run(install_command(wheel, site), check=True)
    (tmp_path / "import_all.py").write_text(IMPORT_EVERY_MODULE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    imported = subprocess.run([str(python), str(tmp_path / "import_all.py"), *modules], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
    assert imported.stdout.strip() == "every module imported", imported.stdout + imported.stderr[-3000:]
    # the local brokers' commands are sharegroup-testing's: without it, the command says where they are
    local = subprocess.run([str(python), "-m", "sharegroup_source.cli", "kafka", "--topic", "orders"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=120)
    assert (local.returncode, local.stdout) == (2, ""), local
    assert local.stderr.startswith("sharegroup: error: 'sharegroup kafka' (a local broker for trying the connector) "
                                   "comes with sharegroup-testing"), local.stderr
    described = subprocess.run([str(python), "-m", "sharegroup_source.cli", "describe", "--help"], cwd=tmp_path,
                               env=env, capture_output=True, text=True, timeout=120)
    assert described.returncode == 0 and "--bootstrap-servers" in described.stdout, described
