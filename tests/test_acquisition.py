"""Acquisition and admission against a real state store and a share-group member in memory: which acquired records
make the next epoch, which wait in the backlog, and which are settled on the spot (and how)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from sharegroup_source.driver import acquisition as acquisition_module
from sharegroup_source.driver.acquisition import Acquisition
from sharegroup_source.driver.admission import MAX_DELIVERIES_REASON, admit
from sharegroup_source.driver.emitted_index import EmittedIndex
from sharegroup_source.options import SourceOptions
from state_store import LedgerEntry, OffsetRange
from tests.driver_parts import Parts, driver_parts, records


@dataclass
class Run(Parts):
    acquisition: Acquisition

    def recorded(self, epoch: int) -> str | None:
        """The epoch's status once the book recorded what it settled."""
        self.book.record_settled()
        return self.status(epoch)


def _run(tmp_path: Path, lock_duration_ms: int | None = 30_000, **options: object) -> Run:
    parts = driver_parts(tmp_path, lock_duration_ms=lock_duration_ms)
    parsed = SourceOptions(bootstrap_servers="b", group_id="q", topics=("t",), state_location=str(tmp_path / "state"),
                           poll_timeout_ms=1, **options)  # type: ignore[arg-type]
    return Run(**vars(parts), acquisition=Acquisition(parts.coordinator, parts.book, parsed, parts.run))


def _offsets(table: pa.Table) -> list[tuple[int, int]]:
    return list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))


@pytest.fixture(autouse=True)
def _no_first_wait(monkeypatch):
    """An empty first acquisition would wait for the member's assignment: there is none to wait for here."""
    monkeypatch.setattr(acquisition_module, "FIRST_ACQUISITION_WAIT_S", 0.0)


def _emitted_and_lost(run: Run, epoch: int, offsets: list[int]) -> None:
    """``epoch`` emitted ``offsets`` of partition 0, and their acknowledgement failed: they will come back."""
    run.book.write(epoch, records("t", 0, offsets), acquired_at_ms=0)
    run.coordinator.failing = {("t", 0): "SHARE_SESSION_NOT_FOUND"}
    run.book.settle_through(epoch)
    run.coordinator.failing = {}
    assert run.recorded(epoch) == "ACK_FAILED"


def test_records_past_the_read_limit_make_the_next_epochs_without_acquiring_again(tmp_path):
    run = _run(tmp_path)
    run.coordinator.acquisitions.append(pa.concat_tables([records("t", 0, range(6)), records("t", 1, range(4))]))
    taken = [_offsets(run.acquisition.acquire(4)[0]) for _ in range(3)]
    assert taken == [[(0, 0), (0, 1), (0, 2), (0, 3)], [(0, 4), (0, 5), (1, 0), (1, 1)], [(1, 2), (1, 3)]]
    assert run.coordinator.acquire_calls == 1
    assert run.coordinator.acknowledged == []
    assert run.acquisition.acquire(4)[0].num_rows == 0
    assert run.coordinator.acquire_calls >= 2


def test_an_epoch_is_cut_at_max_bytes_per_trigger(tmp_path):
    run = _run(tmp_path, max_bytes_per_trigger=5)  # each record: key none, value "v<offset>" (2 bytes here)
    run.coordinator.acquisitions.append(records("t", 0, range(4)))
    assert [_offsets(run.acquisition.acquire(None)[0]) for _ in range(2)] == [[(0, 0), (0, 1)], [(0, 2), (0, 3)]]


def test_a_backlog_held_past_half_its_lock_is_given_back(tmp_path):
    run = _run(tmp_path, lock_duration_ms=0)  # every backlog is stale at once
    run.coordinator.acquisitions += [records("t", 0, range(10)), records("t", 1, [0])]
    assert _offsets(run.acquisition.acquire(4)[0]) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert _offsets(run.acquisition.acquire(4)[0]) == [(1, 0)]
    assert run.coordinator.runs() == [("t", 0, 4, 9, "RELEASE")]
    assert run.counters.released == 6


def test_a_redelivery_of_an_emitted_record_is_accepted_again_not_emitted(tmp_path):
    run = _run(tmp_path)
    _emitted_and_lost(run, 1, [0, 1, 2])
    run.coordinator.acquisitions.append(pa.concat_tables([records("t", 0, [1, 2], delivery_count=2),
                                                          records("t", 0, [10, 11])]))
    fresh, _ = run.acquisition.acquire(None)
    assert _offsets(fresh) == [(0, 10), (0, 11)]
    assert run.coordinator.runs()[-1] == ("t", 0, 1, 2, "ACCEPT")
    assert run.counters.redeliveries_deduped == 2
    assert run.recorded(1) == "ACK_FAILED", "record 0 has not come back yet"
    run.coordinator.acquisitions.append(records("t", 0, [0], delivery_count=2))
    assert run.acquisition.acquire(None)[0].num_rows == 0
    assert run.recorded(1) == "ACKED", "every record that was lost came back and was accepted"
    assert run.book.emitted.epoch_of("t", 0, 0) is None


def test_a_redelivery_whose_acknowledgement_fails_again_is_still_expected(tmp_path):
    run = _run(tmp_path)
    _emitted_and_lost(run, 1, [0])
    run.coordinator.failing = {("t", 0): "SHARE_SESSION_NOT_FOUND"}
    run.coordinator.acquisitions.append(records("t", 0, [0], delivery_count=2))
    assert run.acquisition.acquire(None)[0].num_rows == 0
    assert run.recorded(1) == "ACK_FAILED"
    assert run.book.emitted.epoch_of("t", 0, 0) == 1, "it comes back once more"


