"""The state tables on real local Delta tables: ledger, decisions, share state, dead letters, progress."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from state_store import (
    AckType,
    AcquiredRecords,
    EpochStatus,
    InvalidRecordStateError,
    LedgerEntry,
    OffsetRange,
    PersistedBatch,
    PersistedState,
    RecordState,
    ShareConfig,
    StateStore,
    StateStoreError,
)
from state_store.delta_table import StateTable
from state_store.ledger import LEDGER_SCHEMA
from state_store.maintenance import BackgroundMaintenance
from state_store.progress import COUNTERS, PROGRESS_SCHEMA
from state_store.table_commit import Write
from state_store.table_retention import Retention


def entry(epoch: int, member: str = "run-1", status: str = "ACQUIRED", query: str = "q") -> LedgerEntry:
    ranges = (OffsetRange("orders", 0, epoch * 10, epoch * 10 + 4, gaps=((epoch * 10 + 2, epoch * 10 + 2),),
                          redelivered=((epoch * 10 + 3, 2),)),
              OffsetRange("orders", 1, 7, 7))
    return LedgerEntry(query, epoch, ranges, member, 1_000, 31_000, status)


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(str(tmp_path / "state"))


def test_tables_are_created_by_their_first_write(store: StateStore) -> None:
    assert store.ledger.get("q", 1) is None and store.ledger.max_epoch("q") is None
    assert not Path(store.location).exists()
    store.ledger.write_epoch(entry(1))
    assert sorted(p.name for p in Path(store.location).iterdir()) == ["ledger"]


def test_ledger_round_trip_and_first_write_wins(store: StateStore, tmp_path: Path) -> None:
    first = entry(1)
    assert store.ledger.write_epoch(first) == first
    assert store.ledger.write_epoch(entry(1, member="run-2")) == first  # an epoch is written once
    again = StateStore(str(tmp_path / "state")).ledger.get("q", 1)  # durable: a fresh reader sees it
    assert again == first
    assert again.record_count == 5 and again.ranges[0].offsets() == [10, 11, 13, 14]


def test_ledger_status_latest_wins_and_filters(store: StateStore) -> None:
    for epoch in range(1, 6):
        store.ledger.write_epoch(entry(epoch))
    store.ledger.set_status("q", [1, 2], "EMITTED")
    store.ledger.set_status("q", [1, 2, 3], "ACKED")
    store.ledger.set_status("q", [2], "ACK_FAILED")
    store.ledger.write_epoch(entry(1, query="other"))
    assert {e.epoch: e.status for e in store.ledger.entries("q")} == {
        1: "ACKED", 2: "ACK_FAILED", 3: "ACKED", 4: "ACQUIRED", 5: "ACQUIRED"}
    assert [e.epoch for e in store.ledger.entries("q", statuses=["ACQUIRED", "ACK_FAILED"])] == [2, 4, 5]
    assert [e.epoch for e in store.ledger.entries("q", after_epoch=3)] == [4, 5]
    assert store.ledger.get("q", 2).ranges == entry(2).ranges
    assert store.ledger.max_epoch("q") == 5 and store.ledger.max_epoch("other") == 1


def test_ledger_refuses_unknown_epochs_and_statuses(store: StateStore) -> None:
    store.ledger.write_epoch(entry(1))
    version = store.ledger.table.footprint().version
    with pytest.raises(StateStoreError, match=r"no epochs \[2\] of query 'q'"):
        store.ledger.set_status("q", [1, 2], "ACKED")
    with pytest.raises(ValueError, match="ledger status must be one of"):
        store.ledger.set_status("q", [1], "DONE")
    with pytest.raises(ValueError, match="delivery counts"):
        OffsetRange("t", 0, 0, 3, redelivered=((5, 2),))
    with pytest.raises(ValueError, match="gaps"):
        OffsetRange("t", 0, 0, 3, gaps=((2, 5),))
    assert store.ledger.table.footprint().version == version
    assert store.ledger.get("q", 1).status == "ACQUIRED"


def test_ledger_setting_the_same_status_again_commits_nothing(store: StateStore) -> None:
    store.ledger.write_epoch(entry(1))
    store.ledger.set_status("q", [1], "ACKED")
    version = store.ledger.table.footprint().version
    store.ledger.set_status("q", [1], "ACKED")
    assert store.ledger.table.footprint().version == version


def test_concurrent_writers_of_one_epoch_keep_the_first(store: StateStore, tmp_path: Path) -> None:
    stores = [StateStore(str(tmp_path / "state")) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    results: dict[int, LedgerEntry] = {}

    def write(i: int) -> None:
        barrier.wait()
        results[i] = stores[i].ledger.write_epoch(entry(7, member=f"run-{i}"))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kept = store.ledger.get("q", 7)
    assert kept is not None and all(r == kept for r in results.values())
    entry_rows = [r for r in store.ledger.table.snapshot().rows() if r["kind"] == "ENTRY"]
    assert len(entry_rows) == 1


def test_decisions_last_write_wins(store: StateStore) -> None:
    assert store.decisions.for_epochs("q", [1]) == {}
    store.decisions.record("q", 1, [("orders", 0, 10, "REJECT", "bad json"),
                                    ("orders", 0, 11, "RELEASE", None),
                                    ("orders", 0, 10, "REJECT", "bad json, twice")])
    store.decisions.record("q", 1, [("orders", 0, 11, "ACCEPT", "fixed")])
    store.decisions.record("q", 2, [("orders", 0, 20, "REJECT", "poison")])
    store.decisions.record("other", 1, [("orders", 0, 10, "RELEASE", None)])
    assert store.decisions.for_epochs("q", [1]) == {("orders", 0, 10): ("REJECT", "bad json, twice"),
                                                    ("orders", 0, 11): ("ACCEPT", "fixed")}
    assert set(store.decisions.for_epochs("q", [1, 2])) == {("orders", 0, 10), ("orders", 0, 11),
                                                            ("orders", 0, 20)}
    with pytest.raises(ValueError, match="must be one of ACCEPT, REJECT, RELEASE"):
        store.decisions.record("q", 1, [("orders", 0, 12, "DROP", None)])


def test_dead_letters_append_is_idempotent_per_record(store: StateStore) -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert store.dead_letters.append([
        {"key": b"k1", "value": b"v1", "headers": [("trace", b"x"), ("empty", None)], "topic": "orders",
         "partition": 0, "offset": 10, "delivery_count": 5, "reason": "limit", "time": when, "group_id": "q"},
        {"key": None, "value": b"v2", "headers": [], "topic": "orders", "partition": 0, "offset": 11,
         "delivery_count": 1, "reason": "rejected", "time": 1_767_323_045_000, "group_id": "q"},
    ]) == 2
    again = pa.table({"topic": ["orders", "orders"], "partition": [0, 1], "offset": [10, 10],
                      "value": [b"other", b"v3"], "reason": ["again", "new"], "time": [0, 1_767_323_045_000],
                      "group_id": ["q", "q"]})
    assert store.dead_letters.append(again) == 1, "the record already kept is not counted again"
    rows = sorted(store.dead_letters.read().to_pylist(), key=lambda r: (r["partition"], r["offset"]))
    assert [(r["partition"], r["offset"], r["value"], r["reason"]) for r in rows] == [
        (0, 10, b"v1", "limit"), (0, 11, b"v2", "rejected"), (1, 10, b"v3", "new")]
    assert rows[0]["headers"] == [{"key": "trace", "value": b"x"}, {"key": "empty", "value": None}]
    assert rows[0]["time"] == when and rows[1]["time"] == when and rows[2]["key"] is None


def test_share_state_saves_and_loads_the_durable_form(store: StateStore) -> None:
    assert store.share_state.load("orders", 0) is None
    durable = PersistedState(110, (PersistedBatch(110, 110, RecordState.AVAILABLE, 1),
                                   PersistedBatch(111, 119, RecordState.ACKNOWLEDGED, 1)))
    store.share_state.save("orders", 0, durable)
    store.share_state.save("orders", 1, PersistedState(5))
    assert store.share_state.load("orders", 0) == durable
    store.share_state.save("orders", 0, PersistedState(120))
    assert store.share_state.load("orders", 0) == PersistedState(120)
    assert store.share_state.load("orders", 1) == PersistedState(5)
    assert store.share_state.table.snapshot().table().num_rows == 2  # one row per share-partition


def test_share_state_transitions_are_committed(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state"), share_config=ShareConfig(lock_duration_ms=1_000))
    got = store.share_state.acquire("orders", 0, "a", 5, now_ms=0, log_end_offset=8, log_start_offset=2)
    assert got.records == (AcquiredRecords(2, 6, 1),) and got.count == 5 and got.version is not None
    with pytest.raises(InvalidRecordStateError):
        store.share_state.acknowledge("orders", 0, "b", [(2, 3, AckType.ACCEPT)], now_ms=10)
    assert store.share_state.table.footprint().version == got.version  # a refused ack commits nothing
    store.share_state.acknowledge("orders", 0, "a", [(2, 3, AckType.ACCEPT)], now_ms=10)
    assert store.share_state.release("orders", 0, "a", now_ms=20) is not None
    fresh = StateStore(str(tmp_path / "state"), share_config=ShareConfig(lock_duration_ms=1_000))
    sp = fresh.share_state.partition("orders", 0)
    assert sp is not None and (sp.spso, sp.speo) == (4, 7)
    assert fresh.share_state.acquire("orders", 0, "c", 9, now_ms=30, log_end_offset=8).records == (
        AcquiredRecords(4, 6, 2), AcquiredRecords(7, 7, 1))
    nothing = fresh.share_state.acquire("orders", 0, "d", 9, now_ms=40, log_end_offset=8)
    assert nothing.records == () and nothing.version is None  # no change, no commit


def test_progress_totals_use_each_runs_latest_row(store: StateStore) -> None:
    assert store.progress.totals("q") == {}
    store.progress.append("q", "run-1", dict.fromkeys(COUNTERS, 1))
    store.progress.append("q", "run-1", {**dict.fromkeys(COUNTERS, 3), "min_lock_headroom_ms": None})
    store.progress.append("q", "run-2", {**dict.fromkeys(COUNTERS, 2), "min_lock_headroom_ms": 500})
    totals = store.progress.totals("q")
    assert totals["accepted"] == 5 and totals["runs"] == 2 and totals["min_lock_headroom_ms"] == 500
    store.maintain()
    assert store.progress.totals("q") == totals
    assert store.progress.table.snapshot().table().num_rows == 2


def test_maintenance_folds_the_ledger_and_drops_old_settled_epochs(store: StateStore) -> None:
    for epoch in range(1, 9):
        store.ledger.write_epoch(entry(epoch))
        store.decisions.record("q", epoch, [("orders", 0, epoch * 10, "REJECT", "bad")])
    store.ledger.set_status("q", range(3, 9), "EMITTED")
    store.ledger.set_status("q", range(3, 9), "ACKED")
    store.ledger.set_status("q", [2], "EMITTED")  # an unsettled old epoch is kept whatever its age
    before = {e.epoch: e for e in store.ledger.entries("q")}

    sizes = store.maintain(ledger_keep_epochs=3)

    after = {e.epoch: e for e in store.ledger.entries("q")}
    assert sorted(after) == [1, 2, 6, 7, 8] and all(after[e] == before[e] for e in after)
    assert store.ledger.table.snapshot().table().num_rows == 5  # one row per epoch
    kept_decisions = sorted(o for _, _, o in store.decisions.for_epochs("q", range(1, 9)))
    assert kept_decisions == [10, 20, 30, 40, 50, 60, 70, 80]
    assert sizes["ledger"].files == 1 and sizes["decisions"].files == 1


def test_tables_keep_a_protocol_delta_spark_reads(store: StateStore) -> None:
    store.ledger.write_epoch(entry(1))
    store.decisions.record("q", 1, [("orders", 0, 10, "REJECT", "bad")])
    store.share_state.acquire("orders", 0, "a", 1, now_ms=0, log_end_offset=1)
    store.dead_letters.append([{"topic": "orders", "partition": 0, "offset": 10, "value": b"v", "group_id": "q"}])
    store.progress.append("q", "run", dict.fromkeys(COUNTERS, 0))
    store.maintain()
    for name in ("ledger", "decisions", "share_state", "dead_letters", "progress"):
        protocol = DeltaTable(str(Path(store.location) / name)).protocol()
        assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2), name
        assert not protocol.reader_features and not protocol.writer_features, name


def test_progress_knows_whether_the_latest_runs_member_left(store: StateStore) -> None:
    assert store.progress.member_in_group("q") is None
    store.progress.append("q", "run-1", dict.fromkeys(COUNTERS, 1))
    member = store.progress.member_in_group("q")
    assert member is not None and member.run_id == "run-1" and not member.process_is_gone()
    store.progress.append("q", "run-1", dict.fromkeys(COUNTERS, 1), left=True)
    assert store.progress.member_in_group("q") is None
    store.progress.append("q", "run-2", dict.fromkeys(COUNTERS, 0))
    assert store.progress.member_in_group("q").run_id == "run-2"
    assert store.progress.member_in_group("other") is None
    store.maintain()
    assert store.progress.member_in_group("q").run_id == "run-2"


def test_a_refused_runs_leaving_says_nothing_of_the_run_in_the_group(store: StateStore) -> None:
    """Issue 34: the first run is in the group (idle: no row since it joined); a second query on its state
    joins, is refused at its first call and leaves. The latest row is that "left", but it is the second
    run's only: the first run's member is still in the group, and a third run must wait for it."""
    store.progress.append("q", "first", dict.fromkeys(COUNTERS, 0))  # this live process
    store.progress.append("q", "refused", dict.fromkeys(COUNTERS, 0))
    store.progress.append("q", "refused", dict.fromkeys(COUNTERS, 0), left=True)
    member = store.progress.member_in_group("q")
    assert member is not None and member.run_id == "first" and member.process_is_alive()
    store.maintain()
    assert store.progress.member_in_group("q").run_id == "first"
    store.progress.append("q", "first", dict.fromkeys(COUNTERS, 0), left=True)
    assert store.progress.member_in_group("q") is None


def test_a_run_elsewhere_that_never_left_ends_when_another_run_writes(store: StateStore) -> None:
    """A run on another host cannot be checked: as before, a later run's row stands for its end (the later
    run waited for it before joining), else every restart would wait for a member long expired."""
    row = {"query_id": "q", "run_id": "elsewhere", "written_at_ms": 0, **dict.fromkeys(COUNTERS, 0),
           "host": "another-host.invalid", "pid": 1, "left_at_ms": None}
    store.progress.table.commit(lambda snapshot: Write(pa.Table.from_pylist(
        [{**row, "commit_version": snapshot.next_version}], schema=PROGRESS_SCHEMA)))
    member = store.progress.member_in_group("q")
    assert member is not None and member.run_id == "elsewhere" and not member.process_is_alive()
    assert not member.process_is_gone(), "a process elsewhere is not known to be gone either"
    store.progress.append("q", "next", dict.fromkeys(COUNTERS, 0))
    assert store.progress.member_in_group("q").run_id == "next"
    store.progress.append("q", "next", dict.fromkeys(COUNTERS, 0), left=True)
    assert store.progress.member_in_group("q") is None


def test_a_compacted_topic_epoch_costs_its_gaps_not_its_offsets(store: StateStore) -> None:
    """10,000 records over 1,000,000 offsets: the row holds 10,000 gap runs, not 990,000 offsets."""
    records = [(o, 2 if o % 100_000 == 0 else 1) for o in range(0, 1_000_000, 100)]
    compacted = OffsetRange.of("orders", 0, records)
    assert compacted.record_count == 10_000 and len(compacted.gaps) == 9_999 and len(compacted.redelivered) == 10
    store.ledger.write_epoch(LedgerEntry("q", 1, (compacted,), "run-1", 0, 30_000, "ACQUIRED"))
    assert store.ledger.table.footprint().bytes < 200_000
    again = StateStore(store.location).ledger.get("q", 1).ranges[0]
    assert again == compacted and again.offsets() == [o for o, _ in records]
    assert again.delivery_counts == tuple(c for _, c in records)


def test_ledger_rows_of_the_first_versions_still_read(store: StateStore) -> None:
    """Before gap runs, a row listed every missing offset and every record's delivery count."""
    row = {"query_id": "q", "epoch": 1, "kind": "ENTRY", "status": "ACKED", "commit_version": 0, "updated_at_ms": 0,
           "member_id": "run-0", "acquired_at_ms": 0, "lock_deadline_ms": 30_000,
           "ranges": [{"topic": "orders", "partition": 0, "first_offset": 10, "last_offset": 15,
                       "gaps": [11, 12, 14], "delivery_counts": [1, 3, 1]}], "ranges_encoding": None}
    store.ledger.table.commit(lambda _snapshot: Write(pa.Table.from_pylist([row], schema=LEDGER_SCHEMA)))
    legacy = store.ledger.get("q", 1).ranges[0]
    assert legacy == OffsetRange("orders", 0, 10, 15, gaps=((11, 12), (14, 14)), redelivered=((13, 3),))
    assert legacy.offsets() == [10, 13, 15]


