"""The source's counters: what it acquired, acknowledged, lost and deduplicated.

They are cumulative for a query run and are written to the ``progress`` table after every
driver call that changed them, so tests, the demo and dashboards read them with any Delta
reader instead of scraping logs.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field

__all__ = ["SourceCounters"]


@dataclass
class SourceCounters:
    acquired: int = 0
    accepted: int = 0
    released: int = 0
    rejected: int = 0
    ack_failures: int = 0
    redeliveries_deduped: int = 0
    dead_lettered: int = 0
    epochs: int = 0
    min_lock_headroom_ms: int = field(default=sys.maxsize)

    def snapshot(self) -> dict[str, int]:
        values = asdict(self)
        if values["min_lock_headroom_ms"] == sys.maxsize:
            values["min_lock_headroom_ms"] = -1
        return values
