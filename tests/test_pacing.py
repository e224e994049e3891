"""How many records an epoch takes when one acquisition holds many triggers' worth: the rules of
``driver/pacing.py``, and acquisition keeping them with a share-group member in memory."""

from __future__ import annotations

import logging
import time

import pyarrow as pa
import pytest

from sharegroup_source.driver import acquisition as acquisition_module
from sharegroup_source.driver.pacing import LOCK_SHARE, BatchPace, Pacing
from tests.driver_parts import records
from tests.test_acquisition import _offsets, _run


@pytest.fixture(autouse=True)
def _no_first_wait(monkeypatch):
    monkeypatch.setattr(acquisition_module, "FIRST_ACQUISITION_WAIT_S", 0.0)


def _paced(periods_s: list[float], lock_ms: int | None = 15_000) -> Pacing:
    """A pacing whose batches went ``periods_s`` (after a first batch, which is not counted)."""
    pacing = Pacing("g", lock_ms, delivery_limit=2, partitions=3)
    now = 0.0
    for period in [99.0, *periods_s]:
        pacing.pace.answered(1, now_s=now)
        now += period
        pacing.pace.called(now_s=now)
    return pacing


def test_a_runs_first_batch_and_the_sources_own_waits_are_not_its_pace():
    pace = BatchPace()
    pace.called(now_s=0.0)  # nothing handed out yet
    pace.answered(10, now_s=1.0)
    pace.called(now_s=8.0)  # the first batch: Spark started its workers and the sink with it
    assert pace.period_ms is None
    pace.answered(10, now_s=8.0)
    pace.called(now_s=9.5)
    pace.answered(0, now_s=21.5)  # an idle poll: nothing handed out, so no batch ran
    pace.called(now_s=22.0)
    assert pace.period_ms == pytest.approx(1500)


def test_an_acquisition_is_spread_over_the_batches_its_lock_leaves_room_for(caplog):
    pacing = _paced([1.0, 1.2])  # the slowest batch counts: 1.2 s, planned as 1.8 s
    with caplog.at_level(logging.INFO, logger="sharegroup_source.driver.pacing"):
        # acquired now: batches can start at 0, 1.8, ... up to 12 s - 1.8 s: 6 of them
        assert pacing.size(6_000, 300, 0, acquired_at_ms=_now_ms()) == 1_000
    assert "takes 1,000 records, past the read limit's 300" in caplog.text
    assert "raise maxRecordsPerTrigger to" in caplog.text, "the first overrun says what to set"
    # with room for every batch at the limit, the limit holds, and nothing is said
    caplog.clear()
    assert pacing.size(1_000, 300, 0, acquired_at_ms=_now_ms()) == 300
    assert caplog.text == ""


def test_an_overrun_late_in_a_lock_names_settings_above_the_querys_own(caplog):
    """8 s into a 15 s lock, 900 records wait and two 1.8 s batches can still end inside 12 s: the remedy counted
    from the whole acquisition would be a 10 s lock and 300 a trigger, which the query has, or less."""
    pacing = _paced([1.0, 1.2])
    with caplog.at_level(logging.INFO, logger="sharegroup_source.driver.pacing"):
        assert pacing.size(900, 300, 0, acquired_at_ms=_now_ms() - 8_000) == 450
    assert "share.record.lock.duration.ms=20000" in caplog.text, caplog.text
    assert "raise maxRecordsPerTrigger to 450" in caplog.text, caplog.text


def test_records_on_their_last_attempt_go_into_the_next_epoch_whatever_the_limit():
    pacing = _paced([], lock_ms=None)  # renewed locks: only the last attempts override the limit
    assert pacing.size(500, 100, 240, acquired_at_ms=0) == 240
    assert pacing.size(500, 100, 40, acquired_at_ms=0) == 100


def test_a_backlog_no_batch_can_emit_inside_its_lock_any_more_is_not_emittable():
    now = _now_ms()
    pacing = _paced([2.0])
    assert pacing.emittable(now - int(LOCK_SHARE * 15_000) + 2_500, now)
    assert not pacing.emittable(now - int(LOCK_SHARE * 15_000) + 1_500, now)
    untimed = _paced([])  # before a batch was timed: half the lock
    assert untimed.emittable(now - 7_000, now) and not untimed.emittable(now - 8_000, now)


def test_a_trigger_limit_too_small_for_one_acquisition_is_warned_of_at_start(caplog):
    pacing = Pacing("g", 15_000, delivery_limit=2, partitions=3)
    with caplog.at_level(logging.WARNING, logger="sharegroup_source.driver.pacing"):
        pacing.warn_at_start(2_000, 6_000)  # three batches in 12 s: room enough
        assert caplog.text == ""
        pacing.warn_at_start(300, 6_000)
    assert "up to 6,000 records (3 share-partitions' in-flight windows" in caplog.text
    assert "20 batches at maxRecordsPerTrigger=300" in caplog.text and "0.60s a batch" in caplog.text
    assert "2 delivery attempts" in caplog.text and "groupConfig.share.record.lock.duration.ms=" in caplog.text


def test_admission_takes_the_last_attempts_first_and_never_gives_them_back_past_the_target(tmp_path):
    run = _run(tmp_path)
    run.coordinator.delivery_limit = 2
    run.acquisition = acquisition_module.Acquisition(run.coordinator, run.book, run.acquisition._options, run.run)
    run.coordinator.acquisitions.append(pa.concat_tables([records("t", 0, range(4)),
                                                          records("t", 1, range(3), delivery_count=2)]))
    taken, _ = run.acquisition.acquire(2)
    assert _offsets(taken) == [(1, 0), (1, 1), (1, 2)], "every last attempt, past the limit of 2"
    assert _offsets(run.acquisition.acquire(2)[0]) == [(0, 0), (0, 1)]
    # an AvailableNow run gives back what lies past its target, but for a record on its last attempt
    run.acquisition.give_back()
    run.acquisition.available_now({("t", 0): 0, ("t", 1): 0})
    run.coordinator.acquisitions.append(pa.concat_tables([records("t", 0, [10]), records("t", 1, [10], 2)]))
    assert _offsets(run.acquisition.acquire(5)[0]) == [(1, 10)]
    assert ("t", 0, 10, 10, "RELEASE") in run.coordinator.runs()


def _now_ms() -> int:
    return int(time.time() * 1000)
