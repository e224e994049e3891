"""The acknowledgement path has one owner, as ``docs/architecture.md`` ("Where acknowledgements are sent") states it,
read from the code's own syntax: admission decides and calls nobody, records enter the driver in one module and
leave it in one, the epoch book alone calls the acknowledger, and the record's path the page lists is at most ten
modules, each once, tied to one another by imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
DRIVER = ROOT / "sharegroup_source" / "driver"
#: Which driver module alone calls each of the ``Coordinator`` protocol's methods.
COORDINATOR_CALLS = {
    "acquire": "acquisition.py", "acquire_ahead": "acquisition.py", "starts_at": "acquisition.py",
    "acknowledge": "acknowledger.py", "archived": "acknowledger.py",
    "take_over": "micro_batch.py", "close": "micro_batch.py", "lost_unread": "micro_batch.py",
}
#: What admission may import of the project: the vocabulary it decides in, and the index it reads.
ADMISSION_MAY_IMPORT = {"sharegroup_source.acks", "sharegroup_source.schema", "sharegroup_source.driver.emitted_index"}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _project_imports(path: Path) -> set[str]:
    return {node.module for node in ast.walk(_tree(path)) if isinstance(node, ast.ImportFrom) and node.module
            and node.module.split(".")[0] in ("sharegroup_source", "state_store")}


def _calls_on(path: Path, attribute: str) -> set[str]:
    """The methods called on ``self.<attribute>`` in ``path``."""
    return {node.func.attr for node in ast.walk(_tree(path))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == attribute
            and isinstance(node.func.value.value, ast.Name) and node.func.value.value.id == "self"}


def test_admission_decides_and_imports_no_part_that_acts():
    imports = _project_imports(DRIVER / "admission.py")
    assert imports <= ADMISSION_MAY_IMPORT, sorted(imports - ADMISSION_MAY_IMPORT)


def test_each_coordinator_call_has_one_driver_module():
    callers: dict[str, set[str]] = {}
    for path in sorted(DRIVER.glob("*.py")):
        for method in _calls_on(path, "_coordinator"):
            callers.setdefault(method, set()).add(path.name)
    assert callers == {method: {module} for method, module in COORDINATOR_CALLS.items()}


def test_the_epoch_book_alone_calls_the_acknowledger():
    callers = {path.name for path in DRIVER.glob("*.py") if _calls_on(path, "_acks")}
    assert callers == {"epoch_book.py"}
    importers = {path.name for path in DRIVER.glob("*.py")
                 if "sharegroup_source.driver.acknowledger" in _project_imports(path)}
    assert importers == {"epoch_book.py", "micro_batch.py"}, importers
    # micro_batch builds it only to hand it to the book: bound to a local name that goes into EpochBook(...)
    tree = _tree(DRIVER / "micro_batch.py")
    built = [node for node in ast.walk(tree) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
             and isinstance(node.value.func, ast.Name) and node.value.func.id == "Acknowledger"]
    assert len(built) == 1 and isinstance(built[0].targets[0], ast.Name), "one Acknowledger, held by no attribute"
    name = built[0].targets[0].id
    uses = [node for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == name
            and isinstance(node.ctx, ast.Load)]
    handed = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "EpochBook" and any(isinstance(a, ast.Name) and a.id == name for a in node.args)]
    assert len(uses) == 1 and len(handed) == 1, "the acknowledger goes to the book and nowhere else"


def test_a_records_path_is_at_most_ten_modules_each_once_and_tied_by_imports():
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("### A record's path, from the share client to its ACCEPT", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. `([^`]+\.py)`", section, re.MULTILINE)
    assert 5 <= len(steps) <= 10, steps
    assert len(set(steps)) == len(steps), "a module twice on the path"
    for step in steps:
        assert (ROOT / step).is_file(), step
    modules = {step: step.removesuffix(".py").replace("/", ".") for step in steps}
    imports = {step: _project_imports(ROOT / step) for step in steps}

    def tied(a: str, b: str) -> bool:  # a imports b, or b's package (the coordinator protocol, the state store)
        return any(modules[b] == i or modules[b].startswith(i + ".") for i in imports[a])

    reached, frontier = {steps[0]}, [steps[0]]
    while frontier:
        here = frontier.pop()
        for other in steps:
            if other not in reached and (tied(here, other) or tied(other, here)):
                reached.add(other)
                frontier.append(other)
    assert reached == set(steps), f"not tied to the rest by an import: {sorted(set(steps) - reached)}"
