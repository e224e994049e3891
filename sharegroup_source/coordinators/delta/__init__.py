"""The ``delta`` coordinator: the group's Delta state leads, members acquire and settle by compare-and-swap."""

from sharegroup_source.coordinators.delta.coordinator import DeltaCoordinator

__all__ = ["DeltaCoordinator"]
