"""A SIGKILLed driver-side worker at each crash window, then a restart: every record once.

1. After the ledger write, before Spark's offset log: the epoch is in the ledger, Spark never
   logged it, and its locks die with the member. The next run takes the same epoch again and
   replays it by offset; the records the broker redelivers are recognised and acknowledged.
2. After Spark's commit, before the ACCEPT: the batch is in the sink and its locks die
   unacknowledged. The restarted run resumes after the batch; the broker redelivers its records,
   and they are acknowledged, not emitted again.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from sharegroup_testing.workers import kill_source_workers
from tests.streams import StreamSetup, worker_holding_an_epoch

pytestmark = [pytest.mark.spark, pytest.mark.timing]

#: Short, so the killed member's locks (and on Apache Kafka its membership) run out within the test.
LOCK_MS = 3_000
SESSION_TIMEOUT_MS = 6_000


def _setup(kafka: KafkaUnderTest, tmp_path: Path) -> StreamSetup:
    group = kafka.new_group(lock_duration_ms=LOCK_MS, session_timeout_ms=SESSION_TIMEOUT_MS)
    return StreamSetup(kafka, kafka.new_topic(2, prefix="crash"), group, tmp_path)


def _exactly_once(setup: StreamSetup, spark, produced: set) -> None:
    counts = collections.Counter((p, v) for p, v, _ in setup.sink_rows(spark))
    assert [k for k, n in counts.items() if n > 1] == [], "records duplicated in the sink"
    assert set(counts) == produced, f"{len(produced - set(counts))} records lost"


def _drain(setup: StreamSetup, spark, produced: set) -> None:
    """Run the query until every record is in the sink and every epoch ACKED (the crashed run's epoch
    too: once all its records came back from the broker and were acknowledged), then stop it."""
    query = setup.batch_sink(spark, available_now=False, lockDurationMs=LOCK_MS)
    try:
        wait_for(lambda: {(p, v) for p, v, _ in setup.sink_rows(spark)} >= produced
                 and setup.every_epoch_acked(),
                 120, "every record in the sink, every epoch acknowledged", interval_s=0.5,
                 state=lambda: setup.describe(spark))
    finally:
        query.stop()


def test_killed_after_the_ledger_write_before_sparks_offset_log(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path)
    produced = kafka.produce_numbered(setup.topic, 200, 2)
    worker = worker_holding_an_epoch(setup.options())  # Spark would log epoch 1 next
    worker.kill()  # SIGKILL: nothing released, the member never leaves on its own
    worker.wait(30)
    assert [e.status for e in setup.ledger_entries()] == ["ACQUIRED"]
    _drain(setup, spark, produced)  # Spark's checkpoint never logged epoch 1: it asks for it again
    _exactly_once(setup, spark, produced)
    assert setup.leftovers_for_a_fresh_member() == []


def test_killed_after_sparks_commit_before_the_accept(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path)
    produced = kafka.produce_numbered(setup.topic, 100, 2)
    # acknowledgements wait for the next trigger (no checkpointLocation option): an hour away
    query = setup.batch_sink(spark, available_now=False, processing_time="1 hour", lockDurationMs=LOCK_MS)
    try:
        wait_for(lambda: (setup.checkpoint / "commits" / "0").exists(), 60, "Spark's commit of batch 0")
        assert {e.status for e in setup.ledger_entries()} == {"ACQUIRED"}, "the batch was acknowledged already"
        assert kill_source_workers() == 1
    finally:
        query.stop()  # Spark would only notice the dead worker at the next trigger
    produced |= kafka.produce_numbered(setup.topic, 100, 2, first=100)
    _drain(setup, spark, produced)
    _exactly_once(setup, spark, produced)
    assert setup.progress()["redeliveries_deduped"] > 0, "batch 0's records never came back to be acknowledged"
    assert setup.leftovers_for_a_fresh_member() == []

