"""The source's offset in Spark's checkpoint: ``{"epoch": N, "state": <state id>}``.

Spark stores it as JSON and hands it back as a dict. The epoch names a ledger entry; the state
id (the first run's id, kept in the ledger's first FENCE row) ties the checkpoint to the state
location it was written with. Offsets written before state ids existed have none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EpochOffset"]


@dataclass(frozen=True)
class EpochOffset:
    epoch: int
    state: str | None = None

    @classmethod
    def of(cls, offset: Mapping[str, Any]) -> EpochOffset:
        """Spark's dict (or a line of its offset log, parsed) as an EpochOffset."""
        state = offset.get("state")
        return cls(int(offset["epoch"]), None if state is None else str(state))

    @staticmethod
    def is_ours(value: object) -> bool:
        """Whether a parsed offset-log line is this source's offset (a query may read other sources)."""
        return isinstance(value, dict) and "epoch" in value and value.keys() <= {"epoch", "state"}

    def json(self) -> dict[str, Any]:
        return {"epoch": self.epoch} if self.state is None else {"epoch": self.epoch, "state": self.state}