def test_a_settled_epochs_status_rides_with_the_next_entry_in_one_commit(store: StateStore) -> None:
    store.ledger.write_epoch(entry(1))
    version = store.ledger.table.snapshot().version
    assert store.ledger.write_epoch(entry(2), settled={1: EpochStatus.ACKED}) == entry(2)
    assert store.ledger.table.snapshot().version == version + 1
    assert [(e.epoch, e.status) for e in store.ledger.entries("q")] == [(1, "ACKED"), (2, "ACQUIRED")]
    with pytest.raises(StateStoreError, match=r"no epochs \[7\]"):
        store.ledger.write_epoch(entry(3), settled={7: EpochStatus.ACKED})
    assert store.ledger.get("q", 3) is None, "an entry whose statuses cannot be written is not written either"


def test_background_maintenance_loses_no_ledger_write_made_meanwhile(tmp_path: Path) -> None:
    """The driver keeps writing epochs while a maintenance round folds and vacuums the same ledger on
    instances of its own: every epoch written before, during and after the round is still there."""
    location = str(tmp_path / "state")
    store = StateStore(location)
    for epoch in range(1, 61):
        store.ledger.write_epoch(entry(epoch), settled={epoch - 1: EpochStatus.ACKED} if epoch > 1 else None)
    maintenance = BackgroundMaintenance(lambda: StateStore(location),
                                        lambda state: state.maintain(ledger_keep_epochs=20), "test state")
    assert maintenance.request()
    epoch = 60
    while maintenance.rounds == 0 and epoch < 400:  # writes while the round runs (it ends first: checked below)
        epoch += 1
        store.ledger.write_epoch(entry(epoch), settled={epoch - 1: EpochStatus.ACKED})
    maintenance.close(timeout_s=60)
    assert maintenance.rounds == 1 and maintenance.last_s is not None, "the round did not finish"
    assert epoch > 61, "no epoch was written while the round ran"
    after = StateStore(location).ledger.entries("q")
    kept = {e.epoch for e in after}
    assert set(range(epoch - 19, epoch + 1)) <= kept, "an epoch among the newest was lost"
    assert {e.epoch: e.status for e in after}[epoch] == "ACQUIRED"
    assert all(e.ranges == entry(e.epoch).ranges for e in after)


