"""Per-record outcomes from user code: REJECT to dead letters, RELEASE to retry, maxDeliveries."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading

import pytest
from pyspark.errors.exceptions.captured import StreamingQueryException
from pyspark.sql import functions as F

import sharegroup_source
from sharegroup_source import cli
from sharegroup_source.admin import read_dead_letters
from sharegroup_source.errors import OutcomeError
from sharegroup_testing.kafka_peers import wait_for
from state_store import StateStore
from tests.scenarios import assert_exactly_once, is_json, json_orders
from tests.streams import StreamSetup

pytestmark = pytest.mark.spark


def _dead_letters(setup: StreamSetup) -> dict[tuple[int, bytes], tuple[str, int]]:
    rows = StateStore(str(setup.state)).dead_letters.read().to_pylist()
    return {(r["partition"], r["value"]): (r["reason"], r["delivery_count"]) for r in rows}


def test_invalid_records_are_rejected_into_dead_letters(spark, kafka, tmp_path, capsys):
    setup = StreamSetup(kafka, kafka.new_topic(2), kafka.new_group(), tmp_path)
    valid, invalid = json_orders(kafka, setup, 1000, 2)
    problems: list[str] = []

    def handle(batch, batch_id):
        checked = batch.withColumn("ok", is_json("value")).cache()
        sharegroup_source.acknowledge(checked.filter(~F.col("ok")), "REJECT", "invalid JSON", options=setup.options())
        for bad in (lambda: sharegroup_source.acknowledge(checked, "MAYBE", options=setup.options()),
                    lambda: sharegroup_source.acknowledge(checked.withColumn("epoch", F.lit(999)), "ACCEPT",
                                                          options=setup.options())):
            try:
                bad()
            except OutcomeError as error:
                problems.append(str(error))
        return checked.filter("ok").drop("ok")

    query = setup.batch_sink(spark, handle, maxRecordsPerTrigger=300)
    query.awaitTermination(180)
    assert query.exception() is None
    assert_exactly_once(setup.sink_rows(spark), valid)
    assert _dead_letters(setup) == {key: ("invalid JSON", 1) for key in invalid}
    assert setup.leftovers_for_a_fresh_member() == []
    assert problems and all("must be one of ACCEPT, RELEASE, REJECT" in p or "epoch 999 is not a batch being "
                            "processed (unknown to the ledger)" in p for p in problems)
    decided = StateStore(str(setup.state)).decisions.table.snapshot().rows()
    assert {r["decision"] for r in decided} == {"REJECT"} and len(decided) == len(invalid), "errors record nothing"

    # the dead letters in reach: listed and exported by the command (and its API), the payload only when asked
    capsys.readouterr()
    assert cli.main(["dead-letters", str(setup.state), "--json", "--payload"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert {(d["partition"], base64.b64decode(d["value_base64"])): (d["reason"], d["delivery_count"])
            for d in exported} == _dead_letters(setup)
    assert {d["group_id"] for d in exported} == {setup.group}
    assert all(d["topic"] == setup.topic and d["time"].endswith("Z") for d in exported)
    assert cli.main(["dead-letters", str(setup.state), "--limit", "2"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["GROUP", "TOPIC", "PARTITION", "OFFSET", "DELIVERIES", "TIME", "REASON"], table
    assert len(table) == 3 and all(line.split()[:2] == [setup.group, setup.topic] for line in table[1:]), table
    listed = read_dead_letters(str(setup.state))
    assert len(listed) == len(invalid) and all(letter.value is None for letter in listed), "payload only when asked"
    assert cli.main(["dead-letters", str(tmp_path / "no-such-state")]) == 1
    assert "no dead letters and no share-group state here" in capsys.readouterr().err


@pytest.mark.timing
def test_a_released_record_comes_back_once_with_delivery_count_two(spark, kafka, tmp_path):
    setup = StreamSetup(kafka, kafka.new_topic(1), kafka.new_group(lock_duration_ms=5000), tmp_path)
    produced = kafka.produce_numbered(setup.topic, 200, 1)
    flaky = {b"record-7", b"record-120"}

    def handle(batch, batch_id):
        transient = batch.filter(F.col("value").cast("string").isin(*[v.decode() for v in flaky])
                                 & (F.col("deliveryCount") == 1))
        sharegroup_source.acknowledge(transient, "RELEASE", "downstream timeout", options=setup.options())
        return batch.join(transient.select("offset"), "offset", "left_anti")

    query = setup.batch_sink(spark, handle, available_now=False, maxRecordsPerTrigger=80)
    try:
        wait_for(lambda: {v for _, v, _ in setup.sink_rows(spark)} >= {v for _, v in produced}
                 and setup.every_epoch_settled(), 90, "every record in the sink and acknowledged", interval_s=1)
    finally:
        query.stop()
    rows = setup.sink_rows(spark)
    assert_exactly_once(rows, produced)
    assert {v: dc for _, v, dc in rows if v in flaky} == {v: 2 for v in flaky}
    assert setup.leftovers_for_a_fresh_member() == []


@pytest.mark.timing
def test_a_record_released_every_time_is_dead_lettered_after_max_deliveries(spark, kafka, tmp_path):
    setup = StreamSetup(kafka, kafka.new_topic(1), kafka.new_group(delivery_attempt_limit=10), tmp_path)
    produced = kafka.produce_numbered(setup.topic, 50, 1)
    poison = b"record-13"

    def handle(batch, batch_id):
        stuck = batch.filter(F.col("value") == F.lit(poison))
        sharegroup_source.acknowledge(stuck, "RELEASE", "still failing", options=setup.options())
        return batch.filter(F.col("value") != F.lit(poison))

    query = setup.batch_sink(spark, handle, available_now=False, maxDeliveries=3)
    try:
        wait_for(lambda: _dead_letters(setup) and setup.progress().get("dead_lettered")
                 and setup.every_epoch_settled(), 90, "the poison record in dead_letters and counted", interval_s=1)
    finally:
        query.stop()
    assert _dead_letters(setup) == {(0, poison): ("max deliveries exceeded", 4)}
    assert_exactly_once(setup.sink_rows(spark), produced - {(0, poison)})
    assert setup.progress()["dead_lettered"] == 1
    assert setup.leftovers_for_a_fresh_member() == []


#: Short, so the crashed member's locks and (on both brokers) its membership run out within the test.
CRASH_LOCK_MS = 3_000
CRASH_SESSION_TIMEOUT_MS = 6_000


@pytest.mark.timing
def test_decisions_survive_a_driver_worker_crash_before_the_commit(spark, kafka, tmp_path):
    """The driver-side worker is SIGKILLed after user code decided, before Spark committed the batch.

    Nothing is released (the member dies with its locks) and the batch fails; the restarted query
    replays the batch by offset, deciding nothing this time, and the records the broker hands out
    again once the dead member's locks expire get the recorded decisions: REJECT into dead letters,
    ACCEPT for the rest, and no record twice in the sink.
    """
    group = kafka.new_group(lock_duration_ms=CRASH_LOCK_MS, session_timeout_ms=CRASH_SESSION_TIMEOUT_MS)
    setup = StreamSetup(kafka, kafka.new_topic(1), group, tmp_path)
    valid, invalid = json_orders(kafka, setup, 200, 1)
    crashed = threading.Event()

    def handle(batch, batch_id):
        checked = batch.withColumn("ok", is_json("value"))
        if not crashed.is_set():  # first attempt: decide, then the driver-side worker dies before Spark commits
            sharegroup_source.acknowledge(checked.filter(~F.col("ok")), "REJECT", "invalid JSON",
                                          options=setup.options())
            crashed.set()
            member = StateStore(str(setup.state)).progress.member_in_group(setup.group)
            os.kill(member.pid, signal.SIGKILL)  # this query's worker, by the pid its member recorded
            raise RuntimeError("driver lost after foreachBatch")
        return checked.filter("ok").drop("ok")  # the retry decides nothing: the first decisions must hold

    first = setup.batch_sink(spark, handle, lockDurationMs=CRASH_LOCK_MS)
    with pytest.raises(StreamingQueryException, match="driver lost"):
        first.awaitTermination(120)
    assert [e.status for e in setup.ledger_entries()] == ["ACQUIRED"], "a crash settles nothing"
    assert setup.progress()["released"] == 0
    second = setup.batch_sink(spark, handle, available_now=False, lockDurationMs=CRASH_LOCK_MS)
    try:
        wait_for(lambda: {(p, v) for p, v, _ in setup.sink_rows(spark)} >= valid
                 and set(_dead_letters(setup)) == invalid and setup.every_epoch_acked(),
                 120, "the valid records in the sink, the invalid ones dead-lettered", interval_s=0.5,
                 state=lambda: setup.describe(spark))
    finally:
        second.stop()
    assert_exactly_once(setup.sink_rows(spark), valid)
    assert set(_dead_letters(setup)) == invalid
    assert setup.leftovers_for_a_fresh_member() == []
