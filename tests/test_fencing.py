"""One state location, one writer: fencing, and state that belongs to its checkpoint.

The drivers here are called in Spark's order (latestOffset, partitions, read, commit), as the
soak's stop test does, so two of them can run on one state location at once: Spark itself
refuses a second run of one checkpoint in a session, but not on another cluster.
"""

from __future__ import annotations

import collections

import pytest

from sharegroup_source.errors import StateMismatchError
from sharegroup_source.micro_batch import MicroBatchDriver
from sharegroup_source.partition_reader import read_partition
from sharegroup_source.testing.kafka_peers import KafkaUnderTest, wait_for
from state_store import FencedError
from tests.streams import StreamSetup

pytestmark = pytest.mark.timing


def _setup(kafka: KafkaUnderTest, tmp_path, partitions: int = 2) -> StreamSetup:
    return StreamSetup(kafka, kafka.new_topic(partitions, prefix="fence"), kafka.new_group(), tmp_path)


def _batch(driver: MicroBatchDriver, start: dict, sink: list, max_records: int | None = 100) -> dict:
    """One micro-batch the way Spark runs it: the next offset, its partitions read, committed."""
    end = wait_for(lambda: (e := driver.latest_offset(start, max_records)) != start and e, 30, "an epoch")
    for part in driver.plan(start, end):
        for batch in read_partition(part):
            sink += zip(batch.column("partition").to_pylist(), batch.column("value").to_pylist(), strict=True)
    driver.commit(int(end["epoch"]))
    return end


def test_two_drivers_on_one_state_location_one_fails_and_nothing_is_doubled(kafka, tmp_path):
    setup = _setup(kafka, tmp_path)
    produced = kafka.produce_numbered(setup.topic, 400, 2)
    options = setup.source_options(maxRecordsPerTrigger=100)
    sink: list = []
    first = MicroBatchDriver(options)
    second = None
    try:
        committed = _batch(first, first.initial_offset(), sink)
        # a second driver resumes the same checkpoint while the first one still runs
        second = MicroBatchDriver(options, handover_timeout_s=0.5)
        with pytest.raises(FencedError, match="fenced by run"):
            _batch(first, committed, sink)
        first.stop()  # its query fails on the error: the fenced run gives back what it holds and leaves
        start = committed
        while len(sink) < len(produced):
            start = _batch(second, start, sink)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    counts = collections.Counter(sink)
    assert [k for k, n in counts.items() if n > 1] == []
    assert set(counts) == produced
    assert setup.leftovers_for_a_fresh_member() == []


@pytest.mark.parametrize("offset_names_its_state", [True, False], ids=["offset-v2", "offset-v1"])
def test_a_lost_state_location_is_refused_on_restart(kafka, tmp_path, offset_names_its_state):
    """Offsets name their state; those of earlier versions do not, and the missing epoch tells."""
    setup = _setup(kafka, tmp_path)
    kafka.produce_numbered(setup.topic, 100, 2)
    options = setup.source_options(maxRecordsPerTrigger=50)
    driver = MicroBatchDriver(options)
    try:
        committed = _batch(driver, driver.initial_offset(), [])
    finally:
        driver.stop()
    moved = tmp_path / "state-moved"
    setup.state.rename(moved)  # the state location is deleted; the checkpoint stays
    if not offset_names_its_state:
        committed = {"epoch": committed["epoch"]}
    again = MicroBatchDriver(options)
    try:
        with pytest.raises(StateMismatchError, match="belong to state" if offset_names_its_state else "does not hold"):
            again.latest_offset(committed, 50)
    finally:
        again.stop()


def test_a_new_checkpoint_is_refused_on_an_old_state_after_maintenance(kafka, tmp_path):
    setup = _setup(kafka, tmp_path)
    kafka.produce_numbered(setup.topic, 300, 2)
    options = setup.source_options(maxRecordsPerTrigger=50)
    driver = MicroBatchDriver(options)
    try:
        start = driver.initial_offset()
        for _ in range(3):
            start = _batch(driver, start, [])
        driver.store.maintain(ledger_keep_epochs=1)  # epochs 1 and 2 leave the ledger
        assert driver.store.ledger.get(setup.group, 1) is None
    finally:
        driver.stop()
    fresh_checkpoint = MicroBatchDriver(options)
    try:
        with pytest.raises(StateMismatchError, match="new checkpoint"):
            fresh_checkpoint.latest_offset(fresh_checkpoint.initial_offset(), 50)
    finally:
        fresh_checkpoint.stop()


def test_a_released_epoch_spark_never_logged_is_acquired_anew(kafka, tmp_path):
    setup = _setup(kafka, tmp_path, partitions=1)
    kafka.produce_numbered(setup.topic, 100, 1)
    options = setup.source_options(maxRecordsPerTrigger=50)
    first = MicroBatchDriver(options)
    try:
        start = first.initial_offset()
        wait_for(lambda: first.latest_offset(start, 50) != start, 30, "epoch 1")
    finally:
        first.stop()  # stopped before Spark logged epoch 1: its records go back
    released = first.store.ledger.get(setup.group, 1)
    assert released.status == "RELEASED"
    second = MicroBatchDriver(options)
    try:
        end = wait_for(lambda: (e := second.latest_offset(start, 50)) != start and e, 30, "epoch 1 again")
        again = second.store.ledger.get(setup.group, 1)
        rows = [r for part in second.plan(start, end) for r in read_partition(part)]
    finally:
        second.stop()
    assert end["epoch"] == 1
    assert again.member_id != released.member_id, "the released epoch was taken for the same epoch again"
    # acquired anew by the second run: each record's delivery count says it was delivered again
    assert {c for batch in rows for c in batch.column("deliveryCount").to_pylist()} == {2}