def test_background_maintenance_serves_every_round_from_one_thread_on_tables_it_reopens_after_a_failure() -> None:
    """Rounds run one at a time in one thread on the tables it opened; a failed round's tables are opened again;
    close lets the asked round finish and ends the thread, and asks for nothing after."""
    opened: list[list[str]] = []
    threads: set[threading.Thread] = set()
    go = threading.Event()

    def maintain(tables: list[str]) -> None:
        threads.add(threading.current_thread())
        go.wait(30)
        tables.append("round")
        if len(tables) == 2:
            raise OSError("the store went away")

    def open_tables() -> list[str]:
        opened.append([])
        return opened[-1]

    maintenance = BackgroundMaintenance(open_tables, maintain, "test state")
    assert maintenance.request()
    assert not maintenance.request(), "a second round was asked for while one runs"
    go.set()
    for _ in range(3):
        assert maintenance.idle(30)
        assert maintenance.request()
    maintenance.close(30)
    assert not maintenance.request(), "a round was asked for after the close"
    assert [len(tables) for tables in opened] == [2, 2], "the tables were not kept, or not reopened after a failure"
    assert maintenance.rounds == 2 and len(threads) == 1, "each second round on a table instance fails"
    assert not any(t.is_alive() for t in threads), "the thread outlived close"


