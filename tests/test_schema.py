"""records_to_arrow builds its columns in bulk; these tests hold it to a plain per-record reading.

The reference below reads each record one field at a time, the obvious way. The fast path
must give the same table, down to the bytes of its Arrow IPC stream, with and without
headers, with delivery counts from the records, from the caller, or from neither.
``by_partition``, which groups an acquisition's runs without sorting, is held to a plain sort.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pyarrow as pa
import pytest
from confluent_kafka import Message

from sharegroup_source.schema import arrow_schema, by_partition, records_to_arrow, to_ipc


def _reference(records: Sequence[Message], epoch: int, include_headers: bool,
               delivery_counts: Sequence[int] | None = None) -> pa.Table:
    rows = []
    for i, r in enumerate(records):
        kind, millis = r.timestamp()
        headers = r.headers() or []
        pairs = list(headers.items()) if isinstance(headers, dict) else list(headers)
        row = {"key": r.key(), "value": r.value(), "topic": r.topic(), "partition": r.partition(),
               "offset": r.offset(), "timestamp": None if kind == 0 else millis * 1000, "timestampType": kind - 1,
               "deliveryCount": (r.delivery_count() or 1) if delivery_counts is None else delivery_counts[i],
               "epoch": epoch}
        if include_headers:
            row["headers"] = [{"key": k, "value": v} for k, v in pairs]
        rows.append(row)
    schema = arrow_schema(include_headers)
    columns = [pa.array([row[f.name] for row in rows], pa.int64() if f.name == "timestamp" else f.type)
               for f in schema]
    columns[schema.get_field_index("timestamp")] = columns[schema.get_field_index("timestamp")].cast(
        schema.field("timestamp").type)
    return pa.Table.from_arrays(columns, schema=schema)


def _records(with_headers: bool, delivery_counts: bool) -> list[Message]:
    records = []
    for i in range(7):
        fields = {"topic": "t-a" if i < 4 else "t-b", "partition": i % 3, "offset": 100 + i,
                  "key": None if i == 2 else f"k{i}".encode(), "value": None if i == 5 else b"v" * i,
                  "timestamp": (0, 0) if i == 3 else (1 + i % 2, 1_700_000_000_000 + i)}
        if with_headers and i in (1, 4):
            fields["headers"] = [("h", b"x"), ("empty", None)] if i == 1 else [("only", b"\x00\x01")]
        if delivery_counts:
            fields["delivery_count"] = 1 + i % 4
        records.append(Message(**fields))
    return records


def _same(got: pa.Table, want: pa.Table) -> None:
    assert got.schema == want.schema
    assert got.equals(want), (got.to_pydict(), want.to_pydict())
    assert to_ipc(got) == to_ipc(want), "same values, different bytes"


@pytest.mark.parametrize("include_headers", [False, True])
@pytest.mark.parametrize("with_headers", [False, True])
@pytest.mark.parametrize("own_counts", [False, True])
def test_records_to_arrow_matches_a_per_record_reading(include_headers, with_headers, own_counts):
    records = _records(with_headers, own_counts)
    _same(records_to_arrow(records, 9, include_headers), _reference(records, 9, include_headers))


def test_delivery_counts_given_by_the_caller_win():
    records = _records(with_headers=True, delivery_counts=True)
    counts = [5, 4, 3, 2, 1, 2, 3]
    _same(records_to_arrow(records, 2, True, delivery_counts=counts), _reference(records, 2, True, counts))


def test_a_dict_of_headers_is_read_as_pairs():
    records = [Message(topic="t", partition=0, offset=0, headers={"a": b"1", "b": None}),
               Message(topic="t", partition=0, offset=1)]
    table = records_to_arrow(records, 1, include_headers=True)
    assert table.column("headers").to_pylist() == [[{"key": "a", "value": b"1"}, {"key": "b", "value": None}], []]
    _same(table, _reference(records, 1, True))


def test_no_records_give_an_empty_table():
    _same(records_to_arrow([], 3, True), arrow_schema(True).empty_table())
    _same(records_to_arrow([], 3, False), arrow_schema(False).empty_table())


@pytest.mark.parametrize("include_headers", [False, True])
def test_records_of_one_partition_named_by_the_caller_give_the_same_table(include_headers):
    records = [r for r in _records(with_headers=True, delivery_counts=False)
               if (r.topic(), r.partition()) == ("t-a", 1)]
    assert len(records) == 1
    records += [Message(topic="t-a", partition=1, offset=200 + i, value=b"x" * i, timestamp=(1, 5 + i))
                for i in range(3)]
    _same(records_to_arrow(records, 4, include_headers, position=("t-a", 1)), _reference(records, 4, include_headers))
    _same(records_to_arrow([], 4, include_headers, position=("t-a", 1)), arrow_schema(include_headers).empty_table())


def _sorted_reference(table: pa.Table) -> list[tuple[str, int, list[int]]]:
    rows = sorted(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))
    groups: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in rows:
        groups.setdefault((topic, partition), []).append(offset)
    return [(topic, partition, offsets) for (topic, partition), offsets in groups.items()]


@pytest.mark.parametrize("order", ["runs", "interleaved", "shuffled"])
def test_by_partition_groups_rows_in_topic_partition_and_offset_order(order):
    """An acquisition's runs are joined without a sort; rows in any other order (two runs of one partition
    that interleave, or thousands of runs) are sorted: each way gives every row once, grouped and in order."""
    rng = random.Random(order)
    runs = [("b", 1, range(50, 80)), ("a", 0, range(0, 40)), ("b", 1, range(10, 50)), ("a", 2, range(5, 9)),
            ("b", 0, range(7, 8))]
    if order == "interleaved":
        runs.append(("a", 0, range(20, 60, 2)))  # offsets between those of an earlier run of a-0
    rows = [(topic, partition, offset) for topic, partition, offsets in runs for offset in offsets]
    if order == "shuffled":
        rows = [("t", rng.randrange(30), offset) for offset in rng.sample(range(100_000), 5_000)]
    half = len(rows) // 2  # two chunks: a table made of several record batches
    table = pa.concat_tables([pa.table({"topic": pa.array([r[0] for r in part], pa.string()),
                                        "partition": pa.array([r[1] for r in part], pa.int32()),
                                        "offset": pa.array([r[2] for r in part], pa.int64())})
                              for part in (rows[:half], rows[half:])])

    grouped = [(topic, partition, rows.column("offset").to_pylist(), set(rows.column("topic").to_pylist()),
                set(rows.column("partition").to_pylist())) for topic, partition, rows in by_partition(table)]

    assert [(t, p, o) for t, p, o, _, _ in grouped] == _sorted_reference(table)
    assert all(topics == {t} and partitions == {p} for t, p, _, topics, partitions in grouped)
    assert list(by_partition(table.slice(0, 0))) == []
