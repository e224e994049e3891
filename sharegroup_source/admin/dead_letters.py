"""Dead letters as a person reads them: the records a group rejected (or archived at its delivery limit), with
their reason, delivery count and time, and their payload only when asked for.

A REJECTed record is archived by the share group and never delivered again, so its dead letter is the only copy
left: listing them needs neither Spark nor Kafka, only the Delta table (``state_store.dead_letters``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sharegroup_source.admin.model import iso_time
from state_store.dead_letters import DeadLetters

__all__ = ["DeadLetter", "read_dead_letters"]


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter. ``key``, ``value`` and ``headers`` are None unless the payload was asked for."""

    group_id: str | None  # None: written before dead letters named their group
    topic: str
    partition: int
    offset: int
    delivery_count: int | None
    reason: str | None
    time: datetime | None
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """As ``--json`` prints it: the time in ISO 8601 UTC, the payload's bytes in base64 (they may be any bytes)."""
        out: dict[str, Any] = {"group_id": self.group_id, "topic": self.topic, "partition": self.partition,
                               "offset": self.offset, "delivery_count": self.delivery_count, "reason": self.reason,
                               "time": None if self.time is None else iso_time(self.time)}
        if self.headers is not None:
            out.update(key_base64=_b64(self.key), value_base64=_b64(self.value),
                       headers=[{"key": k, "value_base64": _b64(v)} for k, v in self.headers])
        return out


def read_dead_letters(location: str, *, group: str | None = None, payload: bool = False, limit: int | None = None,
                      storage_options: dict[str, str] | None = None) -> list[DeadLetter]:
    """The dead letters a ``groupLocation``, a query's ``stateLocation`` or a ``deadLetterLocation`` keeps, oldest
    first (then by topic, partition and offset); only ``group``'s if given, at most ``limit`` (the newest).

    ``payload`` adds each record's key, value and headers. StateStoreError for a location with neither dead letters
    nor share-group state."""
    rows = DeadLetters.kept_at(location, storage_options=storage_options).read().to_pylist()
    if group is not None:
        rows = [row for row in rows if row["group_id"] == group]
    rows.sort(key=lambda r: (r["time"] is not None, r["time"] or 0, r["topic"], r["partition"], r["offset"]))
    if limit is not None:
        rows = rows[-limit:] if limit > 0 else []
    return [_letter(row, payload) for row in rows]


def _letter(row: dict[str, Any], payload: bool) -> DeadLetter:
    common = DeadLetter(row["group_id"], row["topic"], row["partition"], row["offset"], row["delivery_count"],
                        row["reason"], row["time"])
    if not payload:
        return common
    headers = tuple((h["key"], h["value"]) for h in row["headers"] or [])
    return replace(common, key=row["key"], value=row["value"], headers=headers)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")