def test_a_reader_left_behind_past_the_logs_cleanup_sees_the_latest_rows_and_writes_on(tmp_path: Path) -> None:
    """Two processes share a table; one goes quiet while the other writes, checkpoints and cleans the log up.

    The quiet one's next commit file is gone because it is old, not because it is yet to come: it must read
    the other's rows and write on top of them (before, it planned on its stale version and failed with
    delta-rs's "Invalid table version", the long soak's share_state failure).
    """
    schema = pa.schema([("n", pa.int64())])
    quiet, busy = (StateTable(str(tmp_path), "share_state", schema) for _ in range(2))

    def append(table: StateTable, n: int) -> None:
        assert table.commit(lambda s: Write(pa.table({"n": [n]}, schema=schema))) is not None

    append(quiet, 1)
    seen = quiet.snapshot()
    assert [r["n"] for r in seen.rows()] == [1]
    for n in range(2, 6):
        append(busy, n)
    busy.maintain()  # a checkpoint; cleanup keeps the log back to the newest checkpoint older than the retention
    log = tmp_path / "share_state" / "_delta_log"
    long_ago = time.time() - 600  # past the one minute of log internal state keeps
    for entry in log.iterdir():
        os.utime(entry, (long_ago, long_ago))
    append(busy, 6)
    busy.maintain()
    assert not (log / f"{seen.next_version:020d}.json").exists(), "the quiet reader's next commit is still there"

    assert sorted(r["n"] for r in quiet.snapshot().rows()) == [1, 2, 3, 4, 5, 6]
    append(quiet, 7)
    assert sorted(r["n"] for r in busy.snapshot().rows()) == [1, 2, 3, 4, 5, 6, 7]


