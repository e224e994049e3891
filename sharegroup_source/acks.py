"""An acknowledgement: which record, and how it is settled (ACCEPT, RELEASE or REJECT).

The type is the state store's one :class:`~state_store.AckType`, so a decision read from the
``decisions`` table, an outcome a user records and an acknowledgement a coordinator sends are
the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from state_store import AckType

__all__ = ["Ack", "AckType", "record_keys", "releases"]

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


def releases(records: pa.Table) -> list[Ack]:
    """A RELEASE for every row of an output table."""
    return [Ack(*key, AckType.RELEASE) for key in record_keys(records)]
