"""The one error type the state store raises for storage trouble, so callers can catch it whole."""

from __future__ import annotations

__all__ = ["StateStoreError"]


class StateStoreError(RuntimeError):
    """A state table is missing, corrupt, of another schema, unwritable, or too contended.

    The message names the table's path and what is wrong with it.
    """