def test_commits_beside_another_members_maintenance_never_fail_on_its_log_cleanup(tmp_path: Path) -> None:
    """One member commits while another's maintenance checkpoints and cleans the same table's log up.

    delta-rs checkpoints after every 100th commit inside the commit call, reading the log since the last
    checkpoint while the other member deletes it: the commit landed, yet raised FileNotFoundError, so its
    writer took it for failed (the long soak's "cannot write the share_state table ... .json not found").
    Commits make no checkpoint now; maintenance alone does, so every commit returns, and every row is there.
    """
    schema = pa.schema([("n", pa.int64())])
    retention = Retention.state(log=timedelta(seconds=1))
    writer, maintainer = (StateTable(str(tmp_path), "share_state", schema, retention=retention) for _ in range(2))
    commits = 350  # three of delta-rs's every-100th-commit checkpoints
    done = threading.Event()
    rounds, failed = 0, []

    def maintain() -> None:
        nonlocal rounds
        while not done.is_set():
            try:
                maintainer.maintain()
            except StateStoreError as error:
                failed.append(str(error))
            rounds += 1

    writer.commit(lambda s: Write(pa.table({"n": [0]}, schema=schema)))
    thread = threading.Thread(target=maintain)
    thread.start()
    try:
        for n in range(1, commits):
            writer.commit(lambda s, n=n: Write(pa.table({"n": [n]}, schema=schema)))
    finally:
        done.set()
        thread.join(60)
    assert rounds > 0, "no maintenance round ran beside the commits"
    assert failed == [], "a maintenance round failed on the other's commits"
    assert sorted(r["n"] for r in StateTable(str(tmp_path), "share_state", schema).snapshot().rows()) == \
        list(range(commits))


