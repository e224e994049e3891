"""The checkpoint against the state, without Spark or Kafka: a real state store, and a checkpoint's commit log
written as Spark writes it. Which runs are refused, and what they are told."""

from __future__ import annotations

import logging
import os
import re
import socket
from pathlib import Path

import pytest

from sharegroup_source.driver.checkpoint_check import CheckpointCheck
from sharegroup_source.driver.checkpoint_logs import CommitLog
from sharegroup_source.errors import StateMismatchError
from sharegroup_source.offset import EpochOffset
from sharegroup_source.options import SourceOptions
from state_store import EpochStatus, LedgerEntry, OffsetRange, SourceCounters, StateStore

KEPT = "This run stops and fenced nothing: the run that holds the state goes on"


def _state(tmp_path: Path, statuses: dict[int, EpochStatus]) -> StateStore:
    """A state that run-0 holds, its member in the group, with these epochs."""
    store = StateStore(str(tmp_path / "state"))
    store.ledger.fence("q", "run-0")
    for epoch in sorted(statuses):
        store.ledger.write_epoch(LedgerEntry("q", epoch, (OffsetRange.of_spans("t", 0, [(epoch, epoch)]),), "run-0",
                                             0, None, EpochStatus.ACQUIRED))
    store.ledger.set_statuses("q", {e: s for e, s in statuses.items() if s != EpochStatus.ACQUIRED})
    store.progress.append("q", "run-0", SourceCounters().snapshot())
    return store


def _check(tmp_path: Path, store: StateStore, checkpoint: bool = False) -> CheckpointCheck:
    location = str(tmp_path / "checkpoint") if checkpoint else None
    options = SourceOptions(bootstrap_servers="b", group_id="q", topics=("t",), state_location=store.location,
                            checkpoint_location=location)
    return CheckpointCheck(options, StateStore(store.location), CommitLog(location) if location else None)


