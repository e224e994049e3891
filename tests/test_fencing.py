"""One state location, one writer: fencing, and state that belongs to its checkpoint.

The drivers here are called in Spark's order (latestOffset, partitions, read, commit), as the
soak's stop test does, so two of them can run on one state location at once: Spark itself
refuses a second run of one checkpoint in a session, but not on another cluster. A run checks
its checkpoint against the state first and fences earlier runs after, so a run the state
refuses stops alone, and a restart still fences a zombie before it writes anything.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from pyspark.errors.exceptions.captured import StreamingQueryException

from sharegroup_source.driver.micro_batch import MicroBatchDriver
from sharegroup_source.errors import StateMismatchError
from sharegroup_source.executor.partition_reader import read_partition
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from state_store import FencedError, RecordState, StateStore
from state_store.group import GroupStore
from tests.scenarios import refused_second_run
from tests.streams import StreamSetup

pytestmark = pytest.mark.timing


def _setup(kafka: KafkaUnderTest, tmp_path, partitions: int = 2) -> StreamSetup:
    return StreamSetup(kafka, kafka.new_topic(partitions, prefix="fence"), kafka.new_group(), tmp_path)


def _batch(driver: MicroBatchDriver, start: dict, sink: list, max_records: int | None = 100,
           checkpoint: Path | None = None) -> dict:
    """One micro-batch the way Spark runs it: the next offset, its partitions read, committed.

    With ``checkpoint``, the batch is logged there as Spark logs it (``offsets/N`` then ``commits/N``,
    N counting from 0), so a driver whose checkpointLocation names it reads what Spark would."""
    end = wait_for(lambda: (e := driver.latest_offset(start, max_records)) != start and e, 30, "an epoch")
    if checkpoint is not None:
        batch = len(list((checkpoint / "offsets").glob("[0-9]*"))) if (checkpoint / "offsets").is_dir() else 0
        for folder in ("offsets", "commits"):
            (checkpoint / folder).mkdir(parents=True, exist_ok=True)
        (checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{}}\n{json.dumps(end)}')
    for part in driver.plan(start, end):
        for batch_rows in read_partition(part):
            sink += zip(batch_rows.column("partition").to_pylist(), batch_rows.column("value").to_pylist(),
                        strict=True)
    if checkpoint is not None:
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    driver.commit(int(end["epoch"]))
    return end


def _run_until(driver: MicroBatchDriver, start: dict, sink: list, wanted: set, **batch: object) -> dict:
    """Batches until the sink holds every record of ``wanted``; the last end offset."""
    while not wanted <= set(sink):
        start = _batch(driver, start, sink, **batch)  # type: ignore[arg-type]
    return start


def _holder(options) -> str | None:
    """The run that holds the query's state: the one of the newest fence."""
    return StateStore(options.state_location).ledger.view(options.group_id).holder


def _assert_exactly_once(sink: list, produced: set) -> None:
    counts = collections.Counter(sink)
    assert [k for k, n in counts.items() if n > 1] == []
    assert set(counts) == produced


def test_a_restart_fences_the_zombie_at_its_first_call_before_writing(kafka, tmp_path):
    """A second run of the same checkpoint (the first one a zombie: nobody stopped it) takes over."""
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
        assert _holder(options) == first._run_id, "a run fences nobody before Spark names its checkpoint"
        start = _batch(second, committed, sink)
        assert _holder(options) == second._run_id
        with pytest.raises(FencedError, match="fenced by run"):
            _batch(first, committed, sink)
        first.stop()  # its query fails on the error: the fenced run gives back what it holds and leaves
        _run_until(second, start, sink, produced)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    _assert_exactly_once(sink, produced)
    rows = StateStore(options.state_location).ledger.table.snapshot().rows()
    fenced_at = min(r["commit_version"] for r in rows if r["kind"] == "FENCE" and r["member_id"] == second._run_id)
    written = [r["commit_version"] for r in rows if r["kind"] == "ENTRY" and r["member_id"] == second._run_id]
    assert written and fenced_at < min(written), "the restart fenced the zombie before its first ledger write"
    assert setup.leftovers_for_a_fresh_member() == []