def test_maintenance_beside_writers_that_overwrite_checkpoints_and_deletes_what_they_replaced(tmp_path: Path) -> None:
    """Two members overwrite their rows of one table (share_state) while a third maintains it.

    delta-rs's vacuum records itself in a commit that loses to any concurrent overwrite; maintenance used to
    return on that loss before its checkpoint and log cleanup, so under members committing every batch no round
    ever finished (the third 2-hour soak's share_state log kept all 21,760 commits). Every round now ends with
    a checkpoint of the version it vacuumed, and every file replaced up to that version is gone.
    """
    schema = pa.schema([("member", pa.string()), ("n", pa.int64())])
    maintainer = StateTable(str(tmp_path), "share_state", schema)
    done = threading.Event()
    written: dict[str, int] = {}

    def overwrite(member: str) -> None:
        table = StateTable(str(tmp_path), "share_state", schema)
        n = 0
        while not done.is_set():
            n += 1
            table.commit(lambda s, n=n: Write(pa.table({"member": [member], "n": [n]}, schema=schema),
                                              mode="overwrite", predicate=f"member = '{member}'"))
            written[member] = n

    maintainer.commit(lambda s: Write(pa.table({"member": ["a", "b"], "n": [0, 0]}, schema=schema)))
    writers = [threading.Thread(target=overwrite, args=(member,)) for member in ("a", "b")]
    for thread in writers:
        thread.start()
    checkpoints = []
    table_dir = tmp_path / "share_state"
    try:
        for _ in range(3):
            before = maintainer.snapshot().version
            deadline = time.monotonic() + 60
            while maintainer.snapshot().version < before + 30 and time.monotonic() < deadline:
                time.sleep(0.05)  # the writers go on committing while the round runs
            maintainer.maintain()
            checkpoints.append(_last_checkpoint(table_dir))
            assert checkpoints[-1] >= before, f"round {len(checkpoints)} made no checkpoint past version {before}"
    finally:
        done.set()
        for thread in writers:
            thread.join(60)
    assert checkpoints == sorted(set(checkpoints)), "a round checkpointed no newer version than the last"
    replaced = _removed_up_to(table_dir, checkpoints[-1])
    assert replaced, "no file was replaced before the last round"
    left = sorted(path for path in replaced if (table_dir / path).exists())
    assert left == [], f"{len(left)} of {len(replaced)} files replaced by version {checkpoints[-1]} are still there"
    rows = {r["member"]: r["n"] for r in StateTable(str(tmp_path), "share_state", schema).snapshot().rows()}
    assert rows == written, "an overwrite made beside maintenance was lost"



