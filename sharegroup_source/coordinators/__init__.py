"""Coordinators: who holds the queue's acquisition locks, behind one interface (``base.Coordinator``).

Chosen once, from the ``coordinator`` option, when a query run's driver starts.
"""

from __future__ import annotations

from collections.abc import Callable

from sharegroup_source.coordinators.base import Coordinator, Failures
from sharegroup_source.coordinators.broker import BrokerCoordinator
from sharegroup_source.coordinators.delta import DeltaCoordinator
from sharegroup_source.options import SourceOptions
from state_store.progress import ProgressTable

__all__ = ["Coordinator", "Failures", "open_coordinator"]

_COORDINATORS: dict[str, Callable[[SourceOptions, ProgressTable, str, float | None], Coordinator]] = {
    "broker": BrokerCoordinator.join,
    "delta": DeltaCoordinator.join,
}


def open_coordinator(options: SourceOptions, progress: ProgressTable, run_id: str,
                     handover_timeout_s: float | None = None) -> Coordinator:
    """The coordinator ``options.coordinator`` names, joined to the share group as run ``run_id``;
    ``handover_timeout_s`` bounds the wait for the previous run's member (None: the coordinator's default)."""
    return _COORDINATORS[options.coordinator](options, progress, run_id, handover_timeout_s)
