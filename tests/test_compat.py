"""The compatibility slice of ``make test``: what must hold on every supported Spark minor (4.0 to 4.3).

``make test`` runs this file and tests/test_spark_connect.py (``-m compat``) in one venv per other
Spark minor, on Apache Kafka. Spark before 4.2 calls a Python source's ``latestOffset()`` without
a start or a read limit and runs Trigger.AvailableNow through its own wrapper (one offset, asked
once), so these tests use what works on both kinds of Spark: ``checkpointLocation`` (which the
source needs there) and processing-time triggers that stop once the sink has every record,
except the AvailableNow test, which runs AvailableNow until everything arrived.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyspark
import pytest

from sharegroup_source.driver.stream_reader import ADMISSION_CONTROL
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from tests.scenarios import (
    assert_exactly_once,
    invalid_json_rejected_into_dead_letters,
    run_until_complete,
    sink_down_at_batch_2_then_restart,
)
from tests.streams import StreamSetup
from tests.test_delta_coordinator import DeltaSetup

pytestmark = [pytest.mark.spark, pytest.mark.compat]

#: What a slice tests per Spark (admission, batch bounds, commits, restarts from the checkpoint) is the driver's,
#: which both coordinators share: the slices of the other Spark minors run the default coordinator, the primary
#: Spark (make test's own run) both.
COORDINATORS = ["broker", pytest.param("delta", marks=pytest.mark.primary_spark)]


@pytest.fixture(autouse=True, scope="module")
def _say_which_spark():
    """The slice's output names the Spark and the reader it ran (stream_reader.py has two)."""
    reader = "admission control" if ADMISSION_CONTROL else "start from the checkpoint (before 4.2)"
    print(f"\nSpark {pyspark.__version__}: {reader}")


def _setup(kafka: KafkaUnderTest, tmp_path: Path, coordinator: str, partitions: int) -> StreamSetup:
    if coordinator == "delta":
        return DeltaSetup(kafka, kafka.new_topic(partitions), f"g-{tmp_path.name[-20:]}", tmp_path)
    return StreamSetup(kafka, kafka.new_topic(partitions), kafka.new_group(), tmp_path)


def _left_in_group(setup: StreamSetup) -> list:
    """What the group still holds for someone: in-flight batches (delta) or records a fresh member gets (broker)."""
    if isinstance(setup, DeltaSetup):
        return [batch for batches in setup.in_flight().values() for batch in batches]
    return setup.leftovers_for_a_fresh_member()


@pytest.mark.timing
@pytest.mark.parametrize("coordinator", COORDINATORS)
def test_exactly_once_across_a_failed_batch_and_a_restart(spark, kafka, tmp_path, coordinator):
    setup = _setup(kafka, tmp_path, coordinator, partitions=2)
    produced = kafka.produce_numbered(setup.topic, 600, 2)
    restarted = sink_down_at_batch_2_then_restart(spark, setup, available_now=False, maxRecordsPerTrigger=100,
                                                  checkpointLocation=str(setup.checkpoint))
    run_until_complete(spark, setup, len(produced), restarted)
    assert_exactly_once(setup.sink_rows(spark), produced)
    assert _left_in_group(setup) == []


@pytest.mark.timing
@pytest.mark.parametrize("coordinator", COORDINATORS)
def test_available_now_runs_under_live_production_lose_nothing(spark, kafka, tmp_path, coordinator):
    """Runs of AvailableNow while a producer writes: every record reaches exactly one run.

    On Spark 4.2+ a run reads what was in the log when it started; before 4.2 Spark's wrapper
    asks for one offset, so a run is one batch. Either way the records a run did not take wait in
    the group for the next run, and none of them spends its delivery attempts meanwhile.
    """
    setup = _setup(kafka, tmp_path, coordinator, partitions=3)
    produced = kafka.produce_numbered(setup.topic, 600, 3)
    during: set[tuple[int, bytes]] = set()

    def keep_producing() -> None:  # once the first run wrote its first batch: 600 more, 50 at a time
        wait_for(lambda: any(setup.sink.glob("batch=*/_SUCCESS")), 120, "the first run's first batch")
        for burst in range(12):
            during.update(kafka.produce_numbered(setup.topic, 50, 3, first=600 + 50 * burst))
            time.sleep(0.05)  # pacing, not synchronisation: the writes spread over the run

    producer = threading.Thread(target=keep_producing)
    producer.start()
    runs = 0
    seen: set[tuple[int, bytes]] = set()
    while runs == 0 or producer.is_alive() or (produced | during) - seen:
        query = setup.batch_sink(spark, maxRecordsPerTrigger=400, checkpointLocation=str(setup.checkpoint))
        query.awaitTermination(180)
        assert not query.isActive and query.exception() is None, f"run {runs + 1} did not end cleanly in 180 s"
        runs += 1
        seen = {(p, v) for p, v, _ in setup.sink_rows(spark)}
        assert runs <= 12, f"{runs} runs and {len((produced | during) - seen)} records still missing"
    producer.join()
    rows = setup.sink_rows(spark)
    assert_exactly_once(rows, produced | during)
    assert max(count for _, _, count in rows) <= 2, "a record was delivered more than twice"
    assert setup.progress()["dead_lettered"] == 0
    assert _left_in_group(setup) == []


@pytest.mark.timing
def test_rejected_records_go_to_dead_letters_from_foreach_batch(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, "broker", partitions=2)
    invalid_json_rejected_into_dead_letters(spark, setup, 600, 2, max_records=200)
    assert _left_in_group(setup) == []


@pytest.mark.skipif(ADMISSION_CONTROL, reason="Spark 4.2+ tells the source where a batch starts: checkpointLocation "
                                              "is optional there")
def test_load_without_checkpoint_location_names_the_option_and_this_spark(spark, tmp_path):
    options = {"kafka.bootstrap.servers": "127.0.0.1:9", "kafka.group.id": "g", "subscribe": "t",
               "stateLocation": str(tmp_path / "state")}
    with pytest.raises(Exception) as raised:
        spark.readStream.format("sharegroup").options(**options).load()
    message = str(raised.value)
    assert "option 'checkpointLocation' is required on Spark " + pyspark.__version__ in message, message[:3000]
    assert "DATA_SOURCE_NOT_FOUND" not in message
