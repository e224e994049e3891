"""The epoch book against a real state store and a share-group member in memory: what it writes to the ledger,
what it holds, what it has the acknowledger send, and what it expects back."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

from sharegroup_source.errors import FencedError
from state_store import EpochStatus, LedgerEntry, OffsetRange, StateStore, StateStoreError
from tests.driver_parts import driver_parts, records


def test_an_epoch_is_ledgered_held_then_settled_and_recorded_acked(tmp_path):
    run = driver_parts(tmp_path)
    run.book.write(1, pa.concat_tables([records("t", 0, range(5)), records("t", 1, [3, 4, 7], delivery_count=2)]),
                   acquired_at_ms=1_000)
    entry = run.store.ledger.get("q", 1)
    assert entry == LedgerEntry("q", 1, (OffsetRange.of_spans("t", 0, [(0, 4)]),
                                         OffsetRange.of_spans("t", 1, [(3, 4), (7, 7)], ((3, 2), (4, 2), (7, 2)))),
                                "run-1", 1_000, 31_000, EpochStatus.ACQUIRED)
    assert run.book.held(1) == entry
    assert run.book.payload(1).column("epoch").to_pylist() == [1] * 8
    assert [run.book.emitted.epoch_of("t", 1, o) for o in (3, 5, 7)] == [1, None, 1]
    assert (run.counters.acquired, run.counters.epochs) == (8, 1)

    run.book.settle_through(1)
    assert run.coordinator.runs() == [("t", 0, 0, 4, "ACCEPT"), ("t", 1, 3, 4, "ACCEPT"), ("t", 1, 7, 7, "ACCEPT")]
    assert (run.book.held(1), run.book.payload(1)) == (None, None)
    assert run.status(1) == "ACQUIRED", "a settled epoch's status rides on the next ledger write"
    run.book.record_settled()
    assert run.status(1) == "ACKED"
    assert run.book.emitted.epoch_of("t", 0, 0) is None, "nothing of an acknowledged epoch can come back"
    assert run.counters.accepted == 8


def test_a_settled_status_is_written_with_the_next_epoch(tmp_path):
    run = driver_parts(tmp_path)
    run.book.write(1, records("t", 0, [0, 1]), acquired_at_ms=0)
    run.book.settle_through(1)
    version = run.store.ledger.table.snapshot().version
    run.book.write(2, records("t", 0, [2]), acquired_at_ms=0)
    assert run.store.ledger.table.snapshot().version == version + 1, "one commit for the epoch and the status"
    assert (run.status(1), run.status(2)) == ("ACKED", "ACQUIRED")


def test_a_failed_acknowledgement_is_expected_back_until_every_record_came_back(tmp_path):
    run = driver_parts(tmp_path)
    run.coordinator.failing = {("t", 1): "SHARE_SESSION_NOT_FOUND"}
    run.book.write(1, pa.concat_tables([records("t", 0, [0, 1]), records("t", 1, [0, 1, 2])]), acquired_at_ms=0)
    run.book.settle_through(1)
    run.book.record_settled()
    assert run.status(1) == "ACK_FAILED"
    assert (run.counters.accepted, run.counters.ack_failures) == (2, 3)
    run.book.came_back([1, 1])
    run.book.record_settled()
    assert run.status(1) == "ACK_FAILED", "one of the three records has not come back yet"
    assert run.book.emitted.epoch_of("t", 1, 2) == 1
    run.book.came_back([1])
    run.book.record_settled()
    assert run.status(1) == "ACKED"
    assert run.book.emitted.epoch_of("t", 1, 2) is None


def test_outcomes_are_applied_in_order_once_the_coordinator_settled_them(tmp_path):
    run = driver_parts(tmp_path)
    run.coordinator.deferred = True
    run.coordinator.failing = {("t", 1): "lost"}
    run.book.write(1, records("t", 0, [0]), acquired_at_ms=0)
    run.book.write(2, records("t", 1, [0]), acquired_at_ms=0)
    run.book.settle_through(2)
    assert len(run.coordinator.acknowledged) == 1, "both epochs in one settlement"
    run.book.collect()
    run.book.record_settled()
    assert (run.status(1), run.status(2)) == ("ACQUIRED", "ACQUIRED"), "not settled yet: nothing to record"
    run.book.collect(wait=True)
    run.book.record_settled()
    assert (run.status(1), run.status(2)) == ("ACKED", "ACK_FAILED")


def test_a_rejected_record_is_dead_lettered_from_the_held_payload(tmp_path):
    run = driver_parts(tmp_path)
    run.store.decisions.record("q", 1, [("t", 0, 1, "REJECT", "not JSON")])
    run.book.write(1, records("t", 0, [0, 1, 2]), acquired_at_ms=0)
    run.book.settle_through(1)
    assert run.coordinator.runs() == [("t", 0, 0, 0, "ACCEPT"), ("t", 0, 1, 1, "REJECT"), ("t", 0, 2, 2, "ACCEPT")]
    letters = run.store.dead_letters.read().to_pylist()
    assert [(r["offset"], r["value"], r["reason"], r["group_id"]) for r in letters] == [(1, b"v1", "not JSON", "q")]


def test_a_stop_releases_what_is_held_and_records_it_first(tmp_path):
    run = driver_parts(tmp_path)
    run.book.write(1, records("t", 0, [0, 1]), acquired_at_ms=0)
    run.book.write(2, pa.concat_tables([records("t", 0, [2, 3, 5]), records("t", 1, [0])]), acquired_at_ms=0)
    run.book.settle_through(1)
    run.book.release_held()
    assert run.coordinator.runs()[-3:] == [("t", 0, 2, 3, "RELEASE"), ("t", 0, 5, 5, "RELEASE"),
                                           ("t", 1, 0, 0, "RELEASE")]
    assert (run.status(1), run.status(2)) == ("ACQUIRED", "RELEASED")
    assert (run.book.held(2), run.book.payload(2)) == (None, None)
    assert run.counters.released == 4
    run.book.release_held()
    assert len(run.coordinator.acknowledged) == 2, "nothing is held any more"


def test_a_stop_whose_ledger_write_fails_still_releases_what_is_held(tmp_path, caplog):
    run = driver_parts(tmp_path)
    run.book.write(1, records("t", 0, [0, 1, 2]), acquired_at_ms=0)
    shutil.rmtree(tmp_path / "state" / "ledger")  # the state store fails under the stop
    with pytest.raises(StateStoreError, match="deleted while in use"):
        run.book.release_held()
    assert run.coordinator.runs()[-1] == ("t", 0, 0, 2, "RELEASE"), "the records go back all the same"
    assert run.counters.released == 3
    assert "could not say RELEASED for epochs [1] in the ledger" in caplog.text
    assert "the next run counts their 3 records as failed acknowledgements" in caplog.text
    assert run.book.held(1) is None


def test_an_earlier_runs_epochs_are_settled_as_failed_and_expected_back(tmp_path):
    earlier = driver_parts(tmp_path, run_id="run-0")
    earlier.book.write(1, records("t", 0, [0, 1, 2]), acquired_at_ms=0)  # its member died holding it
    earlier.book.write(2, records("t", 1, [0, 1]), acquired_at_ms=0)
    earlier.store.ledger.set_statuses("q", {2: EpochStatus.RELEASED})  # released on stop: maybe committed after all
    run = driver_parts(tmp_path)
    assert run.book.emitted.epoch_of("t", 0, 1) == 1
    assert run.book.emitted.epoch_of("t", 1, 1) is None, "a released epoch counts once Spark committed it"
    run.book.settle_through(2)
    assert run.coordinator.acknowledged == [], "their locks died with the earlier member: nothing to send"
    run.book.record_settled()
    assert (run.status(1), run.status(2)) == ("ACK_FAILED", "ACK_FAILED")
    assert run.counters.ack_failures == 5
    assert (run.book.emitted.epoch_of("t", 0, 1), run.book.emitted.epoch_of("t", 1, 1)) == (1, 2)


def test_an_earlier_runs_records_that_came_back_before_its_epoch_was_committed_count_as_back(tmp_path):
    """The broker redelivers a dead member's records to the next run's first fetch, before Spark commits their epoch
    in that run (when the book expects them back): those settled early count, or the epoch would wait for records
    that already came, ACK_FAILED for good."""
    earlier = driver_parts(tmp_path, run_id="run-0")
    earlier.book.write(1, records("t", 0, [0, 1, 2]), acquired_at_ms=0)  # its member died holding it
    run = driver_parts(tmp_path)
    run.book.came_back([1, 1])  # two of its three records, deduplicated and accepted in this run's first batch
    run.book.settle_through(1)
    run.book.record_settled()
    assert run.status(1) == "ACK_FAILED", "one record has not come back yet"
    run.book.came_back([1])
    run.book.record_settled()
    assert run.status(1) == "ACKED"
    assert run.book.emitted.epoch_of("t", 0, 2) is None


def test_where_runs_hand_over_a_stop_keeps_its_epochs_held_for_the_next_run(tmp_path):
    earlier = driver_parts(tmp_path, run_id="run-0", hand_over=True)
    earlier.book.write(1, records("t", 0, [0, 1]), acquired_at_ms=0)
    earlier.book.write(2, pa.concat_tables([records("t", 0, [2, 3, 5]), records("t", 1, [0])]), acquired_at_ms=0)
    earlier.book.settle_through(1)
    earlier.book.record_settled()  # as the stop does, settling what Spark committed first
    kept = earlier.book.release_held()
    assert [(r.topic, r.partition, r.spans()) for r in kept] == [("t", 0, [(2, 3), (5, 5)]), ("t", 1, [(0, 0)])]
    assert earlier.coordinator.runs() == [("t", 0, 0, 1, "ACCEPT")], "nothing released"
    assert (earlier.status(1), earlier.status(2)) == ("ACKED", "ACQUIRED")
    assert earlier.counters.released == 0 and earlier.book.held(2) is None

    run = driver_parts(tmp_path, hand_over=True)
    assert [(r.topic, r.partition, r.spans()) for r in run.coordinator.taken_over] == [
        ("t", 0, [(2, 3), (5, 5)]), ("t", 1, [(0, 0)])], "what the earlier run held, for the coordinator to take over"
    assert run.book.held(2) == earlier.store.ledger.get("q", 2), "settled as this run's own"
    run.book.settle_through(2)
    assert run.coordinator.runs() == [("t", 0, 2, 3, "ACCEPT"), ("t", 0, 5, 5, "ACCEPT"), ("t", 1, 0, 0, "ACCEPT")]
    run.book.record_settled()
    assert run.status(2) == "ACKED" and run.counters.ack_failures == 0
    assert run.book.emitted.epoch_of("t", 0, 3) is None, "accepted: nothing of it comes back"


def test_a_taken_over_epoch_whose_locks_lapsed_fails_and_is_expected_back(tmp_path):
    earlier = driver_parts(tmp_path, run_id="run-0", hand_over=True)
    earlier.book.write(1, records("t", 0, [0, 1, 2]), acquired_at_ms=0)
    earlier.book.release_held()
    run = driver_parts(tmp_path, hand_over=True)
    run.coordinator.failing = {("t", 0): "another member took them when the locks lapsed"}
    run.book.settle_through(1)
    run.book.record_settled()
    assert run.status(1) == "ACK_FAILED" and run.counters.ack_failures == 3
    assert run.book.emitted.epoch_of("t", 0, 2) == 1, "its records are deduplicated if they come back"


def test_a_released_epoch_spark_runs_again_is_emitted_again(tmp_path):
    earlier = driver_parts(tmp_path, run_id="run-0")
    earlier.book.write(1, records("t", 0, [4, 5]), acquired_at_ms=0)
    earlier.book.release_held()
    run = driver_parts(tmp_path)
    entry = run.store.ledger.get("q", 1)
    assert entry is not None
    run.book.replaying([entry])
    assert run.status(1) == "EMITTED"
    assert run.book.emitted.epoch_of("t", 0, 5) == 1
    run.book.settle_through(1)
    run.book.record_settled()
    assert run.status(1) == "ACK_FAILED", "read back from the log: its records come back from the group"


def test_an_epoch_another_run_ledgered_is_given_back(tmp_path):
    run = driver_parts(tmp_path)
    run.book.write(1, records("t", 0, [0]), acquired_at_ms=0)
    run.book.settle_through(1)
    StateStore(run.store.location).ledger.write_epoch(
        LedgerEntry("q", 2, (OffsetRange.of_spans("t", 0, [(1, 1)]),), "run-2", 0, None, EpochStatus.ACQUIRED))
    with pytest.raises(FencedError) as raised:
        run.book.write(2, records("t", 0, [1, 2]), acquired_at_ms=0)
    assert str(raised.value) == (
        "query 'q': epoch 2 was ledgered by run run-2 while this run (run-1) acquired it: two drivers use "
        "stateLocation=/the/state; this run gave its records back and stops")
    assert run.coordinator.runs()[-1] == ("t", 0, 1, 2, "RELEASE")
    assert run.book.held(2) is None
    run.book.record_settled()
    assert run.status(1) == "ACKED", "the settled status was kept for the next write"


def test_the_state_is_maintained_every_so_many_epochs(tmp_path):
    rounds: list[int] = []
    run = driver_parts(tmp_path, maintain_every=2, maintain=lambda: rounds.append(1))
    for epoch in (1, 2, 3):
        run.book.write(epoch, records("t", 0, [epoch]), acquired_at_ms=0)
        run.book.settle_through(epoch)
        assert run.maintenance.idle(30)
        assert len(rounds) == (0 if epoch < 2 else 1), f"after epoch {epoch}: requested when epoch 2 settled"
