"""Public and private, as the code says it: a module's ``__all__`` is its public face (mypy holds every import to
it: ``implicit_reexport = false``), a leading underscore marks what no other module may use, and the bench, the
soak and the examples use the package the way a user's code may, or say here why not."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PROJECT = ("sharegroup_source", "state_store")
#: confluent-kafka's names of librdkafka's local error codes start with an underscore, and are its public API.
LIBRARY_NAMES = {"KafkaError"}
#: Where the bench or an example reaches past the public face, and why that is right there.
REACHES_IN = {
    ("bench/admin_broker_bench.py", "protocol._run"):
        "the bench measures the many-groups-per-request DescribeShareGroupOffsets the admin decided against; "
        "no public call should offer the slower way",
    ("bench/admin_broker_bench.py", "protocol._grouped"): "the same measurement",
    ("bench/delta_coordinator.py", "consumer._group"):
        "the bench reports the share_state table's lost commit races, a counter no user needs",
    ("examples/demo.py", "spark._jvm"): "pyspark's own way to reach the JVM (Delta's version); pyspark has no other",
}


def _sources(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def _shown(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"


def test_no_module_imports_a_private_name_of_another():
    imports = [f"{_shown(path, node)}: from {node.module} import {alias.name}"
               for path in _sources(*PROJECT, "bench", "soak", "examples", "tests")
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PROJECT
               for alias in node.names if alias.name.startswith("_")]
    assert imports == [], "private names imported across modules:\n" + "\n".join(imports)


def test_bench_soak_and_examples_use_public_names_or_say_why_not():
    reached: dict[tuple[str, str], str] = {}
    for path in _sources("bench", "soak", "examples"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", *LIBRARY_NAMES):
                continue
            reached[(str(path.relative_to(ROOT)), ast.unparse(node))] = _shown(path, node)
    unexplained = sorted(f"{where}: {expression}" for (file, expression), where in reached.items()
                         if (file, expression) not in REACHES_IN)
    assert unexplained == [], "private attributes used without a reason in REACHES_IN:\n" + "\n".join(unexplained)
    stale = sorted(set(REACHES_IN) - set(reached))
    assert stale == [], f"REACHES_IN names uses that are gone: {stale}"


@pytest.mark.parametrize("path", _sources(*PROJECT), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_with_code_says_what_is_public(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    has_code = any(isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Assign | ast.AnnAssign) for node in tree.body)
    declared = [node for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets)]
    assert declared or not has_code, f"{path.relative_to(ROOT)} has no __all__"
    if declared:
        names = ast.literal_eval(declared[0].value)
        defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.ClassDef)} | {
            node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)} | {
            (alias.asname or alias.name).split(".")[0] for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names}
        assert [name for name in names if name.startswith("_")] == [], "private names in __all__"
        assert sorted(set(names) - defined) == [], f"{path.relative_to(ROOT)}: __all__ names what it lacks"
