"""An acknowledgement: which record, and how it is settled (ACCEPT, RELEASE or REJECT).

The type is the state store's one :class:`~state_store.AckType`, so a decision read from the
``decisions`` table, an outcome a user records and an acknowledgement a coordinator sends are
the same values. Acknowledgements travel to a coordinator as runs of consecutive offsets
settled alike: an epoch's are a few runs however many records it holds, so settling it costs
per run, not per record, wherever the coordinator can take ranges.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from sharegroup_source.schema import by_partition, spans
from state_store import AckType

__all__ = ["Ack", "AckRun", "AckType", "record_keys", "releases", "runs_of"]

@dataclass(frozen=True)
class Ack:
    topic: str
    partition: int
    offset: int
    type: AckType = AckType.ACCEPT


def record_keys(records: pa.Table) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row of an output table."""
    return list(zip(records.column("topic").to_pylist(), records.column("partition").to_pylist(),
                    records.column("offset").to_pylist(), strict=True))


@dataclass(frozen=True)
class AckRun:
    """Offsets ``first..last`` of one share-partition, all settled as ``type``."""

    topic: str
    partition: int
    first: int
    last: int
    type: AckType = AckType.ACCEPT

    @property
    def size(self) -> int:
        return self.last - self.first + 1


def runs_of(acks: Iterable[Ack]) -> list[AckRun]:
    """``acks`` as runs, in position order: neighbouring offsets of one type make one run."""
    runs: list[AckRun] = []
    for ack in sorted(acks, key=lambda a: (a.topic, a.partition, a.offset)):
        last = runs[-1] if runs else None
        if last and (last.topic, last.partition, last.last + 1, last.type) == (ack.topic, ack.partition, ack.offset,
                                                                                ack.type):
            runs[-1] = AckRun(ack.topic, ack.partition, last.first, ack.offset, ack.type)
        else:
            runs.append(AckRun(ack.topic, ack.partition, ack.offset, ack.offset, ack.type))
    return runs


def releases(records: pa.Table) -> list[AckRun]:
    """A RELEASE for every row of an output table (or of positions), as runs; no Python work per record."""
    return [AckRun(topic, partition, first, last, AckType.RELEASE)
            for topic, partition, rows in by_partition(records) for first, last in spans(rows.column("offset"))]