def test_a_redelivery_is_settled_as_decided_for_it_and_a_released_one_is_emitted_again(tmp_path):
    run = _run(tmp_path)
    run.store.decisions.record("q", 1, [("t", 0, 1, "REJECT", "poison"), ("t", 0, 2, "RELEASE", "later")])
    _emitted_and_lost(run, 1, [0, 1, 2])
    run.coordinator.acquisitions.append(records("t", 0, [0, 1, 2], delivery_count=2))
    fresh, _ = run.acquisition.acquire(None)
    assert _offsets(fresh) == [(0, 2)], "released on purpose: emitted again"
    assert run.coordinator.runs()[-2:] == [("t", 0, 0, 0, "ACCEPT"), ("t", 0, 1, 1, "REJECT")]
    assert run.counters.redeliveries_deduped == 2
    letters = run.store.dead_letters.read().to_pylist()
    assert [(r["offset"], r["reason"]) for r in letters] == [(1, "poison")]
    assert run.counters.dead_lettered == 1, "kept once when rejected, and not counted again when it came back"
    assert run.recorded(1) == "ACKED", "all three came back"


def test_records_past_max_deliveries_are_rejected_and_dead_lettered(tmp_path):
    run = _run(tmp_path, max_deliveries=3)
    run.coordinator.acquisitions.append(pa.concat_tables([records("t", 0, [0, 1], delivery_count=4),
                                                          records("t", 0, [2], delivery_count=3)]))
    fresh, _ = run.acquisition.acquire(None)
    assert _offsets(fresh) == [(0, 2)]
    assert run.coordinator.runs() == [("t", 0, 0, 1, "REJECT")]
    letters = run.store.dead_letters.read().to_pylist()
    assert sorted((r["offset"], r["value"], r["delivery_count"], r["reason"]) for r in letters) == [
        (0, b"v0", 4, "max deliveries exceeded"), (1, b"v1", 4, "max deliveries exceeded")]


def test_an_available_now_run_gives_back_what_is_past_its_target_and_acquires_no_more(tmp_path):
    run = _run(tmp_path)
    run.acquisition.available_now({("t", 0): 5, ("t", 1): 0})
    run.coordinator.acquisitions.append(pa.concat_tables([records("t", 0, range(3, 8)), records("t", 1, [0])]))
    fresh, _ = run.acquisition.acquire(None)
    assert _offsets(fresh) == [(0, 3), (0, 4)]
    assert run.coordinator.runs() == [("t", 0, 5, 7, "RELEASE"), ("t", 1, 0, 0, "RELEASE")]
    assert run.acquisition.past_target
    run.coordinator.acquisitions.append(records("t", 0, [8]))
    assert run.acquisition.acquire(None)[0].num_rows == 0
    assert run.coordinator.acquire_calls == 1, "acquiring again would spend a delivery of what went back"


def test_an_available_now_run_waits_a_lock_after_an_acknowledgement_failed(tmp_path, monkeypatch):
    """An empty queue ends an AvailableNow run, but not within a lock of a failed acknowledgement: the records come
    back, and what follows them, by then."""
    monkeypatch.setattr(acquisition_module, "AVAILABLE_NOW_IDLE_S", 0.0)
    run = _run(tmp_path, lock_duration_ms=2_000)
    run.acquisition.available_now({("t", 0): 10})
    assert run.acquisition.acquire(None)[0].num_rows == 0 and run.coordinator.acquire_calls == 1, "nothing expected"
    _emitted_and_lost(run, 1, [0, 1])
    run.coordinator.acquisitions += [records("t", 0, [])] * 3 + [records("t", 0, [0, 1], delivery_count=2),
                                                                 records("t", 0, [2])]
    assert _offsets(run.acquisition.acquire(None)[0]) == [(0, 2)]
    assert run.coordinator.acquire_calls == 1 + 5, "polled through the empty answers and the redelivery"
    assert run.recorded(1) == "ACKED"


def test_a_stop_gives_the_backlog_back(tmp_path):
    run = _run(tmp_path)
    run.coordinator.acquisitions.append(records("t", 1, range(5)))
    run.acquisition.acquire(2)
    run.acquisition.give_back()
    assert run.coordinator.runs() == [("t", 1, 2, 4, "RELEASE")]
    run.acquisition.give_back()
    assert len(run.coordinator.acknowledged) == 1, "nothing left to give back"


def test_admission_decides_each_record_and_settles_nothing_itself():
    """``admit`` alone, with no member and no state: the verdict is the whole of what it does."""
    emitted = EmittedIndex([LedgerEntry("q", 3, (OffsetRange("t", 0, 0, 1),), "run-0", 0, None, "ACK_FAILED")])
    decided = {("t", 0, 1): ("REJECT", "bad row")}
    acquired = pa.concat_tables([records("t", 0, [0, 1], delivery_count=2), records("t", 1, [0], delivery_count=4),
                                 records("t", 1, [7, 8]), records("t", 1, [9], delivery_count=3)])
    verdict = admit(acquired, emitted, lambda epoch, key: decided.get(key, ("ACCEPT", None)), max_deliveries=3,
                    target={("t", 0): 10, ("t", 1): 8}, delivery_limit=3)
    assert [(a.partition, a.offset, str(a.type)) for a in verdict.settle] == [
        (0, 0, "ACCEPT"), (0, 1, "REJECT"), (1, 0, "REJECT"), (1, 8, "RELEASE")]
    assert verdict.rejected == {("t", 0, 1): "bad row", ("t", 1, 0): MAX_DELIVERIES_REASON}
    assert verdict.deduped == [(3, ("t", 0, 0)), (3, ("t", 0, 1))]
    assert _offsets(verdict.admitted) == [(1, 9), (1, 7)], "the last attempt first, and never given back"
    assert (verdict.last_attempts, verdict.past_target, verdict.came_back) == (1, True, {})
