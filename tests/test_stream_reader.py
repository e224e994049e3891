"""The driver-side worker under Spark's SIGTERMs: its records go back and its member leaves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sharegroup_source.acks import Ack
from sharegroup_source.coordinators.broker.share_client import ShareClient
from sharegroup_testing.kafka_peers import wait_for
from state_store import StateStore
from tests.streams import StreamSetup, worker_holding_an_epoch


@pytest.mark.timing
def test_a_burst_of_sigterms_still_releases_and_leaves(kafka, tmp_path):
    """Spark sends SIGTERM twice in a row; the second must not cut the first one's stop short."""
    setup = StreamSetup(kafka, kafka.new_topic(1, prefix="sigterm"), kafka.new_group(), tmp_path)
    produced = kafka.produce_numbered(setup.topic, 100, 1)
    child = worker_holding_an_epoch(setup.options())
    try:
        for _ in range(200):  # a burst: some land while the first one's stop is starting
            os.kill(child.pid, signal.SIGTERM)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    store = StateStore(str(setup.state))
    assert store.progress.member_in_group(setup.group) is None, "the member must have left the group"
    assert [e.status for e in store.ledger.entries(setup.group)] == ["RELEASED"]
    got: dict[bytes, int] = {}
    with ShareClient(kafka.config(**{"group.id": setup.group}), [setup.topic]) as member:
        def everything() -> bool:
            records = member.poll(0.5)
            got.update({r.value(): r.delivery_count() for r in records})
            member.acknowledge(Ack(r.topic(), r.partition(), r.offset()) for r in records)
            if records:
                member.commit()
            return len(got) == len(produced)

        # the session timeout is 45 s: a member that did not leave would keep the partition that long
        wait_for(everything, 15, "every record at a new member")
    assert {(0, v) for v in got} == produced and 2 in set(got.values()), "the held epoch was released"


# The driver-side worker's SIGTERM windows, provoked deterministically in a child process run like
# Spark's runner (``try: ... finally: reader.stop()``). A worker that misses its stop in any of them
# keeps its member in the group and its records locked, and a test waiting for the member to leave,
# like the one above, times out.

_NESTED_SIGTERM_CHILD = """
import faulthandler, os, signal, sys
faulthandler.dump_traceback_later(20, exit=True)  # a hang becomes a failure with the stack
from sharegroup_source import termination
from sharegroup_source.driver import stream_reader

stops = []
class Driver:
    def stop(self):
        stops.append(1)

handler = termination.on_sigterm.__code__
for n in range(1, 30):
    reader = stream_reader.ShareGroupStreamReader(None)
    reader._driver = Driver()
    termination._TERM.stopping = False
    termination.stop_on_sigterm()
    events = 0

    def second_sigterm(frame, event, arg):
        # the n-th event inside the first SIGTERM's handler: Python runs the handler of a signal that
        # lands there nested, on the same thread, as it does when Spark's second SIGTERM comes quickly
        global events
        while frame is not None and frame.f_code is not handler:
            frame = frame.f_back
        if frame is not None:
            events += 1
            if events == n:
                signal.raise_signal(signal.SIGTERM)

    sys.setprofile(second_sigterm)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the first SIGTERM did not unwind")
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
        reader.stop()
    assert len(stops) == n, f"second SIGTERM at event {n}: {len(stops)} stops for {n} runs"
print("ok", flush=True)
"""


def test_a_sigterm_inside_the_previous_ones_handler_neither_hangs_nor_skips_the_stop():
    """The handler must take no lock: one that landed inside ``threading.Event.set`` (which the
    handler called) waited for a lock its own thread held, and the worker hung for good."""
    child = subprocess.run([sys.executable, "-c", _NESTED_SIGTERM_CHILD], capture_output=True, text=True,
                           timeout=60, cwd=Path(__file__).parents[1])
    assert child.stdout.strip() == "ok", child.stderr[-3000:]


_BUILDING_CHILD = """
import json, os, signal, sys
from sharegroup_source.driver import micro_batch
from sharegroup_source.options import SourceOptions
from sharegroup_source.driver.stream_reader import ShareGroupStreamReader

window = sys.argv[2]
if window == "member joined":  # SIGTERM once the member joined and was recorded, before the driver exists
    commit_log = micro_batch.CommitLog
    def sigterm_then_commit_log(location):
        os.kill(os.getpid(), signal.SIGTERM)
        return commit_log(location)
    micro_batch.CommitLog = sigterm_then_commit_log
reader = ShareGroupStreamReader(SourceOptions.parse(json.loads(sys.argv[1])))
try:
    print("building", flush=True)
    reader.initialOffset()
    print("built", flush=True)
    sys.stdin.read()
finally:
    reader.stop()
"""


def _run_building_child(setup: StreamSetup, window: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _BUILDING_CHILD, json.dumps(setup.options(**options)), window],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])


