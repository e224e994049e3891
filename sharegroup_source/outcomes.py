"""Per-record outcomes from user code: ``acknowledge(batch, "REJECT", "invalid JSON", options=...)``.

Inside ``foreachBatch`` a user decides that some records must not simply be ACCEPTed: a
transient failure is RELEASEd (it comes back with a higher delivery count), a poison record is
REJECTed (archived by the broker, kept in the dead-letter table). The decision is written to the
``decisions`` table before the batch commits, so the acknowledgement that follows the commit,
even from a restarted driver, applies it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Literal

from pyspark.sql import DataFrame

from sharegroup_source.batch_interruption import short_on_stop
from sharegroup_source.errors import OptionError, OutcomeError
from sharegroup_source.options import StateOptions
from state_store import UNSETTLED, AckType, LedgerEntry, StateStore

__all__ = ["OUTCOMES", "Outcome", "acknowledge"]

#: An outcome by name, as :func:`sharegroup_source.acknowledge` takes it: the names of :class:`~state_store.AckType`
#: (which it takes too; a name is matched in any case). tests/test_public_names.py holds the two to one another.
Outcome = Literal["ACCEPT", "RELEASE", "REJECT"]
OUTCOMES = tuple(AckType)


def acknowledge(df: DataFrame, outcome: Outcome | AckType, reason: str | None = None, *,
                options: Mapping[str, Any]) -> int:
    """Record ``outcome`` for every row of ``df``, rows of the micro-batch being processed; the body of
    :func:`sharegroup_source.acknowledge`, which says more.

    ``options`` are the source's options (at least ``stateLocation`` and ``kafka.group.id``, and
    the ``stateStorage.*`` credentials of an object store): a batch DataFrame carries no trace of
    where its source keeps state. ``df`` needs the columns
    topic, partition, offset and epoch. Returns the number of records recorded.
    """
    decision = str(outcome).upper()  # an AckType is its name; a name in any case, as before the type
    if decision not in OUTCOMES:
        raise OutcomeError(f"outcome must be one of {', '.join(OUTCOMES)}, got {decision!r}")
    missing = [c for c in ("topic", "partition", "offset", "epoch") if c not in df.columns]
    if missing:
        raise OutcomeError(f"acknowledge() needs the source's columns {missing} in the DataFrame")
    try:
        state = StateOptions.parse(options)
    except OptionError as error:
        raise OutcomeError(f"options must be the source's: {error}") from None

    by_epoch: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
    with short_on_stop():  # a stop interrupts the batch's job here
        rows = df.select("topic", "partition", "offset", "epoch").collect()
    for row in rows:
        by_epoch[row.epoch].append((row.topic, row.partition, row.offset))
    store = StateStore(state.state_location, storage_options=dict(state.storage_options))
    for epoch, records in by_epoch.items():
        _check_current(store.ledger.get(state.group_id, epoch), epoch, records)
    for epoch, records in sorted(by_epoch.items()):
        store.decisions.record(state.group_id, epoch, [(t, p, o, decision, reason) for t, p, o in records])
    return sum(len(r) for r in by_epoch.values())


def _check_current(entry: LedgerEntry | None, epoch: int, records: list[tuple[str, int, int]]) -> None:
    if entry is None or entry.status not in UNSETTLED:
        state = "unknown to the ledger" if entry is None else f"already {entry.status}"
        raise OutcomeError(f"epoch {epoch} is not a batch being processed ({state}): outcomes can only be "
                           "recorded for rows of the current micro-batch")
    held = {(r.topic, r.partition): set(r.offsets()) for r in entry.ranges}
    for topic, partition, offset in records:
        if offset not in held.get((topic, partition), ()):
            raise OutcomeError(f"record {topic}[{partition}]@{offset} is not part of epoch {epoch}")
