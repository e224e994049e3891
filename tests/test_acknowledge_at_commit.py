"""Acknowledgements follow Spark's commit, whatever the trigger, when the source knows the checkpoint.

Spark tells a source of a commit only when it builds the next batch. With the source option
``checkpointLocation`` the driver reads the commit log instead: an epoch is ACCEPTed within a
fraction of a second of its batch's commit, and a query stopped before its next trigger
ACCEPTs what Spark committed instead of giving it back.
"""

from __future__ import annotations

import collections

import pytest

from tests.kafka_under_test import KafkaUnderTest, wait_for
from tests.streams import StreamSetup

pytestmark = pytest.mark.spark

#: Long enough for a batch to run and commit on a loaded machine; the trigger is three times longer.
LOCK_MS = 6_000


def _setup(kafka: KafkaUnderTest, tmp_path, partitions: int = 2) -> StreamSetup:
    return StreamSetup(kafka, kafka.new_topic(partitions), kafka.new_group(lock_duration_ms=LOCK_MS), tmp_path)


def _acked(setup: StreamSetup, epochs: int) -> bool:
    statuses = [e.status for e in setup.ledger_entries()]
    return len(statuses) >= epochs and set(statuses) == {"ACKED"}


def test_a_trigger_three_times_the_lock_loses_no_acknowledgement(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path)
    produced = kafka.produce_numbered(setup.topic, 100, 2)
    query = setup.batch_sink(spark, available_now=False, processing_time=f"{3 * LOCK_MS} milliseconds",
                             lockDurationMs=LOCK_MS, checkpointLocation=setup.checkpoint)
    try:
        wait_for(lambda: _acked(setup, 1), 60, "the first epoch acknowledged", state=lambda: setup.describe(spark))
        produced |= kafka.produce_numbered(setup.topic, 100, 2, first=100)
        wait_for(lambda: _acked(setup, 2) and len(setup.sink_rows(spark)) >= 200, 60,
                 "the second epoch acknowledged", state=lambda: setup.describe(spark))
    finally:
        query.stop()
    rows = setup.sink_rows(spark)
    assert collections.Counter((p, v) for p, v, _ in rows) == dict.fromkeys(produced, 1)
    assert {count for _, _, count in rows} == {1}, "a record was redelivered"
    progress = setup.progress()
    assert (progress["ack_failures"], progress["redeliveries_deduped"], progress["accepted"]) == (0, 0, 200)
    assert setup.leftovers_for_a_fresh_member() == []


def test_a_stop_right_after_a_commit_accepts_the_committed_batch(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path)
    produced = kafka.produce_numbered(setup.topic, 100, 2)
    query = setup.batch_sink(spark, available_now=False, processing_time="1 hour",
                             lockDurationMs=LOCK_MS, checkpointLocation=setup.checkpoint)
    try:
        wait_for(lambda: (setup.checkpoint / "commits" / "0").exists(), 60, "Spark's commit of batch 0",
                 interval_s=0.01)
    finally:
        query.stop()
    in_sink = {(p, v) for p, v, _ in setup.sink_rows(spark)}
    assert in_sink and in_sink <= produced
    assert [e.status for e in setup.ledger_entries()] == ["ACKED"]
    # what batch 0 did not take (a first fetch may bring one partition only) is all that is left
    leftovers = {(p, v) for p, v, _ in setup.leftovers_for_a_fresh_member()}
    assert leftovers == produced - in_sink
