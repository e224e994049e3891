"""Spark Connect as a way in (Databricks serverless and standard access mode run notebooks through it).

A child process opens ``SparkSession.builder.remote("local[2]")``: pyspark starts a local Spark
Connect server and talks to it over gRPC, so the query, its ``foreachBatch`` function and the
``acknowledge`` calls inside it all go through Spark Connect, as on Databricks. The child is its
own process: pyspark starts the local server's Spark in the process that asks for it, where the
suite's classic session already holds the one SparkContext a process may have.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sharegroup_testing.kafka_peers import KafkaUnderTest
from state_store import StateStore
from tests.scenarios import assert_exactly_once, json_orders
from tests.streams import StreamSetup, spark_connect_port

pytestmark = [pytest.mark.spark, pytest.mark.compat]

#: Run in the child: argv[1] is the options as JSON, argv[2] the sink, argv[3] how many valid records to wait for.
CONNECT_QUERY = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from pyarrow.dataset import dataset
    from pyspark.sql import SparkSession
    from state_store import StateStore

    options, sink, expected = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    spark = SparkSession.builder.remote("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    print("connect session:", type(spark).__module__, spark.version, flush=True)

    def handle(batch, batch_id):
        import sharegroup_source
        from pyspark.sql import functions as F

        checked = batch.withColumn("ok", F.try_parse_json(F.col("value").cast("string")).isNotNull()).cache()
        sharegroup_source.acknowledge(checked.filter("not ok"), "REJECT", "invalid JSON", options=options)
        checked.filter("ok").drop("ok").write.mode("overwrite").parquet(f"{sink}/batch={batch_id}")

    query = (spark.readStream.format("sharegroup").options(**options).load().writeStream.foreachBatch(handle)
             .option("checkpointLocation", options["checkpointLocation"]).trigger(processingTime="0 seconds")
             .start())
    ledger = StateStore(options["stateLocation"]).ledger

    def complete():  # every valid record in the sink and every epoch acknowledged: a stop then releases nothing
        # counted with pyarrow, not with a Spark job per look
        done = [str(p) for p in Path(sink).glob("batch=*") if (p / "_SUCCESS").exists()]
        return {e.status for e in ledger.entries(options["kafka.group.id"])} == {"ACKED"} and \
            sum(dataset(d, format="parquet").count_rows() for d in done) >= expected

    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and query.exception() is None and not complete():
        time.sleep(0.5)  # polling the sink and the ledger
    query.stop()
    print("query exception:", query.exception(), flush=True)
    spark.stop()
""")


@pytest.mark.timing
@pytest.mark.timeout(420)
def test_a_stream_and_acknowledge_in_foreach_batch_over_spark_connect(kafka: KafkaUnderTest, tmp_path: Path):
    setup = StreamSetup(kafka, kafka.new_topic(2), kafka.new_group(), tmp_path)
    valid, invalid = json_orders(kafka, setup, 500, 2)
    options = setup.options(maxRecordsPerTrigger=200, checkpointLocation=str(setup.checkpoint))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with spark_connect_port():
        child = subprocess.run([sys.executable, "-c", CONNECT_QUERY, json.dumps(options), str(setup.sink),
                                str(len(valid))], env=env, capture_output=True, text=True, timeout=400)
    out = child.stdout.splitlines()
    assert child.returncode == 0 and "query exception: None" in out, child.stdout + child.stderr[-4000:]
    assert out[0].startswith("connect session: pyspark.sql.connect"), out

    from sharegroup_testing.spark import local_spark

    rows = setup.sink_rows(local_spark())
    assert_exactly_once(rows, valid)
    letters = StateStore(str(setup.state)).dead_letters.read().to_pylist()
    assert {(r["partition"], r["value"], r["reason"]) for r in letters} == {(p, v, "invalid JSON") for p, v in invalid}
    assert len(letters) == len(invalid)
    assert setup.leftovers_for_a_fresh_member() == []