@pytest.mark.timing
def test_a_sigterm_while_the_member_joins_still_makes_it_leave(kafka, tmp_path):
    """Between the member's joining (recorded in ``progress``) and the driver's existence, a SIGTERM
    used to unwind the constructor: the runner's ``reader.stop()`` found no driver, and the member
    stayed in the group with nobody to stop it."""
    from state_store import StateStore

    setup = StreamSetup(kafka, kafka.new_topic(1, prefix="sigterm"), kafka.new_group(), tmp_path)
    child = _run_building_child(setup, "member joined", checkpointLocation=str(setup.checkpoint))
    try:
        assert child.wait(timeout=60) == 128 + 15, "the SIGTERM must end the worker"
    finally:
        if child.poll() is None:
            child.kill()
    assert child.stdout.read().split() == ["building"]
    progress = StateStore(str(setup.state)).progress
    assert progress.totals(setup.group)["runs"] == 1, "the member joined"
    assert progress.member_in_group(setup.group) is None, "the member must have left the group"


@pytest.mark.timing
def test_a_sigterm_during_the_handover_wait_ends_the_worker_at_once(kafka, tmp_path):
    """A run still waiting for its predecessor has no member yet: a stop need not wait for the handover."""
    from sharegroup_source.coordinators.broker.handover import HANDOVER_TIMEOUT_S
    from state_store import StateStore
    from state_store.progress import COUNTERS

    setup = StreamSetup(kafka, kafka.new_topic(1, prefix="sigterm"), kafka.new_group(), tmp_path)
    progress = StateStore(str(setup.state)).progress
    progress.append(setup.group, "previous", dict.fromkeys(COUNTERS, 0))  # this live process, never leaving
    child = _run_building_child(setup, "handover")
    try:
        assert child.stdout.readline().strip() == "building"
        time.sleep(1.0)  # well inside the handover wait
        child.terminate()
        started = time.monotonic()
        child.wait(timeout=HANDOVER_TIMEOUT_S)
        assert time.monotonic() - started < HANDOVER_TIMEOUT_S / 2, "the worker waited for the handover"
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 128 + 15
    assert progress.member_in_group(setup.group).run_id == "previous", "the stopped run must never join"


_MID_CALL_CHILD = """
import json, os, signal, sys
from pyspark.sql.streaming.datasource import ReadAllAvailable
from sharegroup_source.driver import acknowledger
from sharegroup_source.driver.stream_reader import ShareGroupStreamReader
from sharegroup_source.options import SourceOptions

settle = acknowledger.Acknowledger.settle
def sigterm_then_settle(self, *args, **kwargs):  # the epoch is no longer held and not yet settled
    os.kill(os.getpid(), signal.SIGTERM)
    return settle(self, *args, **kwargs)
acknowledger.Acknowledger.settle = sigterm_then_settle

reader = ShareGroupStreamReader(SourceOptions.parse(json.loads(sys.argv[1])))
try:
    start = reader.initialOffset()
    while (end := reader.latestOffset(start, ReadAllAvailable())) == start:
        pass
    print("committing", flush=True)
    reader.commit(end)
    print("committed", flush=True)
finally:
    reader.stop()
"""


@pytest.mark.timing
def test_a_sigterm_in_the_middle_of_a_commit_waits_for_its_end(kafka, tmp_path):
    """Spark's SIGTERM lands as a commit hands the held epoch to the acknowledger: it used to unwind there, and the
    epoch, held by nobody and settled by nobody, stayed ACQUIRED with its records locked. Now the commit ends first:
    its records are accepted and the ledger says so; then the worker stops, its member leaves."""
    setup = StreamSetup(kafka, kafka.new_topic(1, prefix="sigterm"), kafka.new_group(), tmp_path)
    produced = kafka.produce_numbered(setup.topic, 50, 1)
    child = subprocess.Popen([sys.executable, "-c", _MID_CALL_CHILD, json.dumps(setup.options())],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])
    try:
        assert child.wait(timeout=60) == 128 + 15, "the SIGTERM must end the worker"
    finally:
        if child.poll() is None:
            child.kill()
    assert child.stdout.read().split() == ["committing"], "the SIGTERM unwinds as the commit returns"
    store = StateStore(str(setup.state))
    assert store.progress.member_in_group(setup.group) is None, "the member must have left the group"
    assert [e.status for e in store.ledger.entries(setup.group)] == ["ACKED"]
    assert store.progress.totals(setup.group)["accepted"] == len(produced)
    marker = kafka.produce_numbered(setup.topic, 1, 1, first=len(produced))
    got: list[bytes] = []
    with ShareClient(kafka.config(**{"group.id": setup.group}), [setup.topic]) as member:
        def marker_arrived() -> bool:
            records = member.poll(0.5)
            got.extend(r.value() for r in records)
            member.acknowledge(Ack(r.topic(), r.partition(), r.offset()) for r in records)
            if records:
                member.commit()
            return {(0, v) for v in got} >= marker

        wait_for(marker_arrived, 30, "the marker at a new member")
    assert {(0, v) for v in got} == marker, "nothing of the committed epoch may come back"
