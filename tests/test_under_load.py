"""A loaded machine: records delivered again, and stops while batches run back to back.

Under load a batch takes longer, and records a fetch acquired beyond the batch's read limit wait
longer for theirs: past half their lock the source gives them back unread (a batch could
outlive the lock), and they come back with their delivery count raised. The progress table counts
both (``given_back``, ``redelivered``) and the driver's log says why, with what would avoid it.

A stop while a batch runs: Spark's SIGTERM waits for the Spark call under way (an acquisition, a
ledger write, a settlement), then unwinds into the stop, which settles what Spark committed and
gives the rest back; the ledger says RELEASED for what was held.
"""

from __future__ import annotations

import time

import pytest

from sharegroup_testing.kafka_peers import wait_for
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup, burning_cpu

#: stops on a loaded machine: partitions, records, stops. Each stop gives back the epoch it held and what the fetch
#: acquired ahead, and the next run acquires them again: a delivery spent per stop, so the group allows more
#: deliveries than the stops (at the default 5, the broker archives the records at the head of the queue)
STOP_PARTITIONS, STOP_RECORDS, STOPS, STOP_DELIVERY_LIMIT = 2, 2_400, 4, 10


@pytest.mark.spark
def test_records_given_back_for_slow_batches_are_counted_and_come_back_once(spark, kafka, tmp_path):
    """Batches slow for the lock: a 4 s lock, triggers 3 s apart and 100 records a batch, while the first fetch
    acquires all 1,000, and that first batch slower than the lock, which no pacing foresees (a later slow batch can
    find no backlog: on a loaded machine the source takes the rest into the second batch). What waited too long is
    given back and delivered again; the sink holds every record once, and the progress table counts each record
    emitted on a later delivery."""
    kafka.require_apache("the locks and delivery counts are the broker's share group's")
    setup = StreamSetup(kafka, kafka.new_topic(1), kafka.new_group(lock_duration_ms=4_000, delivery_attempt_limit=10),
                        tmp_path)
    produced = kafka.produce_numbered(setup.topic, 1_000, 1)
    with burning_cpu():
        def slow_first(_frame, batch_id: int) -> None:
            if batch_id == 0:
                time.sleep(5)  # past the 4 s lock of what the first acquisition keeps in the backlog

        query = setup.batch_sink(spark, slow_first, available_now=False, processing_time="3 seconds",
                                 maxRecordsPerTrigger="100", checkpointLocation=str(setup.checkpoint))
        try:
            wait_for(lambda: len({(p, v) for p, v, _ in setup.sink_rows(spark)}) >= len(produced), 240,
                     "every record in the sink", interval_s=1, state=lambda: len(setup.sink_rows(spark)))
        finally:
            query.stop()
    setup.wait_until_member_left(timeout_s=60)
    rows = setup.sink_rows(spark)
    assert_exactly_once(rows, produced)
    counters = setup.progress()
    again = sum(1 for _, _, count in rows if count > 1)
    print(f"given back {counters['given_back']}, redelivered {counters['redelivered']}, sink rows delivered before "
          f"{again}, released {counters['released']}")
    assert counters["given_back"] > 0, "no batch waited past half its lock: the test did not load the source"
    assert counters["redelivered"] == again, "each record emitted on a later delivery is counted once"
    assert 0 < again <= counters["given_back"], "nothing but this run's give-backs delivered records again"


@pytest.mark.spark
@pytest.mark.timing
def test_stops_mid_batch_on_a_loaded_machine_leave_no_epoch_acquired(spark, kafka, tmp_path):
    """Several stops, each while a batch runs after two others, beside a burning core: after each, the run's member
    left the group with no epoch ACQUIRED in the ledger (the SIGTERM landed in no call half done), or Spark ended
    the run's process before it left and that run's held epoch stays ACQUIRED for the next run to settle as failed.
    Then the rest as an AvailableNow run: the sink holds every record once, and only such epochs' records count as
    failed acknowledgements."""
    kafka.require_apache("the stop's hand-back is the broker's share group's")
    group = kafka.new_group(lock_duration_ms=30_000, delivery_attempt_limit=STOP_DELIVERY_LIMIT)
    setup = StreamSetup(kafka, kafka.new_topic(STOP_PARTITIONS), group, tmp_path)
    produced = kafka.produce_numbered(setup.topic, STOP_RECORDS, STOP_PARTITIONS)
    options = {"maxRecordsPerTrigger": "400", "checkpointLocation": str(setup.checkpoint)}
    ends: list[str] = []
    ended_by_spark = 0  # records of epochs a run ended by Spark held: the only failed acknowledgements
    with burning_cpu():
        for _ in range(STOPS):
            query = setup.file_sink(spark, available_now=False, **options)
            try:
                wait_for(lambda q=query: (q.lastProgress or {}).get("batchId", -1) >= 1
                         and q.status["isTriggerActive"], 120, "a batch running after two batches",
                         interval_s=0.01, state=lambda q=query: q.status)
            finally:
                query.stop()
            progress = setup.state_store().progress
            wait_for(lambda p=progress: (m := p.member_in_group(setup.group)) is None or m.process_is_gone(), 60,
                     "the run's stop to end: its member left, or Spark ended its process")
            killed = progress.member_in_group(setup.group)  # a run whose process ended before it left
            held = [e for e in setup.ledger_entries() if e.status == "ACQUIRED"]
            assert all(killed is not None and e.member_id == killed.run_id for e in held), (
                f"epochs ACQUIRED after the stop ended: {[(e.epoch, e.member_id) for e in held]}; "
                f"a run still in the group: {killed}")
            ended_by_spark += sum(e.record_count for e in held)
            ends.append(f"{'left' if killed is None else 'ended by Spark'}, {len(held)} epoch(s) ACQUIRED")
    print(f"stops on a loaded machine: {ends}")
    query = setup.file_sink(spark, **options)  # the rest, as an AvailableNow run
    query.awaitTermination(240)
    assert query.exception() is None
    assert_exactly_once(setup.sink_rows(spark), produced)
    setup.wait_until_member_left(timeout_s=60)
    assert setup.progress()["ack_failures"] == ended_by_spark
