"""Executor side: turn one InputPartition into Arrow RecordBatches.

A fresh epoch's partition carries its payload, so reading it touches no network. A
replayed epoch's partition carries offsets only; a plain consumer reads them back. No
share consumer is ever opened here: acquisition locks live on the driver's member.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from sharegroup_source.errors import DataLossError
from sharegroup_source.kafka.offset_reader import OffsetRangeReader, RangeResult
from sharegroup_source.redaction import redact
from sharegroup_source.schema import from_ipc, records_to_arrow
from state_store import OffsetRange

__all__ = ["PayloadPartition", "ReplayPartition", "read_partition"]


@dataclass
class PayloadPartition(InputPartition):
    """Records acquired by the driver in this run, as Arrow IPC bytes."""

    epoch: int
    payload: bytes

    def __repr__(self) -> str:
        return f"PayloadPartition(epoch={self.epoch}, bytes={len(self.payload)})"


@dataclass
class ReplayPartition(InputPartition):
    """Records of a ledgered epoch as ranges of one or more topic-partitions, to read back by position: a
    task's size on the wire follows its gaps, not its records. One task reads several partitions' ranges in
    turn on one pooled consumer, since each Spark task costs the Python data source path tens of milliseconds."""

    epoch: int
    ranges: tuple[OffsetRange, ...]
    include_headers: bool
    fail_on_data_loss: bool
    client_config: Mapping[str, str] = field(repr=False)

    def __repr__(self) -> str:
        shown = ", ".join(f"{r.topic}[{r.partition}] {r.first}..{r.last}" for r in self.ranges)
        count = sum(r.record_count for r in self.ranges)
        return f"ReplayPartition(epoch={self.epoch}, {shown} ({count} records), config={redact(self.client_config)})"


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, PayloadPartition):
        yield from from_ipc(partition.payload).to_batches()
    elif isinstance(partition, ReplayPartition):
        yield from _replay(partition).to_batches()
    else:
        raise TypeError(f"not a sharegroup partition: {partition!r}")


def _replay(part: ReplayPartition) -> pa.Table:
    """The task's ranges, read at once: their partitions' fetches go out together."""
    with OffsetRangeReader(part.client_config, delivered=True) as reader:
        results = reader.read_many({(held.topic, held.partition): held.offsets() for held in part.ranges})
    return pa.concat_tables([_replay_range(results[held.topic, held.partition], part, held) for held in part.ranges])


def _replay_range(result: RangeResult, part: ReplayPartition, held: OffsetRange) -> pa.Table:
    if result.missing and part.fail_on_data_loss:
        shown = ", ".join(map(str, result.missing[:10])) + (" ..." if len(result.missing) > 10 else "")
        raise DataLossError(
            f"epoch {part.epoch}: {len(result.missing)} record(s) of {held.topic}[{held.partition}] recorded in the "
            f"ledger are no longer in the log (offsets {shown}); set failOnDataLoss=false to skip them"
        )
    # a plain consumer's records have no delivery count: 1 unless the ledger says otherwise (below)
    table = records_to_arrow(result.records, part.epoch, part.include_headers, np.ones(len(result.records), np.int32),
                             (held.topic, held.partition))
    if not held.redelivered:
        return table
    # ascending: a partition's records arrive in log order, and a read resumed past the log's start starts above
    offsets = table.column("offset").to_numpy()
    counts = np.ones(len(offsets), np.int32)
    again, times = np.array(held.redelivered, np.int64).T
    at = np.searchsorted(offsets, again)
    read = at < len(offsets)
    read[read] = offsets[at[read]] == again[read]
    counts[at[read]] = times[read]
    return table.set_column(table.schema.get_field_index("deliveryCount"), "deliveryCount", pa.array(counts))
