"""Whether a run's checkpoint and the state location belong together, and if not, why not, in words.

A checkpoint resumes after an epoch (its position); the state's ledger says which epochs exist,
how far they got and which run holds the state. A run of this checkpoint ledgers at most the
epoch after its position, so a state that holds more, or settled that one, is another
checkpoint's or another run's: the run is refused (StateMismatchError) before it fences or
writes anything, and the message says, as precisely as the checkpoint and the progress table
let it, which of those it is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timezone

from sharegroup_source.driver.checkpoint_logs import CommitLog
from sharegroup_source.errors import StateMismatchError
from sharegroup_source.offset import EpochOffset
from sharegroup_source.options import SourceOptions
from sharegroup_source.redaction import redact_location
from state_store import EpochStatus, LedgerEntry, StateStore
from state_store.ledger import LedgerView

__all__ = ["CheckpointCheck"]

log = logging.getLogger(__name__)


class CheckpointCheck:
    """The checks of one run: ``commit_log`` is Spark's checkpoint where the source option names it."""

    def __init__(self, options: SourceOptions, store: StateStore, commit_log: CommitLog | None):
        self._options = options
        self._group_id = options.group_id
        self._store = store
        self._commit_log = commit_log

    def before_joining(self) -> None:
        """Refuse, before joining anything, a checkpoint whose committed position the state is ahead of.

        Spark names the position only in its first call, but the checkpoint the source option
        names says it now (Spark resumes after its newest committed batch). A run on a wrong
        checkpoint then never joins the share group: it takes no partitions from the run that
        holds the state, makes nobody wait for it, and fences nobody.
        """
        if self._commit_log is None:
            return
        try:
            committed = self._commit_log.committed_epoch()
        except (OSError, ValueError) as error:  # unreadable: Spark's first call carries the position anyway
            log.warning("cannot read the checkpoint at checkpointLocation=%s before joining (%s); the state is "
                        "checked at Spark's first call", self._checkpoint_shown, error)
            return
        self.check(self._store.ledger.view(self._group_id), (), committed or 0)

    def check(self, view: LedgerView, offsets: Sequence[EpochOffset], position: int) -> None:
        """Refuse a checkpoint this state cannot have produced, or that the state has gone past.

        ``position`` is the epoch the checkpoint resumes after: Spark's start offset, or the end
        of a batch it runs again. A run of this checkpoint ledgers at most the epoch after it
        (ledgered, then Spark failed before logging it), so a state holding more, or having
        settled that one, belongs to another checkpoint or to another run of this one.
        """
        where = f"stateLocation={self._options.state_location_shown}"
        for offset in offsets:
            if offset.state is not None and offset.state != view.state_id:
                holds = f"state {view.state_id}" if view.state_id else "no state (it is new, or was emptied)"
                raise StateMismatchError(
                    f"the checkpoint's offsets belong to state {offset.state}, but {where} holds {holds}: the state "
                    "location was replaced, or another query's checkpoint is used; each checkpoint needs the "
                    "stateLocation it started with")
        if position > 0 and position not in view.statuses:
            raise StateMismatchError(
                f"the checkpoint resumes after epoch {position}, which {where} does not hold: was the state "
                "location deleted or replaced? Restore it, or start a new checkpoint with a new stateLocation")
        newest = view.max_epoch
        following = view.statuses.get(position + 1)
        if newest is not None and (newest > position + 1 or following in (EpochStatus.ACKED, EpochStatus.ACK_FAILED)):
            raise StateMismatchError(self._ahead_of_checkpoint(view, position, newest))

    def ledgered_next(self, epoch: int) -> bool:
        """Whether ``epoch``, the one after the checkpoint's position, was ledgered by an earlier run before Spark
        logged it (then it is the next batch again); a RELEASED one gave its records back and is acquired anew."""
        ledgered = self._store.ledger.get(self._group_id, epoch)
        if ledgered is not None and ledgered.status in (EpochStatus.ACKED, EpochStatus.ACK_FAILED):
            raise StateMismatchError(
                f"stateLocation={self._options.state_location_shown} already settled epoch {epoch}, which "
                f"this checkpoint has not started: each checkpoint needs its own stateLocation")
        return ledgered is not None and ledgered.status != EpochStatus.RELEASED

    def logged(self, epoch: int) -> LedgerEntry:
        """The ledger's entry of an epoch in Spark's checkpoint."""
        entry = self._store.ledger.get(self._group_id, epoch)
        if entry is None:
            raise StateMismatchError(
                f"epoch {epoch} is in Spark's checkpoint but not in the ledger at stateLocation="
                f"{self._options.state_location_shown}: was the state location changed or deleted?")
        return entry

    def _ahead_of_checkpoint(self, view: LedgerView, position: int, newest: int) -> str:
        """Why a state ahead of this run's checkpoint is refused, as precisely as this run can tell."""
        where = f"stateLocation={self._options.state_location_shown}"
        holds = (f"{where} already holds epochs up to {newest} of group {self._group_id!r}" if newest > position + 1
                 else f"{where} already settled epoch {newest} of group {self._group_id!r}")
        holder = f" (run {view.holder} holds it{self._run_whereabouts(view.holder)})" if view.holder else ""
        kept = "This run stops and fenced nothing: the run that holds the state goes on"
        if self._commit_log is None:
            began = "epoch 0 (its checkpoint had no batch)" if position == 0 else f"epoch {position}"
            return (f"this run resumes from {began}, but {holds}{holder}: either another query started on this "
                    "stateLocation with a checkpoint of its own (each checkpoint needs its own stateLocation), or "
                    "two runs of one checkpoint run at once (a checkpoint runs once at a time). Set the source "
                    f"option checkpointLocation to the query's checkpoint to be told which. {kept}")
        checkpoint = f"checkpointLocation={self._checkpoint_shown}"
        try:
            committed = CommitLog(self._checkpoint_location).committed_epoch()  # now, not when this run began
        except (OSError, ValueError):
            committed = None
        if committed is not None and committed > position:
            return (f"another run of this query's checkpoint is ahead of this one: {checkpoint} has committed epoch "
                    f"{committed} and {holds}{holder}, while this run resumes from epoch {position}. A checkpoint "
                    f"runs once at a time: stop one of the two. {kept}")
        if committed is None and position == 0:
            return (f"a new checkpoint ({checkpoint} has no committed batch) starts on {where}, which already holds "
                    f"epochs up to {newest} of group {self._group_id!r}{holder}: each checkpoint needs its own "
                    f"stateLocation. {kept}")
        return (f"{checkpoint} resumes from epoch {position}, but {holds}{holder}: the checkpoint is another query's, "
                f"or older than the state (restored from a copy?); each checkpoint needs its own stateLocation. {kept}")

    def _run_whereabouts(self, run_id: str) -> str:
        """Where a run's member is, from the progress table: an operator looks for it there."""
        rows = [r for r in self._store.progress.table.snapshot().rows()
                if r["query_id"] == self._group_id and r["run_id"] == run_id]
        if not rows:
            return ""
        last = max(rows, key=lambda r: r["commit_version"])
        if last["left_at_ms"] is not None:
            return f", its member left the group at {_iso(last['left_at_ms'])}"
        return f", its member is in the group: pid {last['pid']} on {last['host']}"

    @property
    def _checkpoint_location(self) -> str:
        assert self._options.checkpoint_location is not None
        return self._options.checkpoint_location

    @property
    def _checkpoint_shown(self) -> str:
        return redact_location(self._checkpoint_location)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
