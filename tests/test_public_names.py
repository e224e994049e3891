"""Public and private, as the code says it: a module's ``__all__`` is its public face (mypy holds every import to
it: ``implicit_reexport = false``), a leading underscore marks what no other module may use, and the bench, the
soak and the examples use the package the way a user's code may, or say here why not. The public face is typed
(py.typed, a typed ``acknowledge``), and every exception a user of the connector can meet is in
``sharegroup_source.errors``."""

from __future__ import annotations

import ast
import builtins
import inspect
import re
import subprocess
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import sharegroup_source
from sharegroup_source import errors

ROOT = Path(__file__).parents[1]
PROJECT = ("sharegroup_source", "state_store")
#: confluent-kafka's names of librdkafka's local error codes start with an underscore, and are its public API.
LIBRARY_NAMES = {"KafkaError"}
#: Where the bench or an example reaches past the public face, and why that is right there.
REACHES_IN = {
    ("examples/demo.py", "spark._jvm"): "pyspark's own way to reach the JVM (Delta's version); pyspark has no other",
}
#: The public face the examples keep to (with the test tooling shipped in sharegroup_testing, and the state
#: store's documented ``StateStore``): nothing else of the two packages.
EXAMPLES_MAY_IMPORT = ("sharegroup_source", "sharegroup_source.admin", "sharegroup_source.sinks",
                       "sharegroup_source.errors", "state_store")
#: Exception classes of the two packages that never reach a user of the connector, and why; every other one is
#: sharegroup_source.errors's (defined there, or the state store's re-exported there).
NOT_RAISED_TO_USERS = {
    "GiveWay": "control flow inside a Delta member's commit (coordinators/delta/member.py): caught there, it only "
               "makes the commit wait for another member's renewal",
    "NonAtomicStoreError": "state_store.commit_probe's; its one caller, locations.check_location, raises it as the "
                           "OptionError that names the option",
    "InvalidRecordStateError": "the state machine's (state_store.SharePartition): the Delta member turns it into the "
                               "share-partition's failed acknowledgement (a KafkaException per partition for "
                               "DeltaShareConsumer), and an admin reset refuses a group with holders first "
                               "(GroupNotEmptyError)",
}
#: The second distribution's package (the local brokers and test servers): held to the same rules of names, its
#: errors its own (the connector never imports it, so a user of the connector never meets them).
TESTING = "sharegroup-testing/sharegroup_testing"


