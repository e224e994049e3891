"""A restarted query's member joins the share group only after the previous run's member left.

Spark stops a query's driver-side worker without waiting for it, so a restart can race the
old member's leave; the state tables and the embedded broker are real, the drivers are called
in Spark's order without Spark.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sharegroup_source.coordinators.broker.handover import await_previous_member
from sharegroup_source.driver.micro_batch import MicroBatchDriver
from sharegroup_testing.kafka_peers import wait_for
from state_store import StateStore
from state_store.progress import COUNTERS
from tests.scenarios import refused_second_run
from tests.streams import StreamSetup


@pytest.mark.timing
def test_a_restarted_run_joins_after_the_previous_member_left(kafka, tmp_path):
    setup = StreamSetup(kafka, kafka.new_topic(2, prefix="handover"), kafka.new_group(), tmp_path)
    group = setup.group
    kafka.produce_numbered(setup.topic, 200, 2)
    options = setup.source_options()
    first = MicroBatchDriver(options)
    start = first.initial_offset()
    wait_for(lambda: first.latest_offset(start, 50) != start, 30, "the first run's first epoch")
    started: list[MicroBatchDriver] = []
    restart = threading.Thread(target=lambda: started.append(MicroBatchDriver(options)))
    restart.start()
    restart.join(timeout=1.5)
    assert restart.is_alive(), "the new run must not join while the previous run's member is in the group"
    first.stop()
    restart.join(timeout=30)
    assert started, "the new run must start once the previous member left"
    second = started[0]
    try:
        rows = sorted(StateStore(options.state_location).progress.table.snapshot().rows(),
                      key=lambda r: r["commit_version"])
        left = [r["commit_version"] for r in rows if r["left_at_ms"] is not None]
        joined = min(r["commit_version"] for r in rows if r["run_id"] == second._run_id)
        assert len(left) == 1 and left[0] < joined
        assert StateStore(options.state_location).progress.member_in_group(group).run_id == second._run_id
    finally:
        second.stop()
    assert StateStore(options.state_location).progress.member_in_group(group) is None


def _append_from_another_process(location: Path) -> None:
    """A run whose process is gone: it wrote its member row and died without leaving."""
    code = ("import sys; from state_store import StateStore; from state_store.progress import COUNTERS; "
            "StateStore(sys.argv[1]).progress.append('q', 'crashed', dict.fromkeys(COUNTERS, 0))")
    subprocess.run([sys.executable, "-c", code, str(location)], check=True)


def test_a_dead_predecessor_is_not_waited_for(tmp_path):
    store = StateStore(str(tmp_path / "state"))
    _append_from_another_process(tmp_path / "state")
    member = store.progress.member_in_group("q")
    assert member is not None and member.run_id == "crashed" and member.process_is_gone()
    assert await_previous_member(store.progress, "q", timeout_s=30) is True


def test_a_dead_predecessor_is_forgotten_once_its_successor_left(tmp_path):
    """The crashed run wrote no "left" row; its successor joined (it waited for it) and left: nobody is in
    the group, so a next run does not wait and a test waiting for the member to leave is not kept waiting."""
    store = StateStore(str(tmp_path / "state"))
    _append_from_another_process(tmp_path / "state")
    store.progress.append("q", "successor", dict.fromkeys(COUNTERS, 0))
    assert store.progress.member_in_group("q").run_id == "successor"
    store.progress.append("q", "successor", dict.fromkeys(COUNTERS, 0), left=True)
    assert store.progress.member_in_group("q") is None


@pytest.mark.timing
def test_a_refused_second_run_leaving_keeps_the_first_run_waited_for(kafka, tmp_path):
    """Issue 34, with the drivers: a second query without checkpointLocation on the first's state waits out its
    handover, joins, is refused at its first call and writes its "left" row; the first run's member is still in
    the group, so member_in_group names it and a restart waits for it."""
    setup = StreamSetup(kafka, kafka.new_topic(1, prefix="handover"), kafka.new_group(), tmp_path)
    kafka.produce_numbered(setup.topic, 20, 1)
    options = setup.source_options()
    first = MicroBatchDriver(options)
    try:
        offset = first.initial_offset()  # the first run fences at its first call; two epochs put the state ahead
        for _ in range(2):
            start = offset
            offset = wait_for(lambda s=start: (e := first.latest_offset(s, 10)) != s and e, 30, "an epoch")
            first.commit(int(offset["epoch"]))
        second_run_id, _ = refused_second_run(options, 50)
        progress = StateStore(options.state_location).progress
        rows = sorted(progress.table.snapshot().rows(), key=lambda r: r["commit_version"])
        assert rows[-1]["run_id"] == second_run_id and rows[-1]["left_at_ms"] is not None
        member = progress.member_in_group(setup.group)
        assert member is not None and member.run_id == first._run_id
        assert await_previous_member(progress, setup.group, timeout_s=0.5) is False, "a restart waits for it"
    finally:
        first.stop()
    assert StateStore(options.state_location).progress.member_in_group(setup.group) is None


@pytest.mark.timing
def test_a_predecessor_that_never_leaves_is_waited_for_a_bounded_time(tmp_path, caplog):
    store = StateStore(str(tmp_path / "state"))
    store.progress.append("q", "stuck", dict.fromkeys(COUNTERS, 0))  # this process: alive
    with caplog.at_level(logging.WARNING, logger="sharegroup_source.coordinators.broker.handover"):
        assert await_previous_member(store.progress, "q", timeout_s=0.5) is False
    assert "run stuck" in caplog.text and "has not recorded leaving the share group" in caplog.text
    store.progress.append("q", "stuck", dict.fromkeys(COUNTERS, 0), left=True)
    assert await_previous_member(store.progress, "q", timeout_s=0.5) is True