def rewrite_that_loses_a_race(uri: str, storage_options: dict[str, str] | None = None) -> list[str]:
    """Rewrite a table whole while another writer appends in the middle of the first attempt, as the batches'
    appends race maintenance's fold of the ledger; returns the files on its store that its snapshot does not
    reference (replaced ones and any a lost attempt left)."""
    schema = pa.schema([("n", pa.int64())])
    table = StateTable(uri, "ledger", schema, storage_options=storage_options)
    for n in range(3):
        table.commit(lambda s, n=n: Write(pa.table({"n": [n]}, schema=schema)))
    other = StateTable(uri, "ledger", schema, storage_options=storage_options)
    attempts = []

    def fold(snapshot):
        attempts.append(snapshot.version)
        if len(attempts) == 1:  # the append lands while this attempt writes its copy
            other.commit(lambda s: Write(pa.table({"n": [3]}, schema=schema)))
        return Write(pa.table({"n": [sum(r["n"] for r in snapshot.rows())]}, schema=schema), mode="overwrite")

    table.commit(fold)
    assert len(attempts) == 2 and table.lost_races == 1, f"attempts on versions {attempts}"
    assert [r["n"] for r in StateTable(uri, "ledger", schema, storage_options=storage_options).snapshot().rows()] \
        == [0 + 1 + 2 + 3], "the rewrite's second attempt did not fold the append that won the race"
    delta = DeltaTable(table.uri, storage_options=storage_options)
    return delta.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True, full=True)


