"""Admission control without loss, on Apache Kafka: a backlog of whole producer batches, a small trigger limit, a
slow sink and a low delivery limit.

Kafka acquires whole producer batches up to the share-partitions' in-flight windows, so one acquisition holds many
triggers' worth. Given back unprocessed, a record spends a delivery attempt, and at the group's
``share.delivery.count.limit`` the broker archives it, telling nobody. The source spreads an acquisition over the
batches its lock leaves room for and never gives back a record on its last attempt: every record reaches the sink
once, through a crash too; and a record the sink really fails until its attempts run out is in the dead letters.
"""

from __future__ import annotations

import collections
import time

import pytest
from pyspark.sql import functions as F

import sharegroup_source
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from sharegroup_testing.workers import kill_source_workers
from state_store import StateStore
from state_store.dead_letters import DELIVERY_LIMIT_REASON
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup
from tests.test_delta_coordinator import DeltaSetup

pytestmark = pytest.mark.spark

#: The scenario: records over partitions, read ``LIMIT`` a trigger into a sink taking ``SINK_S`` a batch, by a group
#: that archives a record at its second delivery and locks for 15 s.
RECORDS, PARTITIONS, LIMIT, SINK_S, DELIVERY_LIMIT, LOCK_MS = 6_000, 3, 300, 1.0, 2, 15_000
#: A trigger limit at which one acquisition (2,000 records here) waits past its lock twice when kept to the limit:
#: the records given back once would be given back on their last attempt
HARSH_LIMIT = 100


def _slow_sink(_batch, _batch_id) -> None:
    time.sleep(SINK_S)  # the sink's own pace: what the source must keep up with inside the lock


def _every_record_once_through_a_slow_sink(spark, kafka: KafkaUnderTest, tmp_path, limit: int = LIMIT,
                                           crash: bool = False, records: int = RECORDS) -> None:
    kafka.require_apache("whole producer batches, locks and delivery counts are the broker's share group's")
    setup = StreamSetup(kafka, kafka.new_topic(PARTITIONS),
                        kafka.new_group(lock_duration_ms=LOCK_MS, delivery_attempt_limit=DELIVERY_LIMIT), tmp_path)
    produced = kafka.produce_numbered(setup.topic, records, PARTITIONS)
    options = {"maxRecordsPerTrigger": limit, "checkpointLocation": str(setup.checkpoint)}

    def arrived() -> int:
        return len({(p, v) for p, v, _ in setup.sink_rows(spark)})

    query = setup.batch_sink(spark, _slow_sink, available_now=False, **options)
    try:
        if crash:  # mid-stream, the driver-side worker dies: nothing released, the member never leaves
            wait_for(lambda: arrived() >= records // 3, 180, "a third of the records in the sink", interval_s=0.5)
            assert kill_source_workers() == 1
            wait_for(lambda: not query.isActive, 120, "the query to fail with its source's worker")
            query = setup.batch_sink(spark, _slow_sink, available_now=False, **options)
        wait_for(lambda: arrived() >= records and setup.every_epoch_settled(), 300,
                 "every record in the sink, every epoch settled", interval_s=1, state=arrived)
    finally:
        query.stop()
    rows = setup.sink_rows(spark)
    counters = setup.progress()
    print(f"Kafka {kafka.describe()}: deliveries in the sink {collections.Counter(c for _, _, c in rows)}, "
          f"given back {counters['given_back']}, epochs {counters['epochs']}")
    assert_exactly_once(rows, produced)
    assert StateStore(str(setup.state)).dead_letters.read().num_rows == 0, "no record was archived unprocessed"


@pytest.mark.parametrize("limit, records", [(LIMIT, RECORDS), (HARSH_LIMIT, RECORDS // 2)])
def test_a_slow_sink_behind_a_small_trigger_limit_loses_no_record(spark, kafka, tmp_path, limit, records):
    """The scenario on the default Kafka: 6,000 records written in the producer's own batches, 300 a trigger (or
    3,000 at 100: more acquisitions add nothing there), 1 s a batch, delivery limit 2, a 15 s lock. Kept to the limit,
    most of one acquisition would wait past its lock and be given back, and at 100 a batch given back again on its
    last attempt: archived unprocessed."""
    _every_record_once_through_a_slow_sink(spark, kafka, tmp_path, limit, records=records)


def test_the_previous_kafka_loses_no_record_behind_a_slow_sink(spark, previous_kafka, tmp_path):
    """The same on the previous Apache Kafka release."""
    _every_record_once_through_a_slow_sink(spark, previous_kafka, tmp_path)


@pytest.mark.timing
def test_a_crash_behind_a_slow_sink_loses_no_record(spark, kafka, tmp_path):
    """The scenario with the driver-side worker SIGKILLed once a third arrived: the crashed member's records come
    back on their last attempt (delivery limit 2), the restarted query takes them at once, and the sink holds every
    record once."""
    _every_record_once_through_a_slow_sink(spark, kafka, tmp_path, crash=True)


def _released_until_archived(spark, setup: StreamSetup, produced: set[tuple[int, bytes]]) -> None:
    """Every 25th record fails in the sink each time it comes (RELEASE): at its second delivery the group archives
    it. The dead letters hold each of them once, with the group's reason and delivery count 2; the sink the rest."""
    failing = {(p, v) for p, v in produced if int(v.split(b"-")[1]) % 25 == 0}

    def handle(batch, _batch_id):
        bad = batch.filter(F.col("value").cast("string").isin(*[v.decode() for _, v in failing]))
        sharegroup_source.acknowledge(bad, "RELEASE", "downstream refused it", options=setup.options())
        return batch.join(bad.select("partition", "offset"), ["partition", "offset"], "left_anti")

    def dead_letters() -> list[dict]:
        return StateStore(str(setup.state)).dead_letters.read().to_pylist()

    query = setup.batch_sink(spark, handle, available_now=False, maxRecordsPerTrigger=200,
                             checkpointLocation=str(setup.checkpoint))
    try:
        wait_for(lambda: len(dead_letters()) >= len(failing) and setup.every_epoch_settled(), 180,
                 "every failing record in the dead letters", interval_s=1, state=lambda: len(dead_letters()))
    finally:
        query.stop()
    assert collections.Counter((r["partition"], r["value"], r["reason"], r["delivery_count"])
                               for r in dead_letters()) == collections.Counter(
        (p, v, DELIVERY_LIMIT_REASON, DELIVERY_LIMIT) for p, v in failing)
    assert_exactly_once(setup.sink_rows(spark), produced - failing)
    assert setup.progress()["dead_lettered"] == len(failing)


def test_records_a_broker_group_archives_at_its_limit_are_dead_lettered(spark, kafka, tmp_path):
    kafka.require_apache("the broker's share group archives at its delivery-count limit")
    setup = StreamSetup(kafka, kafka.new_topic(2), kafka.new_group(delivery_attempt_limit=DELIVERY_LIMIT), tmp_path)
    _released_until_archived(spark, setup, kafka.produce_numbered(setup.topic, 500, 2))


def test_records_a_delta_group_archives_at_its_limit_are_dead_lettered(spark, kafka, tmp_path):
    class LowLimit(DeltaSetup):
        def options(self, **extra) -> dict[str, str]:
            return super().options(**{"groupConfig.share.delivery.count.limit": DELIVERY_LIMIT, **extra})

    setup = LowLimit(kafka, kafka.new_topic(2), kafka.new_group(), tmp_path)
    _released_until_archived(spark, setup, kafka.produce_numbered(setup.topic, 500, 2))
