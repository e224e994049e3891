"""Which (topic, partition, offset) this query already emitted, and in which epoch.

A record whose acknowledgement was lost comes back from the broker with a higher delivery
count. If its epoch reached the sink, emitting it again would duplicate it: the source
acknowledges the copy instead. Ranges, not per-record sets, keep this small, and an epoch
leaves the index once every record that was to come back has come back and been settled.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable

import numpy as np

from state_store import LedgerEntry, OffsetRange

__all__ = ["EmittedIndex"]


class EmittedIndex:
    def __init__(self, entries: Iterable[LedgerEntry] = ()):
        # per (topic, partition), sorted by first offset: firsts, (last, gaps, epoch), and the
        # running maximum of ``last`` so a lookup stops as soon as no earlier range can reach
        self._firsts: dict[tuple[str, int], list[int]] = {}
        self._ranges: dict[tuple[str, int], list[tuple[int, OffsetRange, int]]] = {}
        self._reach: dict[tuple[str, int], list[int]] = {}
        self._expected: dict[int, int] = {}  # per epoch, records that will come back
        # per epoch, records that came back before they were expected: an earlier run's epoch is expected back only
        # once Spark commits it in this run, and the broker may redeliver its records to this run's first fetch
        self._early: dict[int, int] = {}
        #: when records were last expected back (``time.monotonic()``; None: never)
        self.expected_at: float | None = None
        for entry in entries:
            self.add(entry)

    def expect_back(self, epoch: int, records: int) -> bool:
        """``records`` of ``epoch`` were not acknowledged: the broker will redeliver them. True when every one of
        them already came back and was settled (the epoch then leaves the index)."""
        self.expected_at = time.monotonic()
        left = records - self._early.pop(epoch, 0)
        if left <= 0:
            self.remove_epoch(epoch)
            return True
        self._expected[epoch] = left
        return False

    def came_back(self, epoch: int) -> bool:
        """One record of ``epoch`` came back and is settled; True when it was the last one to come
        (the epoch then leaves the index: no redelivery of it can come any more)."""
        left = self._expected.get(epoch)
        if left is None:
            self._early[epoch] = self._early.get(epoch, 0) + 1
            return False
        if left > 1:
            self._expected[epoch] = left - 1
            return False
        self.remove_epoch(epoch)
        return True

    def add(self, entry: LedgerEntry) -> None:
        for r in entry.ranges:
            key = (r.topic, r.partition)
            firsts = self._firsts.setdefault(key, [])
            ranges = self._ranges.setdefault(key, [])
            at = bisect.bisect_right(firsts, r.first)
            firsts.insert(at, r.first)
            ranges.insert(at, (r.last, r, entry.epoch))
            self._recompute_reach(key, at)

    def remove_epoch(self, epoch: int) -> None:
        self._expected.pop(epoch, None)
        self._early.pop(epoch, None)
        for key, ranges in self._ranges.items():
            keep = [i for i, (_, _, e) in enumerate(ranges) if e != epoch]
            if len(keep) != len(ranges):
                self._ranges[key] = [ranges[i] for i in keep]
                self._firsts[key] = [self._firsts[key][i] for i in keep]
                self._recompute_reach(key, 0)

    def _recompute_reach(self, key: tuple[str, int], start: int) -> None:
        ranges, reach = self._ranges[key], self._reach.setdefault(key, [])
        del reach[start:]
        for last, _, _ in ranges[start:]:
            reach.append(max(last, reach[-1]) if reach else last)

    def may_hold(self, topic: str, partition: int, offsets: np.ndarray) -> np.ndarray:
        """Per offset of one topic-partition, whether a range of the index spans it (``epoch_of`` says if it
        holds it): an acquisition's new records are told apart at once, not one by one."""
        firsts = self._firsts.get((topic, partition))
        if not firsts:
            return np.zeros(len(offsets), np.bool_)
        at = np.searchsorted(np.asarray(firsts), offsets, side="right") - 1
        return (at >= 0) & (np.asarray(self._reach[(topic, partition)])[np.maximum(at, 0)] >= offsets)

    def epoch_of(self, topic: str, partition: int, offset: int) -> int | None:
        """The latest epoch that emitted this record, or None if this query never emitted it."""
        key = (topic, partition)
        firsts = self._firsts.get(key)
        if not firsts:
            return None
        ranges, reach = self._ranges[key], self._reach[key]
        at = bisect.bisect_right(firsts, offset) - 1
        found = None
        while at >= 0 and reach[at] >= offset:
            last, held, epoch = ranges[at]
            if offset <= last and held.contains(offset) and (found is None or epoch > found):
                found = epoch
            at -= 1
        return found

    def __len__(self) -> int:
        return sum(len(r) for r in self._ranges.values())
