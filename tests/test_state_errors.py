"""Bad state locations fail with a StateStoreError naming the path and the problem, leaving nothing behind."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from state_store import LedgerEntry, OffsetRange, StateStore, StateStoreError


def entry(epoch: int = 1) -> LedgerEntry:
    return LedgerEntry("q", epoch, (OffsetRange("orders", 0, 0, 9),), "run", 0, 30_000, "ACQUIRED")


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_corrupt_delta_log(tmp_path: Path) -> None:
    log = tmp_path / "ledger" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("this is not a delta log {")
    store = StateStore(str(tmp_path))
    with pytest.raises(StateStoreError, match=rf"ledger table at {tmp_path}/ledger is corrupt"):
        store.ledger.get("q", 1)
    with pytest.raises(StateStoreError, match="is corrupt"):
        store.ledger.write_epoch(entry())
    assert files_under(tmp_path / "ledger") == ["_delta_log", "_delta_log/00000000000000000000.json"]


def test_corruption_after_opening_is_reported_too(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path))
    store.ledger.write_epoch(entry(1))
    (tmp_path / "ledger" / "_delta_log" / "00000000000000000002.json").write_text("garbage")
    with pytest.raises(StateStoreError, match=r"ledger table at .* is corrupt"):
        store.ledger.get("q", 1)


def test_table_with_another_schema(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path / "ledger"), pa.table({"id": [1], "name": ["x"]}))
    store = StateStore(str(tmp_path))
    message = rf"ledger table at {tmp_path}/ledger has another schema: found columns \(id long, name string\)"
    with pytest.raises(StateStoreError, match=message):
        store.ledger.entries("q")
    with pytest.raises(StateStoreError, match="has another schema"):
        store.ledger.write_epoch(entry())
    assert DeltaTable(str(tmp_path / "ledger")).version() == 0  # nothing was written into it


def test_missing_delta_log(tmp_path: Path) -> None:
    table = tmp_path / "share_state"
    table.mkdir()
    (table / "part-00000.parquet").write_bytes(b"PAR1")
    store = StateStore(str(tmp_path))
    with pytest.raises(StateStoreError, match=rf"share_state table at {table} is missing: .*no Delta commit"):
        store.share_state.load("orders", 0)
    (table / "_delta_log").mkdir()
    with pytest.raises(StateStoreError, match="is missing"):
        store.share_state.acquire("orders", 0, "m", 1, now_ms=0, log_end_offset=1)
    assert files_under(table) == ["_delta_log", "part-00000.parquet"]


def test_table_deleted_while_in_use(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state"))
    store.ledger.write_epoch(entry(1))
    shutil.rmtree(tmp_path / "state")
    deleted = rf"table at {tmp_path}/state/ledger is missing: it was deleted"
    with pytest.raises(StateStoreError, match=deleted):
        store.ledger.get("q", 1)
    assert StateStore(str(tmp_path / "state")).ledger.get("q", 1) is None  # a new store starts afresh


def test_location_under_a_regular_file(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(StateStoreError, match=rf"cannot use state location {blocker}/state: {blocker} is a"):
        StateStore(str(blocker / "state"))
    with pytest.raises(StateStoreError, match=f"{blocker} is a file, not a directory"):
        StateStore(str(blocker))


def test_regular_file_where_a_table_directory_belongs(tmp_path: Path) -> None:
    (tmp_path / "ledger").write_text("x")
    store = StateStore(str(tmp_path))
    blocked = rf"cannot use {tmp_path}/ledger for the ledger table: .* is a file"
    with pytest.raises(StateStoreError, match=blocked):
        store.ledger.write_epoch(entry())
    with pytest.raises(StateStoreError, match="is a file"):
        store.ledger.get("q", 1)
    store.decisions.record("q", 1, [("orders", 0, 1, "REJECT", "bad")])  # the other tables still work
    assert files_under(tmp_path)[:2] == ["decisions", "decisions/_delta_log"]
    assert (tmp_path / "ledger").read_text() == "x"


def test_location_becoming_unwritable_after_opening(tmp_path: Path) -> None:
    root = tmp_path / "state"
    store = StateStore(str(root))
    root.parent.mkdir(exist_ok=True)
    root.write_text("in the way")  # the directory's place is taken before the first write
    with pytest.raises(StateStoreError, match=rf"cannot use {root}/dead_letters .*{root} is a file"):
        store.dead_letters.append([{"topic": "orders", "partition": 0, "offset": 1, "group_id": "q"}])
    assert root.read_text() == "in the way"


def test_empty_location_is_refused() -> None:
    with pytest.raises(StateStoreError, match="state location is empty"):
        StateStore(" ")
