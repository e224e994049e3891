"""A subscription changed between runs of one query, on Apache Kafka, for both coordinators.

Run 1 reads topic A; run 2 restarts the checkpoint subscribed to A and B and reads B from the group's start
(earliest here); run 3 subscribes to B alone and leaves A: records written to A afterwards reach nobody, and
nothing of A stays locked or pending in the ledger or the group. Every record read is in the sink once.
"""

from __future__ import annotations

import pytest

from sharegroup_testing.kafka_peers import wait_for
from state_store import RecordState
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup
from tests.test_delta_coordinator import DeltaSetup

pytestmark = pytest.mark.spark


def _run_until(spark, setup: StreamSetup, subscribe: str, count: int) -> None:
    query = setup.batch_sink(spark, available_now=False, subscribe=subscribe, checkpointLocation=str(setup.checkpoint))
    try:
        wait_for(lambda: len(setup.sink_rows(spark)) >= count and setup.every_epoch_settled(), 120,
                 f"{count} records in the sink", interval_s=0.5, state=lambda: len(setup.sink_rows(spark)))
    finally:
        query.stop()
    assert query.exception() is None
    setup.wait_until_member_left()


def _a_topic_added_then_one_removed(spark, setup: StreamSetup) -> None:
    kafka, first = setup.kafka, setup.topic
    second = kafka.new_topic(2)
    produced = {(first, p, v) for p, v in kafka.produce_numbered(first, 300, 2)}
    _run_until(spark, setup, first, 300)
    produced |= {(second, p, v) for p, v in kafka.produce_numbered(second, 200, 2, first=1_000)}
    _run_until(spark, setup, f"{first},{second}", 500)
    left_behind = kafka.produce_numbered(first, 100, 2, first=5_000)  # A is no longer subscribed
    marker = {(second, p, v) for p, v in kafka.produce_numbered(second, 50, 2, first=9_000)}
    _run_until(spark, setup, second, 550)
    rows = setup.sink_rows(spark)
    assert_exactly_once(rows, {(p, v) for _, p, v in produced | marker})
    assert not {(p, v) for p, v, _ in rows} & left_behind, "run 3 read a topic it no longer subscribes to"
    assert not [e for e in setup.ledger_entries() if e.status in ("ACQUIRED", "EMITTED")], "an epoch left unsettled"


def test_a_broker_query_follows_its_changed_subscription(spark, kafka, tmp_path):
    kafka.require_apache("the broker's share group assigns the subscribed topics")
    setup = StreamSetup(kafka, kafka.new_topic(2), kafka.new_group(), tmp_path)
    _a_topic_added_then_one_removed(spark, setup)


def test_a_delta_query_follows_its_changed_subscription(spark, kafka, tmp_path):
    kafka.require_apache("a behaviour counts on Apache Kafka")
    setup = DeltaSetup(kafka, kafka.new_topic(2), f"g-{tmp_path.name[-20:]}", tmp_path)
    _a_topic_added_then_one_removed(spark, setup)
    locked = [b for (topic, _), sp in setup.share_state().items() if topic == setup.topic
              for b in sp.batches if b.state is RecordState.ACQUIRED]
    assert not locked, "records of the topic the query left stay locked in the group"