def _sources(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def _shown(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"


def test_no_module_imports_a_private_name_of_another():
    imports = [f"{_shown(path, node)}: from {node.module} import {alias.name}"
               for path in _sources(*PROJECT, TESTING, "bench", "soak", "examples", "tests")
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ImportFrom)
               and (node.module or "").split(".")[0] in (*PROJECT, "sharegroup_testing")
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


@pytest.mark.parametrize("path", _sources(*PROJECT, TESTING), ids=lambda p: str(p.relative_to(ROOT)))
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


def test_examples_import_only_the_public_face():
    reached = [f"{_shown(path, node)}: {name}" for path in _sources("examples")
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               for name in ([node.module or ""] if isinstance(node, ast.ImportFrom)
                            else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
               if name.split(".")[0] in PROJECT and name not in EXAMPLES_MAY_IMPORT
               and not name.startswith("sharegroup_testing")]
    assert reached == [], "examples importing internals:\n" + "\n".join(reached)


def test_acknowledge_is_a_typed_documented_function_of_the_package():
    from pyspark.sql import DataFrame

    from sharegroup_source.outcomes import OUTCOMES, Outcome
    from state_store import AckType

    acknowledge = sharegroup_source.acknowledge
    assert inspect.isfunction(acknowledge) and acknowledge.__module__ == "sharegroup_source", acknowledge
    assert acknowledge.__doc__ and "OutcomeError" in acknowledge.__doc__
    signature = inspect.signature(acknowledge)
    unannotated = [name for name, parameter in signature.parameters.items()
                   if parameter.annotation is inspect.Parameter.empty]
    assert unannotated == [] and signature.return_annotation is not inspect.Signature.empty, unannotated
    # the annotations name what the package imports only for type checkers: resolved with those names
    hints = typing.get_type_hints(acknowledge, localns={"DataFrame": DataFrame, "Outcome": Outcome,
                                                        "AckType": AckType, "Mapping": Mapping, "Any": Any})
    assert hints == {"df": DataFrame, "outcome": Outcome | AckType, "reason": str | None,
                     "options": Mapping[str, Any], "return": int}, hints
    assert signature.parameters["options"].kind is inspect.Parameter.KEYWORD_ONLY
    assert typing.get_args(Outcome) == tuple(t.value for t in OUTCOMES) == tuple(t.value for t in AckType)


def test_the_package_imports_neither_pyspark_nor_the_delta_coordinator():
    """The CLI and the embedded broker import the package where no pyspark is: its entry points load on use."""
    probe = ("import sys, sharegroup_source\n"
             "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j') or m.startswith("
             "('sharegroup_source.outcomes', 'sharegroup_source.coordinators', 'sharegroup_source.source')))\n"
             "print(loaded)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_both_packages_say_they_are_typed():
    """PEP 561's marker, which setup.py's package_data puts in the wheel (tests/test_install.py)."""
    for package in PROJECT:
        assert (ROOT / package / "py.typed").is_file(), f"{package}/py.typed is missing"


def _exception_classes() -> dict[str, str]:
    """Every exception class defined in the two packages, by name: the file that defines it."""
    defined = {node.name: (path, [ast.unparse(base) for base in node.bases])
               for path in _sources(*PROJECT) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ClassDef)}
    builtin = {name for name, value in vars(builtins).items()
               if isinstance(value, type) and issubclass(value, BaseException)}
    found: dict[str, str] = {}
    grew = True
    while grew:
        grew = False
        for name, (path, bases) in defined.items():
            if name not in found and any(base.split(".")[-1] in builtin | set(found) for base in bases):
                found[name] = str(path.relative_to(ROOT))
                grew = True
    return found


def test_every_exception_a_user_can_meet_is_in_errors():
    exceptions = _exception_classes()
    assert {"OptionError", "StateStoreError", "GroupNotEmptyError"} <= set(exceptions), exceptions
    users = {name: file for name, file in exceptions.items()
             if not name.startswith("_") and name not in NOT_RAISED_TO_USERS}
    missing = sorted(f"{name} ({file})" for name, file in users.items() if name not in errors.__all__)
    assert missing == [], "exceptions users can meet, not in sharegroup_source.errors.__all__:\n" + "\n".join(missing)
    for name in users:
        assert isinstance(getattr(errors, name), type) and issubclass(getattr(errors, name), Exception), name
        assert name in sharegroup_source.__all__ and getattr(sharegroup_source, name) is getattr(errors, name), name
    moved = sorted(f"{name} ({file})" for name, file in users.items()
                   if file not in ("sharegroup_source/errors.py", "state_store/errors.py"))
    assert moved == [], "a user's exception is defined in errors.py (the state store's in state_store/errors.py):\n" \
        + "\n".join(moved)
    stale = sorted(set(NOT_RAISED_TO_USERS) - set(exceptions))
    assert stale == [], f"NOT_RAISED_TO_USERS names exceptions that are gone: {stale}"
    classes = sorted(name for name in errors.__all__ if isinstance(getattr(errors, name), type))
    assert set(classes) <= set(exceptions), "errors.__all__ names a class that is not an exception"


#: Where librdkafka keys may be written: the one module that builds every client's configuration, and the
#: translation of the user's own Java properties (``--command-config``) into librdkafka's names.
SETTINGS_BUILT_IN = {"sharegroup_source/kafka/settings.py", "sharegroup_source/kafka/java_settings.py"}


def _librdkafka_knows(key: str) -> bool:
    """Whether librdkafka has a configuration property ``key`` (asked of librdkafka itself)."""
    from confluent_kafka import KafkaException, Producer

    try:
        Producer({key: "1", "log_level": 0})
    except KafkaException as error:
        return "No such configuration property" not in error.args[0].str()
    return True


def _keys_written(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """String keys a module writes into a mapping: ``config["k"] = v``, and ``{**config, "k": v}`` (a dict built
    on another, the shape a client's configuration takes)."""
    written: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            written += [(t, t.slice.value) for t in targets if isinstance(t, ast.Subscript)
                        and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str)]
        elif isinstance(node, ast.Dict) and None in node.keys:
            written += [(node, k.value) for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return written


def test_no_librdkafka_key_is_written_outside_the_settings_module():
    """Every Kafka client's configuration is built in kafka/settings.py (Spark builds every Kafka parameter in
    KafkaSourceProvider): a key written elsewhere is a client configured where nobody looks for it."""
    found = [(path, node, key) for path in _sources(*PROJECT)
             if str(path.relative_to(ROOT)) not in SETTINGS_BUILT_IN
             for node, key in _keys_written(ast.parse(path.read_text(encoding="utf-8")))
             if re.fullmatch(r"[a-z]+(\.[a-z]+)+", key)]
    written = sorted(f"{_shown(path, node)}: {key!r}" for path, node, key in found if _librdkafka_knows(key))
    assert written == [], "librdkafka keys written outside kafka/settings.py:\n" + "\n".join(written)
    assert _librdkafka_knows("socket.connection.setup.timeout.ms") and not _librdkafka_knows("group.location")
