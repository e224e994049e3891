"""The one error type the state store raises for storage trouble, so callers can catch it whole."""

from __future__ import annotations

__all__ = ["FencedError", "GroupSettingsError", "StateStoreError"]


class StateStoreError(RuntimeError):
    """A state table is missing, corrupt, of another schema, unwritable, or too contended.

    The message names the table's path and what is wrong with it.
    """


class FencedError(StateStoreError):
    """A newer run of the same query took over the state: this run may no longer write to it.

    Two drivers on one ``stateLocation`` would each acquire and ledger epochs; fencing lets
    only the newest one write, so the older one fails instead of duplicating records.
    """


class GroupSettingsError(StateStoreError):
    """A member's group settings disagree with the group's, or its group location holds another group.

    Every member of a Delta-coordinated share group must obey the same lock duration, delivery
    limit and in-flight window, so a member that asks for other values is refused, not obeyed.
    """
