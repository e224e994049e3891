"""``DeltaBatchWriter``, the connector's foreachBatch sink: a stop in the middle of its batch, then a restart.

``query.stop()`` cancels the batch's job while the writer waits for it in ``toArrow``. Raised as it
came, the JVM's error makes a Python traceback of several thousand characters, which Spark matches
against a pattern that overflows the stream thread's stack on text that long (seen on Spark 4.2:
``java.lang.StackOverflowError`` in the stream execution thread, and a stop that took 8 s instead
of 0.3 s). The writer raises one short line that Spark takes for a stop; the batch is written once,
by the next run.
"""

from __future__ import annotations

import threading
import traceback

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from sharegroup_source.sinks import DeltaBatchWriter
from sharegroup_testing.kafka_peers import wait_for
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup

RECORDS, PARTITIONS = 400, 2
#: what Spark's stop check (StreamExecution.isInterruptionException) looks for in a foreachBatch traceback
SPARK_STOP_MARKERS = ("py4j.protocol.Py4JJavaError: An error occurred while calling", "java.lang.InterruptedException")


def _slowly(value: bytes) -> bytes:
    import time

    time.sleep(0.02)  # a batch of 200 records per task takes seconds: the stop lands inside its job
    return value


@pytest.mark.spark
def test_a_stop_inside_the_writers_batch_is_one_short_line_and_the_batch_is_written_once(spark, kafka, tmp_path):
    setup = StreamSetup(kafka, kafka.new_topic(PARTITIONS), kafka.new_group(), tmp_path)
    produced = kafka.produce_numbered(setup.topic, RECORDS, PARTITIONS)
    writer = DeltaBatchWriter(tmp_path / "table", "orders-job")
    slowly = F.udf(_slowly, BinaryType())
    in_batch = threading.Event()
    raised: list[tuple[str, str]] = []  # (type, the traceback py4j hands to Spark)

    def sink(frame: DataFrame, batch_id: int) -> None:  # runs in this process, on py4j's callback thread
        in_batch.set()
        try:
            writer(frame.select("partition", slowly("value").alias("value"), "deliveryCount"), batch_id)
        except Exception as error:
            raised.append((type(error).__name__, traceback.format_exc()))
            raise

    query = (setup.read_stream(spark).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(setup.checkpoint)).start())
    try:
        assert in_batch.wait(120), "no batch started"
        wait_for(spark.sparkContext.statusTracker().getActiveStageIds, 30, "the writer's job running", interval_s=0.01)
    finally:
        query.stop()
    assert query.exception() is None, "Spark took the stop for a failure"
    assert [kind for kind, _ in raised] == ["BatchInterruptedError"], raised
    text = raised[0][1]
    assert len(text) < 2_000, f"a traceback of {len(text)} characters for Spark to match"
    assert all(marker in text for marker in SPARK_STOP_MARKERS), text
    setup.wait_until_member_left()

    def write(frame: DataFrame, batch_id: int) -> None:
        writer(frame.select("partition", "value", "deliveryCount"), batch_id)

    rerun = (setup.read_stream(spark).writeStream.foreachBatch(write)
             .option("checkpointLocation", str(setup.checkpoint)).trigger(availableNow=True).start())
    rerun.awaitTermination(180)
    assert rerun.exception() is None
    rows = DeltaTable(str(tmp_path / "table")).to_pyarrow_table(columns=["partition", "value", "deliveryCount"])
    assert_exactly_once(list(zip(*(rows.column(c).to_pylist() for c in rows.column_names), strict=True)), produced)
