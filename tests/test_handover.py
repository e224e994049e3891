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
from sharegroup_source.micro_batch import MicroBatchDriver
from sharegroup_source.testing.kafka_peers import wait_for
from state_store import StateStore
from state_store.progress import COUNTERS
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


@pytest.mark.timing
def test_a_predecessor_that_never_leaves_is_waited_for_a_bounded_time(tmp_path, caplog):
    store = StateStore(str(tmp_path / "state"))
    store.progress.append("q", "stuck", dict.fromkeys(COUNTERS, 0))  # this process: alive
    with caplog.at_level(logging.WARNING, logger="sharegroup_source.coordinators.broker.handover"):
        assert await_previous_member(store.progress, "q", timeout_s=0.5) is False
    assert "run stuck" in caplog.text and "has not recorded leaving the share group" in caplog.text
    store.progress.append("q", "stuck", dict.fromkeys(COUNTERS, 0), left=True)
    assert await_previous_member(store.progress, "q", timeout_s=0.5) is True
