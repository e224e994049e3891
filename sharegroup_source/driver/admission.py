"""The verdict on an acquisition: which records may make the next epochs, and which are settled on the spot, how.

An acquisition may bring records this query emitted before (their acknowledgement was lost:
settled on the spot as decided then, not emitted twice, unless they were RELEASEd on
purpose), records past ``maxDeliveries`` (rejected), records past an AvailableNow run's
target (given back) and the rest, admitted. Only rows that may be any of the first three are
looked at one by one. ``admit`` decides and does nothing: the acquisition cuts the epoch from
what it admits, and the epoch book settles the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sharegroup_source.acks import Ack, AckType, record_keys
from sharegroup_source.driver.emitted_index import EmittedIndex
from sharegroup_source.schema import by_partition

__all__ = ["MAX_DELIVERIES_REASON", "Verdict", "admit"]

MAX_DELIVERIES_REASON = "max deliveries exceeded"

Key = tuple[str, int, int]


@dataclass(frozen=True)
class Verdict:
    """What an acquisition's records become.

    ``admitted``: the records that may make epochs, in the order epochs take them (those on their last delivery
    attempt first: ``last_attempts`` of them). ``settle``: acknowledgements on the spot, of which ``rejected``
    names the REJECTs with their reasons (dead-lettered first). ``deduped``: of ``settle``, redeliveries of records
    this query emitted, as (the epoch that emitted it, record). ``came_back``: rows of ``admitted`` that an epoch
    emitted and RELEASEd on purpose, with that epoch. ``past_target``: a record lay past the AvailableNow target."""

    admitted: pa.Table
    last_attempts: int
    settle: list[Ack]
    rejected: dict[Key, str | None]
    deduped: list[tuple[int, Key]]
    came_back: dict[int, int]
    past_target: bool


def admit(records: pa.Table, emitted: EmittedIndex, decision: Callable[[int, Key], tuple[str, str | None]], *,
          max_deliveries: int | None, target: Mapping[tuple[str, int], int] | None, delivery_limit: int) -> Verdict:
    """The verdict on ``records``, against what this query ``emitted`` and the ``decision`` recorded for each.

    A redelivery of a record this query emitted gets the outcome decided for it then (ACCEPT unless recorded
    otherwise); one that was RELEASEd on purpose is admitted again. Records past ``max_deliveries`` are rejected;
    records past the AvailableNow ``target`` are given back, but on their last delivery attempt (``delivery_limit``:
    given back, the group would archive them unprocessed)."""
    admitted = ~_worth_a_look(records, emitted, max_deliveries, target)
    came_back: dict[int, int] = {}  # row of records -> the epoch that emitted (and released) it before
    settle: list[Ack] = []
    rejected: dict[Key, str | None] = {}
    deduped: list[tuple[int, Key]] = []
    past_target = False
    looked = np.flatnonzero(~admitted)
    candidates = records.take(pa.array(looked, pa.int64()))
    for row, key, count in zip(looked.tolist(), record_keys(candidates),
                               candidates.column("deliveryCount").to_pylist(), strict=True):
        epoch = emitted.epoch_of(*key)
        earlier = decision(epoch, key) if epoch is not None else None
        if epoch is not None and earlier is not None and earlier[0] != AckType.RELEASE:
            settle.append(Ack(*key, AckType(earlier[0])))
            deduped.append((epoch, key))
            if earlier[0] == AckType.REJECT:
                rejected[key] = earlier[1]
        elif max_deliveries and count > max_deliveries:
            settle.append(Ack(*key, AckType.REJECT))
            rejected[key] = MAX_DELIVERIES_REASON
        elif target is not None and key[2] >= target.get(key[:2], 0) and count < delivery_limit:
            settle.append(Ack(*key, AckType.RELEASE))
            past_target = True
        else:
            admitted[row] = True
            if epoch is not None:
                came_back[row] = epoch
    rows = np.flatnonzero(admitted)  # in acquisition order, but those on their last delivery attempt first
    last = records.column("deliveryCount").to_numpy()[rows] >= delivery_limit
    rows = np.concatenate([rows[last], rows[~last]])
    in_order = records if len(rows) == records.num_rows and not last.any() else records.take(
        pa.array(rows, pa.int64()))
    return Verdict(in_order, int(last.sum()), settle, rejected, deduped,
                   {at: came_back[row] for at, row in enumerate(rows.tolist()) if row in came_back}, past_target)


def _worth_a_look(records: pa.Table, emitted: EmittedIndex, max_deliveries: int | None,
                  target: Mapping[tuple[str, int], int] | None) -> np.ndarray:
    """Per row, whether it may be a redelivery of an emitted record, past ``max_deliveries`` or past the
    AvailableNow ``target``: found per topic-partition, without a loop per record."""
    look = np.zeros(records.num_rows, np.bool_)
    if max_deliveries:
        look |= records.column("deliveryCount").to_numpy() > max_deliveries
    if not len(emitted) and target is None:
        return look
    numbered = records.select(["topic", "partition", "offset"]).append_column(
        "row", pa.array(np.arange(records.num_rows), pa.int64()))
    for topic, partition, rows in by_partition(numbered):
        offsets = rows.column("offset").to_numpy()
        hit = emitted.may_hold(topic, partition, offsets)
        if target is not None:
            hit |= offsets >= target.get((topic, partition), 0)
        look[rows.column("row").to_numpy()[hit]] = True
    return look
