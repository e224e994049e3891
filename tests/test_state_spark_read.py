"""Every state table is readable by Spark's own Delta reader (delta-spark), with the contents delta-rs wrote.

The state is written with delta-rs (the driver's Python worker has no SparkSession); users and
dashboards read it with ``spark.read.format("delta")``. The delta-spark jars are part of the
test setup (``make jars``, loaded by ``sharegroup-testing/sharegroup_testing/spark.py``): without them these tests fail.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from state_store import LedgerEntry, OffsetRange, StateStore
from state_store.delta_table import StateTable
from state_store.progress import COUNTERS

pytestmark = pytest.mark.spark


DEAD_LETTERS = [
    {"key": b"k-2", "value": b"not json", "headers": [("h", b"1"), ("trace", b"\x00\xff")], "topic": "t",
     "partition": 0, "offset": 2, "delivery_count": 2, "reason": "invalid JSON", "time": 1_700_000_000_123,
     "group_id": "q"},
    {"key": None, "value": b"\x00\x01binary", "headers": [], "topic": "t", "partition": 1, "offset": 7,
     "delivery_count": 6, "reason": "max deliveries exceeded", "time": 0, "group_id": "q"},
]


def _spark_reads(spark: SparkSession, table: StateTable) -> list[dict[str, Any]]:
    """The table's rows as Spark's Delta reader returns them, after checking they are what delta-rs wrote:
    the same columns, the Spark types of the declared Arrow schema, and equal rows."""
    frame = spark.read.format("delta").load(table.uri)
    expected_types = [(f.name, f.dataType) for f in from_arrow_schema(table.schema)]
    assert [(f.name, f.dataType) for f in frame.schema] == expected_types, table.name
    # toArrow keeps binary as bytes and timestamps as UTC instants (in the session's time zone)
    seen_by_spark = _sorted(frame.toArrow().to_pylist())
    written = _sorted(table.snapshot().table().to_pylist())
    assert written, f"the {table.name} table is empty: nothing to compare"
    assert seen_by_spark == written, table.name
    return seen_by_spark


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in a stable order (lists and structs make Arrow's own sort unusable)."""
    return sorted(rows, key=repr)


def _by_record(row: tuple) -> tuple:
    return row[3:6]  # topic, partition, offset


def _expected_dead_letters() -> list[tuple]:
    rows = [(r["key"], r["value"], [(k, v) for k, v in r["headers"]], r["topic"], r["partition"], r["offset"],
             r["delivery_count"], r["reason"], datetime.fromtimestamp(r["time"] / 1000, timezone.utc))
            for r in DEAD_LETTERS]
    return sorted(rows, key=_by_record)


def _dead_letters(rows: list[dict[str, Any]]) -> list[tuple]:
    tuples = [(r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]], r["topic"], r["partition"],
               r["offset"], r["delivery_count"], r["reason"], r["time"].astimezone(timezone.utc)) for r in rows]
    return sorted(tuples, key=_by_record)