def test_a_whole_table_rewrite_that_loses_its_race_leaves_no_copy_behind(tmp_path: Path) -> None:
    """A lost attempt's file is deleted at once, not left for vacuum's orphan retention: the sixth 2-hour soak's
    ledger held 943 B per live row on disk beyond its snapshot, whole-ledger copies of lost maintenance rewrites."""
    unreferenced = rewrite_that_loses_a_race(str(tmp_path / "state"))
    assert len(unreferenced) == 4, f"beyond the 4 files the rewrite replaced: {sorted(unreferenced)}"


def test_a_state_table_an_earlier_release_made_keeps_no_tombstones_past_maintenance(tmp_path: Path) -> None:
    """Earlier releases made internal state tables with Delta's week of removed-file retention, which checkpoints
    keep tombstones for: every maintenance round then listed, and deleted again, every file a week of overwrites had
    replaced. The first write sets the table's retention to internal state's (none); a round's checkpoint then
    drops the tombstones of the files it deleted."""
    schema = pa.schema([("member", pa.string()), ("n", pa.int64())])
    DeltaTable.create(str(tmp_path / "share_state"), schema,
                      configuration={"delta.logRetentionDuration": "interval 60 seconds"})  # as earlier releases did
    table = StateTable(str(tmp_path), "share_state", schema)
    for n in range(4):
        table.commit(lambda s, n=n: Write(pa.table({"member": ["a"], "n": [n]}, schema=schema),
                                          mode="overwrite", predicate="member = 'a'"))
    table.maintain()
    delta = DeltaTable(table.uri)
    assert delta.metadata().configuration["delta.deletedFileRetentionDuration"] == "interval 0 seconds"
    assert delta.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True) == [], \
        "the checkpoint kept the tombstones of files already deleted"
    assert [r["n"] for r in table.snapshot().rows()] == [3]

def _last_checkpoint(table_dir: Path) -> int:
    """The version of a table's latest checkpoint, -1 without one."""
    hint = table_dir / "_delta_log" / "_last_checkpoint"
    return int(json.loads(hint.read_text())["version"]) if hint.exists() else -1


def _removed_up_to(table_dir: Path, version: int) -> set[str]:
    """The data files the commits up to ``version`` removed (read from the commits themselves)."""
    removed = set()
    for v in range(version + 1):
        for line in (table_dir / "_delta_log" / f"{v:020d}.json").read_text().splitlines():
            if "remove" in (action := json.loads(line)):
                removed.add(action["remove"]["path"])
    return removed
