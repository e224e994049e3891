"""How an epoch becomes Spark's tasks: its payload cut into compressed pieces, or its offset ranges packed.

A fresh epoch's records travel with their tasks (compressed Arrow IPC); an epoch read back
from the log (a replay, or a coordinator whose executors read the records themselves) travels
as offset ranges. Both are bounded per task by ``maxRecordsPerPartition``, payloads also by
``maxBytesPerPartition``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from sharegroup_source.executor.partition_reader import PayloadPartition, ReplayPartition
from sharegroup_source.options import SourceOptions
from sharegroup_source.schema import row_bytes, to_ipc
from state_store import LedgerEntry, OffsetRange

__all__ = ["payload_partitions", "replay_partitions", "task_cuts"]


def payload_partitions(epoch: int, table: pa.Table, options: SourceOptions) -> list[PayloadPartition]:
    """An acquired epoch's tasks: at most maxRecordsPerPartition records each, and at most maxBytesPerPartition
    bytes as each travels (compressed Arrow IPC), a larger record alone. Spark sends a task to its executor in one
    message and warns of every task above 1000 KiB, so the bound is on the bytes sent, which compression makes a
    fraction of the records' own for most payloads (offsets, timestamps and the topic nearly vanish)."""
    table = table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    if not options.include_headers:
        table = table.drop_columns(["headers"])
    record_bytes = np.asarray(row_bytes(table), np.int64)
    other_columns = -(-max(table.nbytes - int(record_bytes.sum()), 0) // max(table.num_rows, 1))  # per row, rounded up
    weights = record_bytes + other_columns  # a row as Arrow holds it, before compression
    pieces = itertools.pairwise(task_cuts(weights, options.max_records_per_partition, _UNBOUNDED))
    return [PayloadPartition(epoch, payload) for start, end in pieces
            for payload in _packed(table, weights, start, end, options.max_bytes_per_partition)]


#: no bound on a task's bytes (task_cuts then cuts by records alone)
_UNBOUNDED = 2**62
#: how much more than its piece's average a row may weigh compressed, when a piece too large is cut by estimate
_ESTIMATE_MARGIN = 1.1


def _packed(table: pa.Table, weights: np.ndarray, start: int, end: int, max_bytes: int) -> list[bytes]:
    """Rows ``start`` to ``end`` of ``table`` as compressed payloads of at most ``max_bytes`` (a larger row alone).

    What a row weighs compressed is known only once compressed, so the rows are compressed whole first; a payload
    too large is cut by its rows' weights scaled to what the piece compressed to (with a margin), and each part
    is packed the same way, so every payload is checked and a part that still exceeds is cut again."""
    payload = to_ipc(table.slice(start, end - start))
    if len(payload) <= max_bytes or end - start == 1:
        return [payload]
    scale = len(payload) / max(int(weights[start:end].sum()), 1) * _ESTIMATE_MARGIN
    cuts = [start + cut for cut in task_cuts(np.ceil(weights[start:end] * scale).astype(np.int64), end - start,
                                             max_bytes)]
    if len(cuts) == 2:  # the estimate fits the piece whole, which the payload did not: halve it
        cuts = [start, (start + end) // 2, end]
    return [each for a, b in itertools.pairwise(cuts) for each in _packed(table, weights, a, b, max_bytes)]


def task_cuts(weights: np.ndarray, max_records: int, max_bytes: int) -> list[int]:
    """Row indices where tasks start (and the end): each task takes rows while it holds fewer than
    ``max_records`` and stays within ``max_bytes``, but always at least one row. A step per task, not per row."""
    ends = np.cumsum(weights)
    cuts = [0]
    while cuts[-1] < len(weights):
        start = cuts[-1]
        before = ends[start - 1] if start else 0
        fits = int(np.searchsorted(ends, before + max_bytes, side="right"))  # rows [start, fits) fit the bytes
        cuts.append(min(max(fits, start + 1), start + max_records))
    return cuts


def replay_partitions(entry: LedgerEntry, options: SourceOptions) -> list[ReplayPartition]:
    """A ledgered epoch's tasks, offset ranges only: pieces of at most maxRecordsPerPartition records, packed in
    order into tasks of at most that many records (one task may read several Kafka partitions)."""
    most = options.max_records_per_partition
    tasks: list[list[OffsetRange]] = []
    held = 0
    for piece in (piece for r in entry.ranges for piece in r.split(most)):
        if not tasks or held + piece.record_count > most:
            tasks.append([])
            held = 0
        tasks[-1].append(piece)
        held += piece.record_count
    return [ReplayPartition(entry.epoch, tuple(pieces), options.include_headers, options.fail_on_data_loss,
                            options.replay_config) for pieces in tasks]
