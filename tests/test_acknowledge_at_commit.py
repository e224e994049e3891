"""Acknowledgements follow Spark's commit, whatever the trigger, when the source knows the checkpoint.

Spark tells a source of a commit only when it builds the next batch. With the source option
``checkpointLocation`` the driver reads the commit log instead: an epoch is ACCEPTed within a
fraction of a second of its batch's commit, and a query stopped before its next trigger
ACCEPTs what Spark committed instead of giving it back.
"""

from __future__ import annotations

import collections

import pytest

from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from tests.streams import StreamSetup

pytestmark = pytest.mark.spark

#: Long enough for a warm batch to run and commit on a loaded machine; the trigger is three times longer.
LOCK_MS = 10_000
#: A trigger that never fires again: Spark runs batch 0 at once, then waits for the next multiple of the
#: interval since 1970 (months away for this one).
NEVER_AGAIN = "1000 days"


def _setup(kafka: KafkaUnderTest, tmp_path, lock_ms: int, partitions: int = 2) -> StreamSetup:
    return StreamSetup(kafka, kafka.new_topic(partitions), kafka.new_group(lock_duration_ms=lock_ms), tmp_path)


@pytest.mark.timing
def test_a_trigger_three_times_the_lock_loses_no_acknowledgement(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, LOCK_MS)
    produced = kafka.produce_numbered(setup.topic, 100, 2)
    query = setup.batch_sink(spark, available_now=False, processing_time=f"{3 * LOCK_MS} milliseconds",
                             lockDurationMs=LOCK_MS, checkpointLocation=setup.checkpoint)
    try:
        # the first batch of a query warms Spark up (on a loaded machine it can outlast a lock): not measured
        wait_for(lambda: setup.every_epoch_settled() and setup.ledger_entries(), 60, "the first epoch settled",
                 state=lambda: setup.describe(spark))
        later = kafka.produce_numbered(setup.topic, 100, 2, first=100)
        produced |= later
        # acquired at the next trigger, acknowledged within its lock: long before the trigger after
        wait_for(lambda: len(setup.ledger_entries()) >= 2 and setup.ledger_entries()[-1].status == "ACKED", 90,
                 "the second epoch acknowledged", state=lambda: setup.describe(spark))
        # the warm-up epoch too, if its locks ran out: once its records came back and were acknowledged
        wait_for(lambda: {(p, v) for p, v, _ in setup.sink_rows(spark)} >= produced and setup.every_epoch_acked(),
                 90, "every record in the sink, every epoch acknowledged", state=lambda: setup.describe(spark))
    finally:
        query.stop()
    rows = setup.sink_rows(spark)
    assert collections.Counter((p, v) for p, v, _ in rows) == dict.fromkeys(produced, 1)
    assert {count for p, v, count in rows if (p, v) in later} == {1}, "a record of the second batch was redelivered"
    assert setup.leftovers_for_a_fresh_member() == []


@pytest.mark.timing
def test_a_stop_right_after_a_commit_accepts_the_committed_batch(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, lock_ms=30_000)
    produced = kafka.produce_numbered(setup.topic, 100, 2)
    query = setup.batch_sink(spark, available_now=False, processing_time=NEVER_AGAIN,
                             checkpointLocation=setup.checkpoint)
    try:
        wait_for(lambda: (setup.checkpoint / "commits" / "0").exists(), 60, "Spark's commit of batch 0",
                 interval_s=0.01)
    finally:
        query.stop()
    # Spark's stop returns before its Python worker has stopped: the member leaves last, after the ledger write
    setup.wait_until_member_left()
    in_sink = {(p, v) for p, v, _ in setup.sink_rows(spark)}
    assert in_sink and in_sink <= produced
    assert [e.status for e in setup.ledger_entries()] == ["ACKED"]
    # what batch 0 did not take (a first fetch may bring one partition only) is all that is left
    leftovers = {(p, v) for p, v, _ in setup.leftovers_for_a_fresh_member()}
    assert leftovers == produced - in_sink


def test_an_epoch_acknowledged_at_commit_is_recorded_without_a_next_trigger(spark, kafka, tmp_path):
    """The ledger records what the commit watcher acknowledged on its own when Spark does not come by:
    the state tables do not show as held, until the next trigger, what the broker has accepted."""
    setup = _setup(kafka, tmp_path, lock_ms=30_000)
    produced = kafka.produce_numbered(setup.topic, 100, 2)
    query = setup.batch_sink(spark, available_now=False, processing_time=NEVER_AGAIN,
                             checkpointLocation=setup.checkpoint)
    try:
        wait_for(lambda: [e.status for e in setup.ledger_entries()] == ["ACKED"], 60,
                 "batch 0's epoch recorded ACKED with no batch after it", state=lambda: setup.describe(spark))
        assert query.isActive and query.lastProgress is not None and query.lastProgress["batchId"] == 0
    finally:
        query.stop()
    in_sink = {(p, v) for p, v, _ in setup.sink_rows(spark)}
    assert in_sink and in_sink <= produced
    leftovers = {(p, v) for p, v, _ in setup.leftovers_for_a_fresh_member()}
    assert leftovers == produced - in_sink  # the broker accepted batch 0's records: none comes back
