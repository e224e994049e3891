"""Bytes, not only records, bound a micro-batch and a Spark task.

A task travels to its executor in one RPC message, which Spark caps at
``spark.rpc.message.maxSize`` (128 MiB by default): 10,000 records of 1 MB in one task would
fail the batch, so ``maxBytesPerPartition`` (960 KiB by default, of the records as they travel:
compressed) cuts tasks by size as well. The records are random, so compression does not shrink them.
"""

from __future__ import annotations

import collections
import random

import pyarrow.parquet as pq
import pytest

from tests.streams import StreamSetup

pytestmark = pytest.mark.spark

RECORD_BYTES = 900_000  # near Kafka's 1 MB default message size, under the embedded broker's 5 MiB per partition


def test_large_records_are_cut_by_bytes_per_batch_and_per_task(spark, kafka, tmp_path):
    setup = StreamSetup(kafka, kafka.new_topic(4, prefix="bytes"), kafka.new_group(), tmp_path)
    records = [(i % 4, f"k{i}".encode(), random.Random(i).randbytes(RECORD_BYTES)) for i in range(20)]
    kafka.produce(setup.topic, records)
    query = setup.file_sink(spark, maxBytesPerTrigger=4 * RECORD_BYTES, maxBytesPerPartition=2 * RECORD_BYTES + 10)
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None
    got = collections.Counter((p, v) for p, v, _ in setup.sink_rows(spark))
    assert got == collections.Counter((p, v) for p, _, v in records)
    epochs = [e.record_count for e in setup.ledger_entries()]
    assert sum(epochs) == 20 and max(epochs) <= 4, f"records per epoch: {epochs}"
    # the file sink writes one file per task: at most two records of 900 KB each
    tasks = [pq.read_metadata(f).num_rows for f in setup.sink.glob("part-*.parquet")]
    assert sum(tasks) == 20 and max(tasks) <= 2, f"records per task: {tasks}"
