"""Every persisted format says which version it is: a release reads what earlier releases wrote (no version: 1) and
refuses, in one line naming both versions and what to do, what a newer release wrote; it never reads it as another.

The formats: each state table (its table property ``sharegroup.formatVersion``), the source's offset in Spark's
checkpoint (``"v"``), and a ledger row's offset ranges (``ranges_encoding``). No Spark, no Kafka.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sharegroup_source.driver.checkpoint_check import CheckpointCheck
from sharegroup_source.driver.checkpoint_logs import CommitLog, OffsetLog
from sharegroup_source.driver.stream_reader import CheckpointStartReader
from sharegroup_source.errors import StateMismatchError
from sharegroup_source.offset import OFFSET_FORMAT, EpochOffset
from sharegroup_source.options import SourceOptions
from state_store import LedgerEntry, OffsetRange, StateStore, StateStoreError
from state_store.dead_letters import DEAD_LETTERS_SCHEMA
from state_store.decisions import DECISIONS_SCHEMA
from state_store.format_version import FormatVersion
from state_store.group import MEMBERS_SCHEMA, SETTINGS_SCHEMA, GroupStore
from state_store.ledger import LEDGER_SCHEMA, RANGES_ENCODING, entry_row
from state_store.progress import COUNTERS, PROGRESS_ADDED_COLUMNS, PROGRESS_FORMAT, PROGRESS_SCHEMA
from state_store.share_state import SHARE_STATE_SCHEMA
from state_store.table_commit import Write
from state_store.table_open import FORMAT_PROPERTY, TABLE_FORMAT
from state_store.table_retention import USER_DATA_RETENTION, Retention

NEWER_TABLE = ("is format version 99, but this release of sharegroup-source reads {reads}: a newer release wrote it; "
               "upgrade to that release or a later one, or start afresh on a new location")
STATE_TABLES = ("ledger", "decisions", "share_state", "dead_letters", "progress")
GROUP_TABLES = ("settings", "share_state", "members")
#: each table's schema as the release before versions created it (progress: without the columns version 2 added)
FIRST_SCHEMAS = {"ledger": LEDGER_SCHEMA, "decisions": DECISIONS_SCHEMA, "share_state": SHARE_STATE_SCHEMA,
                 "dead_letters": DEAD_LETTERS_SCHEMA, "settings": SETTINGS_SCHEMA, "members": MEMBERS_SCHEMA,
                 "progress": pa.schema([f for f in PROGRESS_SCHEMA if f.name not in PROGRESS_ADDED_COLUMNS])}
#: the format version this release writes, per table
CURRENT = {"progress": str(PROGRESS_FORMAT.current)}


def entry(epoch: int = 1) -> LedgerEntry:
    return LedgerEntry("q", epoch, (OffsetRange("orders", 0, 10, 14, gaps=((12, 12),), redelivered=((13, 2),)),),
                       "run-1", 1_000, 31_000, "ACQUIRED")


def write_every_table(state: Path, group: Path) -> None:
    """A row in every table of a query's state and of a Delta group, as a run and a worker write them."""
    store = StateStore(str(state))
    store.ledger.write_epoch(entry())
    store.decisions.record("q", 1, [("orders", 0, 10, "REJECT", "bad")])
    store.share_state.acquire("orders", 0, "a", 1, now_ms=0, log_end_offset=1)
    store.dead_letters.append([{"topic": "orders", "partition": 0, "offset": 10, "value": b"v", "group_id": "q"}])
    store.progress.append("q", "run-1", dict.fromkeys(COUNTERS, 0))
    members = GroupStore.open(str(group), "q", {})
    members.join("worker-1", "worker")
    members.share_state.acquire("orders", 0, "worker-1", 1, now_ms=0, log_end_offset=1)