def _commit(tmp_path: Path, batch: int, epoch: int) -> None:
    """Spark logs batch ``batch`` ending at ``epoch`` and commits it."""
    for folder in ("offsets", "commits"):
        (tmp_path / "checkpoint" / folder).mkdir(parents=True, exist_ok=True)
    (tmp_path / "checkpoint" / "offsets" / str(batch)).write_text(f'v1\n{{}}\n{{"epoch": {epoch}}}')
    (tmp_path / "checkpoint" / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def _refusal(check: CheckpointCheck, store: StateStore, position: int, *offsets: EpochOffset) -> str:
    with pytest.raises(StateMismatchError) as refused:
        check.check(store.ledger.view("q"), offsets, position)
    return str(refused.value)


ACKED, ACQUIRED = EpochStatus.ACKED, EpochStatus.ACQUIRED
HOLDER = f"(run run-0 holds it, its member is in the group: pid {os.getpid()} on {socket.gethostname()})"


def test_a_checkpoint_at_the_state_or_one_epoch_behind_it_is_accepted(tmp_path):
    store = _state(tmp_path, {1: ACKED, 2: ACKED, 3: ACQUIRED})
    check = _check(tmp_path, store)
    for position in (2, 3):  # epoch 3 ledgered, then Spark failed before logging it; or logged
        check.check(store.ledger.view("q"), (EpochOffset(position, "run-0"),), position)
    check.check(StateStore(str(tmp_path / "new")).ledger.view("q"), (), 0)


def test_offsets_of_another_state_are_refused(tmp_path):
    store = _state(tmp_path, {1: ACKED})
    where = f"stateLocation={store.location}"
    assert _refusal(_check(tmp_path, store), store, 1, EpochOffset(1, "run-9")) == (
        f"the checkpoint's offsets belong to state run-9, but {where} holds state run-0: the state location was "
        "replaced, or another query's checkpoint is used; each checkpoint needs the stateLocation it started with")
    empty = StateStore(str(tmp_path / "emptied"))
    assert "holds no state (it is new, or was emptied)" in _refusal(_check(tmp_path, empty), empty, 0,
                                                                   EpochOffset(1, "run-9"))


def test_a_position_the_state_does_not_hold_is_refused(tmp_path):
    store = _state(tmp_path, {1: ACKED})
    assert _refusal(_check(tmp_path, store), store, 4) == (
        f"the checkpoint resumes after epoch 4, which stateLocation={store.location} does not hold: was the state "
        "location deleted or replaced? Restore it, or start a new checkpoint with a new stateLocation")


def test_a_state_ahead_without_checkpoint_location_names_both_causes(tmp_path):
    store = _state(tmp_path, {1: ACKED, 2: ACKED, 3: ACQUIRED})
    check = _check(tmp_path, store)
    where = f"stateLocation={store.location}"
    assert _refusal(check, store, 1) == (
        f"this run resumes from epoch 1, but {where} already holds epochs up to 3 of group 'q' {HOLDER}: either "
        "another query started on this stateLocation with a checkpoint of its own (each checkpoint needs its own "
        "stateLocation), or two runs of one checkpoint run at once (a checkpoint runs once at a time). Set the "
        f"source option checkpointLocation to the query's checkpoint to be told which. {KEPT}")
    assert _refusal(check, store, 0).startswith(
        f"this run resumes from epoch 0 (its checkpoint had no batch), but {where} already holds epochs up to 3 ")
    settled = _state(tmp_path / "settled", {1: ACKED, 2: ACKED, 3: ACKED})
    assert f"but stateLocation={settled.location} already settled epoch 3 of group 'q' {HOLDER}: " in _refusal(
        _check(tmp_path, settled), settled, 2)


def test_a_state_ahead_is_explained_by_the_checkpoints_own_commit_log(tmp_path):
    store = _state(tmp_path, {1: ACKED, 2: ACKED, 3: ACKED, 4: ACQUIRED})
    check = _check(tmp_path, store, checkpoint=True)
    where, checkpoint = f"stateLocation={store.location}", f"checkpointLocation={tmp_path / 'checkpoint'}"
    assert _refusal(check, store, 0) == (
        f"a new checkpoint ({checkpoint} has no committed batch) starts on {where}, which already holds epochs up to "
        f"4 of group 'q' {HOLDER}: each checkpoint needs its own stateLocation. {KEPT}")
    _commit(tmp_path, 0, 1)
    assert _refusal(check, store, 1) == (
        f"{checkpoint} resumes from epoch 1, but {where} already holds epochs up to 4 of group 'q' {HOLDER}: the "
        "checkpoint is another query's, or older than the state (restored from a copy?); each checkpoint needs its "
        f"own stateLocation. {KEPT}")
    _commit(tmp_path, 1, 3)  # another run of the checkpoint went on meanwhile
    assert _refusal(check, store, 1) == (
        f"another run of this query's checkpoint is ahead of this one: {checkpoint} has committed epoch 3 and {where} "
        f"already holds epochs up to 4 of group 'q' {HOLDER}, while this run resumes from epoch 1. A checkpoint runs "
        f"once at a time: stop one of the two. {KEPT}")


def test_a_holder_that_left_is_named_with_when(tmp_path):
    store = _state(tmp_path, {1: ACKED, 2: ACKED, 3: ACQUIRED})
    store.progress.append("q", "run-0", SourceCounters().snapshot(), left=True)
    message = _refusal(_check(tmp_path, store), store, 1)
    assert re.search(r"\(run run-0 holds it, its member left the group at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)",
                     message), message


def test_before_joining_the_checkpoints_committed_position_is_checked(tmp_path, caplog):
    store = _state(tmp_path, {1: ACKED, 2: ACKED, 3: ACQUIRED})
    _check(tmp_path, store).before_joining()  # no checkpointLocation: Spark's first call tells
    _commit(tmp_path, 0, 1)
    with pytest.raises(StateMismatchError, match="resumes from epoch 1, but"):
        _check(tmp_path, store, checkpoint=True).before_joining()
    _commit(tmp_path, 1, 2)
    _check(tmp_path, store, checkpoint=True).before_joining()
    (tmp_path / "checkpoint" / "offsets" / "1").unlink()  # committed, but its offsets cannot be read
    with caplog.at_level(logging.WARNING):
        _check(tmp_path, store, checkpoint=True).before_joining()
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        f"cannot read the checkpoint at checkpointLocation={tmp_path / 'checkpoint'} before joining"]
    assert caplog.records[0].getMessage().endswith("; the state is checked at Spark's first call")


def test_the_epoch_after_the_position_is_reused_unless_released_and_refused_once_settled(tmp_path):
    store = _state(tmp_path, {1: ACKED, 2: ACQUIRED, 3: EpochStatus.RELEASED, 4: EpochStatus.ACK_FAILED})
    check = _check(tmp_path, store)
    assert [check.ledgered_next(epoch) for epoch in (2, 3, 5)] == [True, False, False]
    with pytest.raises(StateMismatchError) as refused:
        check.ledgered_next(4)
    assert str(refused.value) == (f"stateLocation={store.location} already settled epoch 4, which this checkpoint "
                                  "has not started: each checkpoint needs its own stateLocation")


def test_an_epoch_in_the_checkpoint_must_be_in_the_ledger(tmp_path):
    store = _state(tmp_path, {1: ACKED})
    check = _check(tmp_path, store)
    assert check.logged(1).ranges == (OffsetRange.of_spans("t", 0, [(1, 1)]),)
    with pytest.raises(StateMismatchError) as refused:
        check.logged(2)
    assert str(refused.value) == (f"epoch 2 is in Spark's checkpoint but not in the ledger at stateLocation="
                                  f"{store.location}: was the state location changed or deleted?")
