"""Dead letters are the user's data: readers of older versions survive maintenance, and groups sharing a table
each keep their rows.

State tables are vacuumed at once and keep one minute of log: nothing but the source reads their past.
The dead letters are read by users, often as a Delta stream, so they keep Delta's retention.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sharegroup_source.driver.acknowledger import Acknowledger
from state_store import StateStore
from state_store.dead_letters import DEAD_LETTERS_SCHEMA
from state_store.progress import COUNTERS
from tests.driver_parts import run_context

TWO_DAYS_S = 2 * 24 * 3600


def rejected(offset: int, group: str = "g", reason: str = "bad") -> dict[str, Any]:
    return {"key": f"k{offset}".encode(), "value": f"v{offset}".encode(), "headers": [("h", b"1")], "topic": "orders",
            "partition": 0, "offset": offset, "delivery_count": 1, "reason": reason, "time": 1_700_000_000_000,
            "group_id": group}


def age_files(path: Path, seconds: int) -> None:
    """Make every file of a table look ``seconds`` older, as if maintenance ran that much later."""
    for file in path.rglob("*"):
        if file.is_file():
            stat = file.stat()
            os.utime(file, (stat.st_atime - seconds, stat.st_mtime - seconds))


def offsets(table: pa.Table) -> list[int]:
    return sorted(table.column("offset").to_pylist())


@pytest.fixture(params=["under_state_location", "at_dead_letter_location"])
def store(request, tmp_path: Path) -> StateStore:
    if request.param == "under_state_location":
        return StateStore(str(tmp_path / "state"))
    return StateStore(str(tmp_path / "state"), dead_letter_location=str(tmp_path / "lake" / "rejected"))


def test_a_reader_of_an_old_version_survives_maintenance(store: StateStore) -> None:
    store.dead_letters.append([rejected(1)])
    store.dead_letters.append([rejected(2)])  # two files: maintenance compacts them into one
    uri = store.dead_letters.table.uri
    version = DeltaTable(uri).version()
    opened = DeltaTable(uri, version=version)  # a reader holding the version before maintenance
    before = opened.to_pyarrow_table()
    assert offsets(before) == [1, 2]

    store.maintain()
    assert offsets(opened.to_pyarrow_table()) == [1, 2]
    assert offsets(DeltaTable(uri, version=version).to_pyarrow_table()) == [1, 2]

    for offset in range(3, 6):  # more appends, maintenance after each, and once more two days later
        store.dead_letters.append([rejected(offset)])
        store.maintain()
    age_files(Path(uri), TWO_DAYS_S)
    store.maintain()

    assert offsets(DeltaTable(uri, version=version).to_pyarrow_table()) == [1, 2]
    assert offsets(DeltaTable(uri, version=version - 1).to_pyarrow_table()) == [1]
    assert offsets(DeltaTable(uri).to_pyarrow_table()) == [1, 2, 3, 4, 5]


def test_dead_letters_are_compacted_once_they_have_many_files(store: StateStore) -> None:
    for offset in range(31):
        store.dead_letters.append([rejected(offset)])
    name = store.dead_letters.table.name
    assert store.maintain()[name].files == 31  # compacting at every run would keep a copy per run for 7 days
    store.dead_letters.append([rejected(31)])
    assert store.maintain()[name].files == 1
    assert offsets(store.dead_letters.read()) == list(range(32))


def test_state_tables_keep_their_short_retention(tmp_path: Path) -> None:
    """The user-data retention is the dead letters' alone: internal state is still vacuumed at once."""
    store = StateStore(str(tmp_path / "state"))
    store.progress.append("q", "run", dict.fromkeys(COUNTERS, 1))
    store.dead_letters.append([rejected(1)])
    progress_version = DeltaTable(store.progress.table.uri).version()
    store.progress.append("q", "run", dict.fromkeys(COUNTERS, 2))
    store.dead_letters.append([rejected(2)])
    store.maintain()
    config = {name: DeltaTable(str(tmp_path / "state" / name)).metadata().configuration
              for name in ("progress", "dead_letters")}
    assert config["progress"]["delta.logRetentionDuration"] == "interval 60 seconds"
    assert config["dead_letters"]["delta.logRetentionDuration"] == "interval 30 days"
    with pytest.raises(OSError):  # the file of that version is gone
        DeltaTable(store.progress.table.uri, version=progress_version).to_pyarrow_table()


