"""Trigger.AvailableNow while a producer keeps writing: the records past a run's target wait for the next run.

A record produced during a run lies past the run's target. Giving it back costs it a delivery
attempt; giving it back again and again (one poll after another until the run sees an idle
queue) spends its attempts until the broker archives it, and the next run never sees it.
"""

from __future__ import annotations

import collections
import threading
import time

import pytest

from sharegroup_source.driver.micro_batch import MicroBatchDriver
from sharegroup_testing.kafka_peers import wait_for
from tests.streams import StreamSetup

pytestmark = pytest.mark.spark

RECORDS = 1500
PARTITIONS = 3


@pytest.mark.timing
def test_records_produced_during_a_run_reach_the_next_run_once(spark, kafka, tmp_path):
    setup = StreamSetup(kafka, kafka.new_topic(PARTITIONS), kafka.new_group(delivery_attempt_limit=2), tmp_path)
    produced = kafka.produce_numbered(setup.topic, RECORDS, PARTITIONS)
    during: set[tuple[int, bytes]] = set()

    def keep_producing() -> None:  # once the run took its target: 1,500 more, 50 at a time
        wait_for(lambda: any(setup.sink.glob("batch=*/_SUCCESS")), 120, "the first run's first batch")
        for burst in range(30):
            during.update(kafka.produce_numbered(setup.topic, 50, PARTITIONS, first=RECORDS + 50 * burst))
            time.sleep(0.05)  # pacing, not synchronisation: the writes spread over the run

    producer = threading.Thread(target=keep_producing)
    first = setup.batch_sink(spark, maxRecordsPerTrigger=200)
    producer.start()
    first.awaitTermination(180)
    producer.join()
    assert not first.isActive and first.exception() is None, "the first run did not end cleanly within 180 s"
    assert len(during) == RECORDS
    assert setup.progress()["released"] > 0, "no record came past the first run's target while it ran"

    second = setup.batch_sink(spark, maxRecordsPerTrigger=200)  # same checkpoint and stateLocation
    second.awaitTermination(180)
    assert not second.isActive and second.exception() is None, "the second run did not end cleanly within 180 s"

    rows = setup.sink_rows(spark)
    counts = collections.Counter((partition, value) for partition, value, _ in rows)
    assert not [k for k, n in counts.items() if n > 1], "records duplicated in the sink"
    missing = (produced | during) - counts.keys()
    assert not missing, f"{len(missing)} records never reached the sink (archived?), e.g. {sorted(missing)[:3]}"
    assert max(count for _, _, count in rows) <= 2, "a record was delivered more than twice"
    assert setup.progress()["dead_lettered"] == 0
    assert setup.leftovers_for_a_fresh_member() == []


@pytest.mark.timing
def test_a_poll_of_only_records_past_the_target_ends_the_run_at_once(kafka, tmp_path):
    """The driver in Spark's order: once the run's records are taken, a poll that brings only later
    records gives them back and ends the run; it must not poll again (with a delivery-count limit of
    2, a second acquisition and release would archive them)."""
    setup = StreamSetup(kafka, kafka.new_topic(1), kafka.new_group(delivery_attempt_limit=2), tmp_path)
    kafka.produce_numbered(setup.topic, 10, 1)
    driver = MicroBatchDriver(setup.source_options(maxRecordsPerTrigger=100))
    try:
        driver.prepare_available_now()
        start, taken = driver.initial_offset(), 0
        while taken < 10:  # the run's own records, in one epoch or more
            end = driver.latest_offset(start, None)
            assert end != start, f"the run ended after {taken} of its 10 records"
            taken += sum(e.record_count for e in driver.store.ledger.entries(setup.group) if e.epoch == end["epoch"])
            start = end
        later = kafka.produce_numbered(setup.topic, 10, 1, first=10)
        assert driver.latest_offset(start, None) == start, "records past the target made an epoch"
    finally:
        driver.stop()
    left = setup.leftovers_for_a_fresh_member()
    assert sorted((p, v) for p, v, _ in left) == sorted(later), "the later records wait for the next run"
    assert {count for _, _, count in left} == {2}, "given back once: delivered once before, now the second time"


@pytest.mark.embedded
@pytest.mark.timing
def test_a_first_batch_that_outlives_its_lock_still_reads_every_record(spark, kafka, tmp_path):
    """The first batch (Spark starting its workers on a busy cluster) takes longer than the records' lock: their
    acknowledgement fails and the backlog's locks run out. The run waits for those records to come back instead of
    ending on an empty queue with them unread (librdkafka's embedded broker redelivers them seconds late)."""
    lock_ms = 15_000
    setup = StreamSetup(kafka, kafka.new_topic(2), kafka.new_group(lock_duration_ms=lock_ms), tmp_path)
    produced = kafka.produce_numbered(setup.topic, 300, 2)

    def slow_first(_frame, batch_id: int) -> None:
        if batch_id == 0:
            time.sleep(lock_ms / 1000 + 1)

    query = setup.batch_sink(spark, slow_first, maxRecordsPerTrigger=100, lockDurationMs=lock_ms)
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None, "the run did not end cleanly within 180 s"
    counts = collections.Counter((partition, value) for partition, value, _ in setup.sink_rows(spark))
    assert set(counts) == produced, f"{len(produced - set(counts))} of the run's records were left unread"
    assert counts.most_common(1)[0][1] == 1, "a record was written twice"