def test_a_new_checkpoint_on_a_running_querys_state_is_refused_before_it_joins(kafka, tmp_path):
    """The issue's case: B starts with a new checkpoint on A's stateLocation. With the source option
    checkpointLocation, B knows its position before joining: it is refused at once, and A goes on."""
    setup = _setup(kafka, tmp_path)
    produced = kafka.produce_numbered(setup.topic, 200, 2)
    options = setup.source_options(maxRecordsPerTrigger=100, checkpointLocation=tmp_path / "checkpoint-a")
    sink: list = []
    first = MicroBatchDriver(options)
    try:
        start = first.initial_offset()
        for _ in range(2):
            start = _batch(first, start, sink, checkpoint=tmp_path / "checkpoint-a")
        other = setup.source_options(maxRecordsPerTrigger=100, checkpointLocation=tmp_path / "checkpoint-b")
        with pytest.raises(StateMismatchError) as refused:
            MicroBatchDriver(other, handover_timeout_s=0.5)
        message = str(refused.value)
        assert "a new checkpoint" in message and "has no committed batch" in message, message
        assert f"run {first._run_id} holds it" in message and "fenced nothing" in message, message
        runs = {r["run_id"] for r in StateStore(options.state_location).progress.table.snapshot().rows()}
        assert runs == {first._run_id}, "the refused run never joined the share group"
        assert _holder(options) == first._run_id
        # records produced after the refusal reach the running query's sink
        produced |= kafka.produce_numbered(setup.topic, 200, 2, first=200)
        _run_until(first, start, sink, produced, checkpoint=tmp_path / "checkpoint-a")
    finally:
        first.stop()
    _assert_exactly_once(sink, produced)


def test_a_second_query_refused_at_its_first_call_leaves_the_running_one_alone(kafka, tmp_path):
    """Without checkpointLocation the second run learns its position only from Spark's first call:
    it joins, is refused there before it fences anyone, and leaves; the first run keeps committing."""
    setup = _setup(kafka, tmp_path)
    produced = kafka.produce_numbered(setup.topic, 200, 2)
    options = setup.source_options(maxRecordsPerTrigger=100)
    sink: list = []
    first = MicroBatchDriver(options)
    try:
        start = first.initial_offset()
        for _ in range(2):
            start = _batch(first, start, sink)
        _, refusal = refused_second_run(options, 100)
        message = str(refusal)
        assert "this run resumes from epoch 0 (its checkpoint had no batch)" in message, message
        assert "new checkpoint" not in message, message
        assert f"run {first._run_id} holds it, its member is in the group" in message, message
        assert "fenced nothing" in message and "checkpointLocation" in message, message
        assert _holder(options) == first._run_id
        produced |= kafka.produce_numbered(setup.topic, 200, 2, first=200)
        _run_until(first, start, sink, produced)
    finally:
        first.stop()
    _assert_exactly_once(sink, produced)


def test_a_refused_delta_query_takes_nothing_from_the_running_one(kafka, tmp_path):
    """coordinator=delta without checkpointLocation: the second run joins the group before Spark's first call
    refuses it, but only a run whose checkpoint was accepted takes back the query's earlier runs' locks, so
    the records the running run holds (epoch 2, whose settle rides on the next acquisition, and its next batch,
    acquired ahead) stay its own and every acknowledgement takes."""
    setup = _setup(kafka, tmp_path)
    produced = kafka.produce_numbered(setup.topic, 400, 2)
    group = tmp_path / "group"
    options = setup.source_options(maxRecordsPerTrigger=100, coordinator="delta", groupLocation=str(group),
                                   **{"share.auto.offset.reset": "earliest"})
    sink: list = []
    first = MicroBatchDriver(options)
    try:
        start = first.initial_offset()
        for _ in range(2):  # epochs 1 and 2: a run resuming from epoch 0 cannot be this query's
            start = _batch(first, start, sink)
        wait_for(lambda: _acquired(group) == 200, 30, "the running run's epoch 2 and next batch, acquired ahead")
        refused_second_run(options, 100)
        assert _acquired(group) == 200
        produced |= kafka.produce_numbered(setup.topic, 200, 2, first=400)
        _run_until(first, start, sink, produced)
        assert first.counters.ack_failures == 0
    finally:
        first.stop()
    _assert_exactly_once(sink, produced)


