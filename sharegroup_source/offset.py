"""The source's offset in Spark's checkpoint: ``{"v": 1, "epoch": N, "state": <state id>}``.

Spark stores it as JSON and hands it back as a dict. The epoch names a ledger entry; the state
id (the first run's id, kept in the ledger's first FENCE row) ties the checkpoint to the state
location it was written with. Offsets written before state ids existed have none.

``v`` is the offset's format version (OFFSET_FORMAT): a checkpoint outlives the release that
wrote it. Offsets written before versions have none and are version 1, the same form. An offset
of a version this release does not read is refused (StateMismatchError), never read as another;
``v`` and ``epoch`` stay in every version, so an offset of any version is known as this source's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sharegroup_source.errors import StateMismatchError
from state_store.format_version import FormatVersion

__all__ = ["OFFSET_FORMAT", "EpochOffset"]

#: The offset's format version this release writes and reads ("v"; absent: 1).
OFFSET_FORMAT = FormatVersion(current=1)
_KEYS = frozenset({"v", "epoch", "state"})


@dataclass(frozen=True)
class EpochOffset:
    epoch: int
    state: str | None = None
    #: None: the offset carried no "v" (version 1). Kept absent, so that an offset handed back unchanged is the same
    #: JSON: Spark compares offsets as text to tell whether a batch has new data.
    version: int | None = OFFSET_FORMAT.current

    @classmethod
    def of(cls, offset: Mapping[str, Any]) -> EpochOffset:
        """Spark's dict (or a line of its offset log, parsed) as an EpochOffset; StateMismatchError for an offset of a
        format version this release does not read."""
        shown = f"the sharegroup offset {json.dumps(offset)} in Spark's checkpoint"
        version = OFFSET_FORMAT.read(offset.get("v"), shown, "start a new checkpoint with a new stateLocation",
                                     StateMismatchError)
        state = offset.get("state")
        return cls(int(offset["epoch"]), None if state is None else str(state), version if "v" in offset else None)

    @staticmethod
    def is_ours(value: object) -> bool:
        """Whether a parsed offset-log line is this source's offset (a query may read other sources). One with ``v``
        and ``epoch`` is, whatever else a newer version put in it: it is refused then, not taken for another's."""
        return isinstance(value, dict) and "epoch" in value and (value.keys() <= _KEYS or "v" in value)

    def json(self) -> dict[str, Any]:
        offset: dict[str, Any] = {} if self.version is None else {"v": self.version}
        offset["epoch"] = self.epoch
        if self.state is not None:
            offset["state"] = self.state
        return offset