def test_spark_reads_every_state_table(delta_spark, tmp_path):
    spark = delta_spark
    store = StateStore(str(tmp_path / "state"))
    epoch_1 = LedgerEntry("q", 1, (OffsetRange("t", 0, 0, 2, ((1, 1),), ((2, 2),)),), "m", 1_000, 31_000, "ACQUIRED")
    epoch_2 = LedgerEntry("q", 2, (OffsetRange("t", 0, 3, 4), OffsetRange("t", 1, 7, 7, (), ((7, 6),))),
                          "m", 2_000, 32_000, "ACQUIRED")
    store.ledger.write_epoch(epoch_1)
    store.ledger.write_epoch(epoch_2)
    store.ledger.set_status("q", [1], "ACKED")
    store.decisions.record("q", 1, [("t", 0, 2, "REJECT", "invalid JSON"), ("t", 0, 0, "RELEASE", None)])
    store.dead_letters.append(DEAD_LETTERS)
    store.progress.append("q", "run-1", {name: i for i, name in enumerate(COUNTERS)})
    store.progress.append("q", "run-1", dict.fromkeys(COUNTERS, 9), left=True)
    store.share_state.acquire("t", 0, "m", 2, now_ms=0, log_end_offset=3)
    store.share_state.acquire("t", 1, "m", 5, now_ms=0, log_end_offset=8)

    seen = {table.name: _spark_reads(spark, table)
            for table in (store.ledger.table, store.decisions.table, store.dead_letters.table,
                          store.progress.table, store.share_state.table)}
    assert {name: len(rows) for name, rows in seen.items()} == {
        "ledger": 3, "decisions": 2, "dead_letters": 2, "progress": 2, "share_state": 2}

    # and the values are what was written, not merely what delta-rs reads back
    ledger = {(r["epoch"], r["kind"]): r for r in seen["ledger"]}
    assert sorted(ledger) == [(1, "ENTRY"), (1, "STATUS"), (2, "ENTRY")]
    assert ledger[1, "STATUS"]["status"] == "ACKED" and ledger[2, "ENTRY"]["status"] == "ACQUIRED"
    ranges = {epoch: [(r["topic"], r["partition"], r["first_offset"], r["last_offset"], r["gaps"], r["delivery_counts"])
                      for r in ledger[epoch, "ENTRY"]["ranges"]] for epoch in (1, 2)}
    # gaps as inclusive runs, delivery counts as (position in the range, count) where not 1
    assert ranges == {1: [("t", 0, 0, 2, [1, 1], [2, 2])], 2: [("t", 0, 3, 4, [], []), ("t", 1, 7, 7, [], [0, 6])]}
    assert [(ledger[e, "ENTRY"]["query_id"], ledger[e, "ENTRY"]["member_id"], ledger[e, "ENTRY"]["acquired_at_ms"],
             ledger[e, "ENTRY"]["lock_deadline_ms"]) for e in (1, 2)] == [("q", "m", 1_000, 31_000),
                                                                          ("q", "m", 2_000, 32_000)]

    decisions = sorted((r["query_id"], r["epoch"], r["topic"], r["partition"], r["offset"], r["decision"], r["reason"])
                       for r in seen["decisions"])
    assert decisions == [("q", 1, "t", 0, 0, "RELEASE", None), ("q", 1, "t", 0, 2, "REJECT", "invalid JSON")]

    assert _dead_letters(seen["dead_letters"]) == _expected_dead_letters()

    progress = sorted(seen["progress"], key=lambda r: r["commit_version"])
    assert [(r["query_id"], r["run_id"], r["left_at_ms"] is None) for r in progress] == [("q", "run-1", True),
                                                                                        ("q", "run-1", False)]
    assert [[r[name] for name in COUNTERS] for r in progress] == [list(range(len(COUNTERS))), [9] * len(COUNTERS)]

    share_state = {r["partition"]: r for r in seen["share_state"]}
    assert sorted(share_state) == [0, 1]
    for partition, acquired in {0: 2, 1: 5}.items():  # SPEO is the first offset not yet in flight
        row = share_state[partition]
        assert (row["topic"], row["spso"], row["speo"]) == ("t", 0, acquired), partition
        assert [(b["first_offset"], b["last_offset"], b["state"], b["delivery_count"], b["member_id"],
                 b["lock_deadline_ms"]) for b in row["batches"]] == [(0, acquired - 1, "ACQUIRED", 1, "m", 30_000)]


def test_spark_reads_dead_letters_at_their_own_location(delta_spark, tmp_path):
    spark = delta_spark
    elsewhere = tmp_path / "lake" / "rejected_orders"
    store = StateStore(str(tmp_path / "state"), dead_letter_location=str(elsewhere))
    assert store.dead_letters.table.uri == str(elsewhere)
    store.dead_letters.append(DEAD_LETTERS)
    store.dead_letters.append(DEAD_LETTERS[:1])  # a repeated reject (after a restart) is not a second row

    assert _dead_letters(_spark_reads(spark, store.dead_letters.table)) == _expected_dead_letters()
    assert not (tmp_path / "state" / "dead_letters").exists(), "dead letters must not also land under stateLocation"