def _acquired(group: Path) -> int:
    """Records members of the Delta group at ``group`` hold."""
    return sum(b.last - b.first + 1 for sp in GroupStore.existing(str(group)).share_state.partitions().values()
               for b in sp.batches if b.state is RecordState.ACQUIRED)


def test_the_run_behind_on_one_checkpoint_is_refused_as_a_second_run_of_it(kafka, tmp_path):
    """Two runs of one checkpoint: the one the other went past is refused, and not as a new checkpoint.

    One partition: the second run's member, joined but not fetching, is assigned it beside the first
    (with two, the broker would give it one of them, which the first then waits on for good)."""
    setup = _setup(kafka, tmp_path, partitions=1)
    produced = kafka.produce_numbered(setup.topic, 400, 1)
    checkpoint = tmp_path / "checkpoint"
    options = setup.source_options(maxRecordsPerTrigger=100, checkpointLocation=checkpoint)
    sink: list = []
    first = MicroBatchDriver(options)
    try:
        start = _batch(first, first.initial_offset(), sink, checkpoint=checkpoint)
        resumed_at = start  # where the second run's Spark read the checkpoint: it passes the check before joining
        second = MicroBatchDriver(options, handover_timeout_s=0.5)
        try:
            for _ in range(2):  # the first run goes on meanwhile
                start = _batch(first, start, sink, checkpoint=checkpoint)
            with pytest.raises(StateMismatchError) as refused:
                second.latest_offset(resumed_at, 100)
        finally:
            second.stop()
        message = str(refused.value)
        assert "another run of this query's checkpoint is ahead of this one" in message, message
        assert f"has committed epoch {start['epoch']}" in message, message
        assert "new checkpoint" not in message, message
        assert _holder(options) == first._run_id
        _run_until(first, start, sink, produced, checkpoint=checkpoint)
    finally:
        first.stop()
    _assert_exactly_once(sink, produced)


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
        with pytest.raises(StateMismatchError, match=r"resumes from epoch 0 .*already holds epochs up to 3"):
            fresh_checkpoint.latest_offset(fresh_checkpoint.initial_offset(), 50)
    finally:
        fresh_checkpoint.stop()
    with pytest.raises(StateMismatchError, match=r"a new checkpoint .* already holds epochs up to 3"):
        MicroBatchDriver(setup.source_options(maxRecordsPerTrigger=50, checkpointLocation=tmp_path / "new"))


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


@pytest.mark.spark
def test_in_spark_a_query_on_a_running_querys_state_fails_alone(spark, kafka, tmp_path):
    """The issue's case end to end: query B starts with its own checkpoint on query A's stateLocation."""
    setup = _setup(kafka, tmp_path)
    produced = kafka.produce_numbered(setup.topic, 200, 2)
    first = setup.batch_sink(spark, available_now=False, processing_time="1 second", maxRecordsPerTrigger=100,
                             checkpointLocation=setup.checkpoint)
    try:
        ledger = StateStore(str(setup.state)).ledger
        wait_for(lambda: {(p, v) for p, v, _ in setup.sink_rows(spark)} >= produced
                 and (ledger.max_epoch(setup.group) or 0) >= 2, 120, "query A's first batches",
                 state=lambda: setup.describe(spark))
        other = StreamSetup(kafka, setup.topic, setup.group, tmp_path / "b")
        second = other.batch_sink(spark, available_now=False, maxRecordsPerTrigger=100, stateLocation=setup.state,
                                  checkpointLocation=other.checkpoint)
        with pytest.raises(StreamingQueryException, match=r"a new checkpoint .* fenced nothing"):
            second.awaitTermination(120)
        produced |= kafka.produce_numbered(setup.topic, 200, 2, first=200)
        wait_for(lambda: {(p, v) for p, v, _ in setup.sink_rows(spark)} >= produced, 120,
                 "records produced after B's refusal in A's sink", state=lambda: setup.describe(spark))
        assert first.isActive and first.exception() is None
    finally:
        first.stop()
    _assert_exactly_once([(p, v) for p, v, _ in setup.sink_rows(spark)], produced)
