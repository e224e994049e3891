"""The records at a table of positions, read back from the log on the driver.

For dead letters of records the driver never held: the Delta coordinator's executors read them, so the records a
batch's sink rejected are only positions on the driver, and the dead-letter table wants them whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sharegroup_source.acks import record_keys
from sharegroup_source.kafka.offset_reader import OffsetRangeReader
from sharegroup_source.schema import message_key, records_to_arrow

__all__ = ["read_back"]


def read_back(positions: pa.Table, client_config: Mapping[str, Any]) -> pa.Table:
    """The records at ``positions`` (``schema.POSITIONS``), read from the log, as the output table with headers.

    For dead letters of records the driver never held (the Delta coordinator's executors read
    them): a position the log does not hold has no record to keep and is left out.
    """
    counts = dict(zip(record_keys(positions), positions.column("deliveryCount").to_pylist(), strict=True))
    wanted: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in counts:
        wanted.setdefault((topic, partition), []).append(offset)
    with OffsetRangeReader(client_config, delivered=True) as reader:
        records = sorted((m for result in reader.read_many(wanted).values() for m in result.records), key=message_key)
    return records_to_arrow(records, 0, include_headers=True,
                            delivery_counts=[counts[message_key(m)] for m in records])
