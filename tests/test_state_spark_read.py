"""Every state table is readable by Spark's own Delta reader (delta-spark), where its jars are present."""

from __future__ import annotations

import pytest

from state_store import LedgerEntry, OffsetRange, StateStore
from state_store.progress import COUNTERS

pytestmark = pytest.mark.spark


def _delta_spark_available(spark) -> bool:
    try:
        spark._jvm.java.lang.Class.forName("org.apache.spark.sql.delta.sources.DeltaDataSource")
        return True
    except Exception:
        return False


def test_spark_reads_every_state_table(spark, tmp_path):
    if not _delta_spark_available(spark):
        pytest.skip("delta-spark jars are not on this Spark's classpath (they come from Maven at run time: "
                    "pip install '.[delta-spark]' and set spark.jars.packages, or run on Databricks)")
    store = StateStore(str(tmp_path / "state"))
    store.ledger.write_epoch(LedgerEntry("q", 1, (OffsetRange("t", 0, 0, 2, (1,), (1, 2)),), "m", 1, 2, "ACQUIRED"))
    store.decisions.record("q", 1, [("t", 0, 2, "REJECT", "bad")])
    store.dead_letters.append([{"key": b"k", "value": b"v", "headers": [("h", b"1")], "topic": "t",
                                "partition": 0, "offset": 2, "delivery_count": 2, "reason": "bad", "time": 0}])
    store.progress.append("q", "run", dict.fromkeys(COUNTERS, 1))
    store.share_state.acquire("t", 0, "m", 2, now_ms=0, log_end_offset=3)
    for table in (store.ledger.table, store.decisions.table, store.dead_letters.table, store.progress.table,
                  store.share_state.table):
        frame = spark.read.format("delta").load(table.uri)
        assert frame.count() == table.snapshot().table().num_rows, table.name
