"""``enum.StrEnum`` on Python 3.10 too, where it does not exist yet (it came with 3.11).

The state tables store these enums' values as strings, and messages print them: a member must be
its value under ``str()`` and in f-strings, as a 3.11 StrEnum member is.
"""

from __future__ import annotations

import sys
from enum import Enum

__all__ = ["StrEnum"]

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10 (Spark's own images of Spark 4.x run it)

    class StrEnum(str, Enum):
        """A str whose ``str()`` and format are its value, as 3.11's StrEnum."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)
