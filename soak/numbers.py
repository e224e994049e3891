"""A set of record numbers at one byte per number: the soak's bookkeeping of what it produced and where it went.

The soak's record numbers run from 0 upwards without holes, so a byte array indexed by number holds
any set of them. A Python ``set`` of ints costs about 80 bytes a number: the long soak (two lanes,
hours at 100 records/s) would grow the driver's Python by hundreds of MB for its own bookkeeping,
hiding the growth it is there to find. Counting what is in one set and not in others is a numpy
reduction over the arrays, cheap enough to run every few minutes on millions of numbers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

import numpy as np

__all__ = ["NumberSet"]


class NumberSet:
    """Non-negative ints, one byte each up to the largest added; not thread-safe (callers hold their own lock)."""

    def __init__(self, held: bytes | bytearray = b""):
        """``held``: a byte per number from 0, non-zero where the number is in the set."""
        self._bytes = bytearray(held)
        self._count = len(self._bytes) - self._bytes.count(0)

    @classmethod
    def of(cls, numbers: Iterable[int]) -> NumberSet:
        made = cls()
        for number in numbers:
            made.add(number)
        return made

    def add(self, number: int) -> bool:
        """Add ``number``; whether it was there already."""
        if number >= len(self._bytes):
            self._bytes.extend(bytes(max(number + 1 - len(self._bytes), len(self._bytes) // 4, 1024)))
        present = self._bytes[number] != 0
        if not present:
            self._bytes[number] = 1
            self._count += 1
        return present

    def __contains__(self, number: object) -> bool:
        return isinstance(number, int) and 0 <= number < len(self._bytes) and self._bytes[number] != 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        return iter(np.flatnonzero(self.array()).tolist())

    def to_set(self) -> set[int]:
        return set(self)

    def copy(self) -> NumberSet:
        return NumberSet(self._bytes)

    def array(self, size: int | None = None) -> np.ndarray:
        """The membership of numbers ``0 .. size-1`` as a bool array (a copy, padded with False)."""
        size = len(self._bytes) if size is None else size
        held = np.frombuffer(bytes(self._bytes[:size]), dtype=np.uint8).astype(bool)
        return held if len(held) == size else np.concatenate([held, np.zeros(size - len(held), dtype=bool)])

    @property
    def nbytes(self) -> int:
        """Memory this set holds (its array's allocation included)."""
        return sys.getsizeof(self._bytes)

    def count_missing(self, *places: NumberSet, below: int | None = None) -> int:
        """How many numbers of this set (below ``below``) none of ``places`` holds."""
        size = len(self._bytes) if below is None else below
        missing = self.array(size)
        for place in places:
            missing &= ~place.array(size)
        return int(missing.sum())

    def count_common(self, other: NumberSet) -> int:
        """How many numbers both sets hold."""
        return int((self.array() & other.array(len(self._bytes))).sum())
