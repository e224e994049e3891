"""The ``delta`` coordinator: the group's Delta state leads, members acquire and settle by compare-and-swap.

A query's driver joins as ``DeltaCoordinator``; plain Python workers join as ``DeltaShareConsumer``.
"""

from sharegroup_source.coordinators.delta.consumer import DeltaShareConsumer
from sharegroup_source.coordinators.delta.coordinator import DeltaCoordinator

__all__ = ["DeltaCoordinator", "DeltaShareConsumer"]
