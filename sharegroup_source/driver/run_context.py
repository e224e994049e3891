"""Who a query run is, as every part of the driver that keeps its books sees it.

The epoch book, the acknowledger and the acquisition each need the query's group, the run's id, its state, its
counters and its records' lock: one object hands them over, so a part's constructor names only what is its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from state_store import SourceCounters, StateStore

__all__ = ["RunContext"]


@dataclass(frozen=True)
class RunContext:
    """Run ``run_id`` of query ``group_id``, on the cluster at ``bootstrap_servers``.

    ``store``: the query's state tables; ``counters``: what the run did, for the progress table;
    ``lock_duration_ms``: how long an acquired record stays locked (None: renewed while the member lives);
    ``state_shown``: the state location as messages print it (credentials redacted)."""

    group_id: str
    run_id: str
    store: StateStore
    counters: SourceCounters
    lock_duration_ms: int | None
    bootstrap_servers: str
    state_shown: str