def read_every_table(state: Path, group: Path) -> None:
    """Read every table afresh, as a new run and a new member do when they start."""
    store = StateStore(str(state))
    assert store.ledger.get("q", 1) == entry()
    assert store.decisions.for_epochs("q", [1]) == {("orders", 0, 10): ("REJECT", "bad")}
    assert store.share_state.partition("orders", 0) is not None
    assert store.dead_letters.read().column("offset").to_pylist() == [10]
    assert store.progress.totals("q")["runs"] == 1
    members = GroupStore.existing(str(group))
    assert [m.member_id for m in members.members()] == ["worker-1"]
    assert members.share_state.partition("orders", 0) is not None


def table_paths(state: Path, group: Path) -> list[Path]:
    return [state / name for name in STATE_TABLES] + [group / name for name in GROUP_TABLES]


def set_format_version(table: Path, value: str) -> None:
    """What a newer release (or a hand) writes into a table's properties."""
    DeltaTable(str(table)).alter.set_table_properties({FORMAT_PROPERTY: value}, raise_if_not_exists=False)


def test_a_new_table_carries_the_current_format_version_and_reads_back(tmp_path: Path) -> None:
    state, group = tmp_path / "state", tmp_path / "group"
    write_every_table(state, group)
    assert (TABLE_FORMAT.current, PROGRESS_FORMAT.current) == (1, 3)

    def versions() -> dict[Path, str]:
        return {t: DeltaTable(str(t)).metadata().configuration[FORMAT_PROPERTY] for t in table_paths(state, group)}

    assert versions() == {t: CURRENT.get(t.name, "1") for t in table_paths(state, group)}
    read_every_table(state, group)
    StateStore(str(state)).maintain()  # compaction, rewrites, checkpoints keep the property
    GroupStore.existing(str(group)).maintain()
    assert versions() == {t: CURRENT.get(t.name, "1") for t in table_paths(state, group)}
    read_every_table(state, group)


def test_a_table_without_a_version_is_version_1_and_stays_as_the_previous_release_made_it(tmp_path: Path) -> None:
    """The previous release created its tables with their retention only: they read, and take writes, as before;
    the progress table gains the columns of its versions 2 and 3 with this release's first write, and says so."""
    state, group = tmp_path / "state", tmp_path / "group"
    for table in table_paths(state, group):
        retention = USER_DATA_RETENTION if table.name == "dead_letters" else Retention.state()
        DeltaTable.create(str(table), FIRST_SCHEMAS[table.name], configuration=retention.configuration())
    write_every_table(state, group)
    for table in table_paths(state, group):
        assert DeltaTable(str(table)).metadata().configuration.get(FORMAT_PROPERTY) == CURRENT.get(table.name), table
    assert [f.name for f in DeltaTable(str(state / "progress")).schema().fields] == PROGRESS_SCHEMA.names
    assert TABLE_FORMAT.read(None, "a table", "do something") == 1
    read_every_table(state, group)
    StateStore(str(state)).ledger.write_epoch(entry(2))
    assert StateStore(str(state)).ledger.get("q", 2) == entry(2)
    assert FORMAT_PROPERTY not in DeltaTable(str(state / "ledger")).metadata().configuration


@pytest.mark.parametrize("table", [f"state/{t}" for t in STATE_TABLES] + [f"group/{t}" for t in GROUP_TABLES])
def test_a_table_of_a_newer_format_version_is_refused_in_one_line(tmp_path: Path, table: str) -> None:
    state, group = tmp_path / "state", tmp_path / "group"
    write_every_table(state, group)
    set_format_version(tmp_path / table, "99")
    version = DeltaTable(str(tmp_path / table)).version()
    with pytest.raises(StateStoreError) as refused:
        read_every_table(state, group)
    name = table.split("/")[1]
    reads = "format versions 1 to 3" if name == "progress" else "format version 1 only"
    assert str(refused.value) == f"the {name} table at {tmp_path / table} {NEWER_TABLE.format(reads=reads)}"
    with pytest.raises(StateStoreError, match="is format version 99"):  # nor does this release write into it
        write_every_table(state, group)
    assert DeltaTable(str(tmp_path / table)).version() == version


