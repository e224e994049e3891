"""A loaded machine: records delivered again.

Under load a batch takes longer, and records a fetch acquired beyond the batch's read limit wait
longer for theirs: past half their lock the source gives them back unread (a batch could
outlive the lock), and they come back with their delivery count raised. The progress table counts
both (``given_back``, ``redelivered``) and the driver's log says why, with what would avoid it.
"""

from __future__ import annotations

import pytest

from sharegroup_source.testing.kafka_peers import wait_for
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup, burning_cpu


@pytest.mark.spark
def test_records_given_back_for_slow_batches_are_counted_and_come_back_once(spark, kafka, tmp_path):
    """Batches slow for the lock: a 4 s lock, triggers 3 s apart and 100 records a batch, while a fetch acquires
    more. What waited past 2 s is given back and delivered again; the sink holds every record once, and the
    progress table counts each record emitted on a later delivery."""
    kafka.require_apache("the locks and delivery counts are the broker's share group's")
    setup = StreamSetup(kafka, kafka.new_topic(1), kafka.new_group(lock_duration_ms=4_000, delivery_attempt_limit=10),
                        tmp_path)
    produced = kafka.produce_numbered(setup.topic, 1_000, 1)
    with burning_cpu():
        query = setup.batch_sink(spark, available_now=False, processing_time="3 seconds",
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
