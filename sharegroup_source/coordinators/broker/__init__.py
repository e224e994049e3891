"""The ``broker`` coordinator: share client, acknowledgement sending, handover between runs."""

from sharegroup_source.coordinators.broker.coordinator import BrokerCoordinator

__all__ = ["BrokerCoordinator"]