def test_the_version_is_read_before_the_schema(tmp_path: Path) -> None:
    """A newer release's ledger may well have other columns: the refusal names the version, not the schema."""
    write_deltalake(str(tmp_path / "ledger"), pa.table({"id": [1]}))
    set_format_version(tmp_path / "ledger", "2")
    with pytest.raises(StateStoreError) as refused:
        StateStore(str(tmp_path)).ledger.entries("q")
    assert str(refused.value).startswith(f"the ledger table at {tmp_path / 'ledger'} is format version 2, but this "
                                         "release of sharegroup-source reads format version 1 only: a newer release")


@pytest.mark.parametrize("value", ["0", "x"])
def test_a_table_of_no_version_is_refused(tmp_path: Path, value: str) -> None:
    StateStore(str(tmp_path)).ledger.write_epoch(entry())
    set_format_version(tmp_path / "ledger", value)
    with pytest.raises(StateStoreError) as refused:
        StateStore(str(tmp_path)).ledger.get("q", 1)
    assert str(refused.value) == (
        f"the ledger table at {tmp_path / 'ledger'} is format version {value}, but this release of sharegroup-source "
        "reads format version 1 only: no release of sharegroup-source writes that; start afresh on a new location")


def test_a_version_older_than_a_release_reads_is_refused() -> None:
    """No format has dropped a version yet; the day one does, its refusal reads like this."""
    dropped = FormatVersion(current=3, oldest=2)
    assert [dropped.read(v, "the x", "do y") for v in (2, "3")] == [2, 3]
    with pytest.raises(StateStoreError) as refused:
        dropped.read(None, "the x table", "do y")
    assert str(refused.value) == (
        "the x table is format version 1, but this release of sharegroup-source reads format versions 2 to 3: an "
        "older release wrote it, which this one no longer reads; finish with that release, or do y")


def test_ledger_rows_say_their_ranges_encoding(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path))
    store.ledger.write_epoch(entry(1))
    assert store.ledger.table.snapshot().table().column("ranges_encoding").to_pylist() == [RANGES_ENCODING.current]
    assert (RANGES_ENCODING.oldest, RANGES_ENCODING.current) == (1, 2)  # 1: the first releases' rows (null)
    newer = {**entry_row(entry(2), 0, 0), "ranges_encoding": 3}
    store.ledger.table.commit(lambda _snapshot: Write(pa.Table.from_pylist([newer], schema=LEDGER_SCHEMA)))
    again = StateStore(str(tmp_path)).ledger
    assert again.get("q", 1) == entry(1)
    with pytest.raises(StateStoreError) as refused:
        again.get("q", 2)
    assert str(refused.value) == (
        f"epoch 2 of query 'q' in the ledger table at {tmp_path / 'ledger'} is ranges encoding 3, but this release of "
        "sharegroup-source reads ranges encodings 1 to 2: a newer release wrote it; upgrade to that release or a later "
        "one, or start afresh on a new location")
    with pytest.raises(StateStoreError, match="is ranges encoding 3"):  # a restart reads the unsettled epochs
        again.entries("q", statuses=("ACQUIRED",))


def test_an_offset_without_a_version_is_version_1_and_round_trips_as_it_came() -> None:
    """Spark compares offsets as JSON: one handed back unchanged must be the same text."""
    for previous in ({"epoch": 3, "state": "s"}, {"epoch": 3}):  # the previous release's, and those before state ids
        offset = EpochOffset.of(previous)
        assert (offset.epoch, offset.version) == (3, None)
        assert json.dumps(offset.json()) == json.dumps(previous)
    assert OFFSET_FORMAT.read(None, "an offset", "do something") == 1


