"""The source's counters: what it acquired, acknowledged, lost and deduplicated.

They are cumulative for a query run and are written to the ``progress`` table after every
driver call that changed them, so tests, the demo and dashboards read them with any Delta
reader instead of scraping logs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

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
    #: Smallest time left on an acquisition lock when its epoch was acknowledged; negative when a
    #: lock had already expired, None before the first acknowledgement.
    min_lock_headroom_ms: int | None = None

    def snapshot(self) -> dict[str, int | None]:
        return asdict(self)
