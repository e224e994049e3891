"""Batch times per lane, from Spark's progress events: every batch, across the queries' restarts.

A query's ``recentProgress`` keeps its last 100 batches and starts empty after each restart, while
an interval of the long soak holds hundreds of batches and the broker lane restarts every few
minutes. A StreamingQueryListener sees every progress event of the session instead; the lane is
known by the query's id, which Spark keeps in the checkpoint's ``metadata`` file across restarts.
Only batches that read records count (an idle trigger reports progress too, without running a
batch). Each run's first such batch (Spark gives every start of a query a new ``runId``) is kept
apart: after a fault it replays the batch the failed run planned and waits out the killed member's
locks, which is recovery, not pace. The listener is called on py4j's callback thread, hence the lock.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from soak.long.intervals import BatchFigures

__all__ = ["BatchTimes", "percentile"]


def percentile(sorted_values: list[float], share: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None for none): p99 of 50 batches is the largest."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(share * len(sorted_values)) - 1)]


class BatchTimes(StreamingQueryListener):
    """Collects ``durationMs.triggerExecution`` of each lane's batches until :meth:`take` hands them over."""

    def __init__(self, checkpoints: dict[str, Path]):
        super().__init__()
        self._checkpoints = checkpoints
        self._lanes: dict[str, str] = {}  # query id -> lane
        self._lock = threading.Lock()
        self._durations: dict[str, list[float]] = {lane: [] for lane in checkpoints}
        self._firsts: dict[str, list[float]] = {lane: [] for lane in checkpoints}
        self._runs: set[str] = set()  # runIds whose first batch was seen

    def _lane(self, query_id: str) -> str | None:
        if query_id not in self._lanes:
            for lane, checkpoint in self._checkpoints.items():
                try:
                    if json.loads((checkpoint / "metadata").read_text()).get("id") == query_id:
                        self._lanes[query_id] = lane
                except (OSError, ValueError):
                    continue
        return self._lanes.get(query_id)

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        return None

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        duration = progress.durationMs.get("triggerExecution")
        if not progress.numInputRows or duration is None:
            return
        with self._lock:
            lane = self._lane(str(progress.id))
            if lane is None:
                return
            first = str(progress.runId) not in self._runs
            self._runs.add(str(progress.runId))
            (self._firsts if first else self._durations)[lane].append(float(duration))

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        return None

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        return None

    def take(self) -> dict[str, BatchFigures]:
        """Each lane's batches since the last call, as percentiles (runs' first batches apart); the next interval
        starts empty."""
        with self._lock:
            taken, self._durations = self._durations, {lane: [] for lane in self._checkpoints}
            firsts, self._firsts = self._firsts, {lane: [] for lane in self._checkpoints}
        figures = {}
        for lane, durations in taken.items():
            ordered = sorted(durations)
            figures[lane] = BatchFigures(len(ordered), percentile(ordered, 0.5), percentile(ordered, 0.99),
                                         ordered[-1] if ordered else None, len(firsts[lane]),
                                         max(firsts[lane], default=None))
        return figures