def test_an_offset_of_this_release_says_its_version_and_round_trips() -> None:
    written = EpochOffset(3, "s").json()
    assert json.dumps(written) == '{"v": 1, "epoch": 3, "state": "s"}'
    assert EpochOffset.of(written) == EpochOffset(3, "s", 1) and EpochOffset.of(written).json() == written
    assert EpochOffset(0).json() == {"v": 1, "epoch": 0}
    assert EpochOffset.is_ours(written) and EpochOffset.is_ours({"epoch": 3})
    assert not EpochOffset.is_ours({"epoch": 3, "partition": 0})  # another source's


NEWER_OFFSET = ('the sharegroup offset {"v": 99, "epoch": 3, "state": "s", "more": 1} in Spark\'s checkpoint is format '
                "version 99, but this release of sharegroup-source reads format version 1 only: a newer release wrote "
                "it; upgrade to that release or a later one, or start a new checkpoint with a new stateLocation")


def test_an_offset_of_a_newer_version_is_refused_in_one_line() -> None:
    newer = {"v": 99, "epoch": 3, "state": "s", "more": 1}
    assert EpochOffset.is_ours(newer), "a newer offset must be refused, not passed over as another source's"
    with pytest.raises(StateMismatchError) as refused:
        EpochOffset.of(newer)
    assert str(refused.value) == NEWER_OFFSET


def log_batch(checkpoint: Path, batch: int, offset: dict, committed: bool = True) -> None:
    """Spark's offset log entry of one batch (its version line, its metadata, the one source's offset)."""
    for folder in ("offsets", "commits"):
        (checkpoint / folder).mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{json.dumps(offset)}")
    if committed:
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_a_checkpoint_of_a_newer_version_is_refused_before_joining(tmp_path: Path) -> None:
    """Not a warning and a start at Spark's first call: the run stops before it joins the group."""
    checkpoint = tmp_path / "checkpoint"
    store = StateStore(str(tmp_path / "state"))
    log_batch(checkpoint, 0, {"epoch": 2, "state": "s"})  # the previous release's batch
    log_batch(checkpoint, 1, {"v": 1, "epoch": 3, "state": "s"})  # this release's
    assert CommitLog(str(checkpoint)).committed_epoch() == 3
    assert OffsetLog(str(checkpoint)).newest() == (EpochOffset(3, "s"), True)
    log_batch(checkpoint, 2, {"v": 99, "epoch": 3, "state": "s", "more": 1}, committed=False)
    with pytest.raises(StateMismatchError) as refused:
        OffsetLog(str(checkpoint)).newest()  # Spark 4.0 and 4.1 start from it
    assert str(refused.value) == NEWER_OFFSET
    (checkpoint / "commits" / "2").write_text('v1\n{"nextBatchWatermarkMs":0}')
    options = SourceOptions(bootstrap_servers="b", group_id="q", topics=("t",), state_location=store.location,
                            checkpoint_location=str(checkpoint))
    with pytest.raises(StateMismatchError) as refused:
        CheckpointCheck(options, store, CommitLog(str(checkpoint))).before_joining()
    assert str(refused.value) == NEWER_OFFSET


@pytest.mark.parametrize("logged", [{"epoch": 2, "state": "s"}, {"v": 1, "epoch": 2, "state": "s"}],
                         ids=["previous-release", "this-release"])
def test_spark_4_0_and_4_1_run_an_uncommitted_batch_again_with_the_offset_as_logged(tmp_path: Path, logged) -> None:
    """Spark 4.0 and 4.1 re-run the newest logged batch first: its end goes back to Spark as it is in the log."""
    log_batch(tmp_path / "checkpoint", 0, logged, committed=False)
    options = SourceOptions(bootstrap_servers="b", group_id="q", topics=("t",), state_location=str(tmp_path / "state"),
                            checkpoint_location=str(tmp_path / "checkpoint"))
    assert json.dumps(CheckpointStartReader(options).latestOffset()) == json.dumps(logged)