def _payload_is_at_hand(positions: pa.Table) -> pa.Table:
    raise AssertionError(f"records with their payload need no read from the log: {positions}")


def test_two_groups_keep_their_rows_in_one_dead_letter_location(tmp_path: Path) -> None:
    shared = str(tmp_path / "lake" / "rejected")
    records = pa.table({
        "key": [b"k1", b"k2"], "value": [b"v1", b"v2"],
        "topic": ["orders", "orders"], "partition": pa.array([0, 0], pa.int32()), "offset": [10, 11],
        "headers": pa.array([[], [{"key": "h", "value": b"x"}]],
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "deliveryCount": pa.array([1, 2], pa.int32()),
    })
    reasons = {("orders", 0, 10): "invalid JSON"}
    for group in ("group-a", "group-b"):
        store = StateStore(str(tmp_path / group), dead_letter_location=shared)
        acks = Acknowledger(None, run_context(store, group_id=group), read_back=_payload_is_at_hand)  # type: ignore[arg-type]
        acks.dead_letter(records, reasons)
        acks.dead_letter(records, reasons)  # the same epoch settled again after a restart

    rows = StateStore(str(tmp_path / "reader"), dead_letter_location=shared).dead_letters.read().to_pylist()
    assert sorted((r["group_id"], r["topic"], r["partition"], r["offset"], r["value"], r["reason"]) for r in rows) == [
        ("group-a", "orders", 0, 10, b"v1", "invalid JSON"), ("group-b", "orders", 0, 10, b"v1", "invalid JSON")]


def test_append_is_idempotent_per_group(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state"))
    store.dead_letters.append([rejected(1, "a"), rejected(1, "b"), rejected(1, "a", reason="twice in one call")])
    store.dead_letters.append([rejected(1, "b", reason="again"), rejected(2, "b")])
    rows = sorted((r["group_id"], r["offset"], r["reason"]) for r in store.dead_letters.read().to_pylist())
    assert rows == [("a", 1, "bad"), ("b", 1, "bad"), ("b", 2, "bad")]
    with pytest.raises(ValueError, match="group_id"):
        store.dead_letters.append([{**rejected(3), "group_id": None}])
    with pytest.raises(ValueError, match="group_id"):
        store.dead_letters.append(pa.table({"topic": ["orders"], "partition": [0], "offset": [3]}))


LEGACY_SCHEMA = pa.schema([f for f in DEAD_LETTERS_SCHEMA if f.name != "group_id"])


def test_a_table_from_an_earlier_version_gains_the_group_column(tmp_path: Path) -> None:
    """A dead-letter table written before ``group_id`` existed (one minute of log, no group) is upgraded in place."""
    shared = tmp_path / "lake" / "rejected"
    DeltaTable.create(str(shared), LEGACY_SCHEMA, configuration={"delta.logRetentionDuration": "interval 60 seconds"})
    legacy = {k: v for k, v in rejected(1).items() if k != "group_id"}
    write_deltalake(str(shared), pa.Table.from_pylist([{**legacy, "headers": []}], schema=LEGACY_SCHEMA),
                    mode="append")
    legacy_version = DeltaTable(str(shared)).version()

    store = StateStore(str(tmp_path / "state"), dead_letter_location=str(shared))
    assert [(r["offset"], r["group_id"]) for r in store.dead_letters.read().to_pylist()] == [(1, None)]
    # a legacy row stands for every group: the record re-rejected after the upgrade is not kept twice
    store.dead_letters.append([rejected(1), rejected(2)])
    store.maintain()
    rows = sorted((r["offset"], r["group_id"]) for r in store.dead_letters.read().to_pylist())
    assert rows == [(1, None), (2, "g")]

    dt = DeltaTable(str(shared))
    assert "group_id" in dt.schema().to_arrow().names
    assert dt.metadata().configuration["delta.logRetentionDuration"] == "interval 30 days"
    protocol = dt.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    assert not protocol.reader_features and not protocol.writer_features
    age_files(shared, TWO_DAYS_S)
    store.maintain()
    assert offsets(DeltaTable(str(shared), version=legacy_version).to_pyarrow_table()) == [1]
    fresh = StateStore(str(tmp_path / "other"), dead_letter_location=str(shared))
    assert sorted((r["offset"], r["group_id"]) for r in fresh.dead_letters.read().to_pylist()) == rows


@pytest.mark.spark
def test_a_delta_stream_of_the_dead_letters_survives_maintenance(delta_spark, tmp_path: Path) -> None:
    spark = delta_spark
    store = StateStore(str(tmp_path / "state"))
    store.dead_letters.append([rejected(1), rejected(2)])
    checkpoint = str(tmp_path / "stream-checkpoint")
    seen: list[list[int]] = []

    def run_stream() -> list[int]:
        batches: list[int] = []
        query = (spark.readStream.format("delta").load(store.dead_letters.table.uri)
                 .writeStream.foreachBatch(lambda df, _: batches.extend(r["offset"] for r in df.collect()))
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        started = time.monotonic()
        query.awaitTermination(120)
        assert time.monotonic() - started < 120, "the stream did not finish"
        assert query.exception() is None, query.exception()
        return sorted(batches)

    seen.append(run_stream())
    store.dead_letters.append([rejected(3)])
    store.dead_letters.append([rejected(4, "other")])
    store.maintain()
    age_files(Path(store.dead_letters.table.uri), TWO_DAYS_S)
    store.maintain()
    seen.append(run_stream())
    assert seen == [[1, 2], [3, 4]]


def test_dead_letters_are_listed_from_each_location_that_keeps_them(tmp_path: Path, capsys) -> None:
    """A query's stateLocation, and its deadLetterLocation given itself; one group's alone, the newest N, the payload
    only when asked for (bytes in base64 in JSON, as text in the table where they are UTF-8)."""
    from sharegroup_source import cli
    from sharegroup_source.admin import read_dead_letters

    store = StateStore(str(tmp_path / "state"))
    store.dead_letters.append([{**rejected(1, "a"), "time": 1_700_000_000_000},
                               {**rejected(2, "b"), "time": 1_700_000_001_000, "value": b"\xff\x00"},
                               {**rejected(3, "a", reason="max deliveries exceeded"), "time": 1_700_000_002_000}])
    listed = read_dead_letters(str(tmp_path / "state"))
    assert [(d.group_id, d.offset, d.reason, d.value) for d in listed] == [
        ("a", 1, "bad", None), ("b", 2, "bad", None), ("a", 3, "max deliveries exceeded", None)]
    assert [d.offset for d in read_dead_letters(str(tmp_path / "state"), group="a", limit=1)] == [3]

    assert cli.main(["dead-letters", str(tmp_path / "state"), "--json", "--payload", "--group", "b"]) == 0
    (letter,) = json.loads(capsys.readouterr().out)
    assert letter == {"group_id": "b", "topic": "orders", "partition": 0, "offset": 2, "delivery_count": 1,
                      "reason": "bad", "time": "2023-11-14T22:13:21Z", "key_base64": "azI=", "value_base64": "/wA=",
                      "headers": [{"key": "h", "value_base64": "MQ=="}]}
    assert cli.main(["dead-letters", str(tmp_path / "state"), "--payload"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "OFFSET", "DELIVERIES", "TIME", "REASON", "KEY", "VALUE"]
    assert lines[1].split()[-2:] == ["k1", "v1"] and lines[2].split()[-1] == repr(b"\xff\x00"), lines

    elsewhere = StateStore(str(tmp_path / "state2"), dead_letter_location=str(tmp_path / "letters"))
    elsewhere.dead_letters.append([rejected(7)])
    assert [d.offset for d in read_dead_letters(str(tmp_path / "letters"))] == [7]
    assert cli.main(["dead-letters", str(tmp_path / "missing")]) == 1
    assert capsys.readouterr().err == (f"sharegroup: error: {tmp_path / 'missing'}: no dead letters and no share-group "
                                       "state here (give a groupLocation, a query's stateLocation or its "
                                       "deadLetterLocation)\n")
