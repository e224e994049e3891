"""What a member of a Delta-coordinated group knows it holds: the locks its renewer may extend.

A member renews its locks while it lives (KIP-1222's RENEW), and a RENEW names its records: those
the member was handed and has not settled. An acquisition whose commit raised may still have
landed (the write reached storage, its answer did not reach the member); the member was never
told of those records, so nobody would settle them, and renewing "everything the member holds"
would keep them locked for as long as it lives. Renewing only what it knows leaves them to expire
after one lock duration, as a broker's records do when a ShareFetch answer is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["Holdings"]

Key = tuple[str, int]


class Holdings:
    """Offset ranges per share-partition: added when an acquisition's answer arrives, removed when settled."""

    def __init__(self) -> None:
        self._ranges: dict[Key, list[tuple[int, int]]] = {}
        self._lock = threading.Lock()  # the member's commits and the renewer read what the caller's calls change

    def add(self, key: Key, first: int, last: int) -> None:
        with self._lock:
            self._ranges[key] = _merged([*self._ranges.get(key, []), (first, last)])

    def remove(self, settled: Mapping[Key, Sequence[tuple[int, int, object]]]) -> None:
        """Forget settled ranges (first, last, how), held or not: either way the member no longer holds them."""
        with self._lock:
            for key, runs in settled.items():
                kept = _without(self._ranges.get(key, []), ((first, last) for first, last, _ in runs))
                if kept:
                    self._ranges[key] = kept
                else:
                    self._ranges.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._ranges.clear()

    def any(self) -> bool:
        with self._lock:
            return bool(self._ranges)

    def of(self, key: Key) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._ranges.get(key, []))


def _merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def _without(ranges: list[tuple[int, int]], removed: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    for cut_first, cut_last in removed:
        kept: list[tuple[int, int]] = []
        for first, last in ranges:
            if last < cut_first or first > cut_last:
                kept.append((first, last))
                continue
            if first < cut_first:
                kept.append((first, cut_first - 1))
            if last > cut_last:
                kept.append((cut_last + 1, last))
        ranges = kept
    return ranges
