"""The admin's answers as text: the tables ``sharegroup describe``, ``reset-offsets`` and ``configure`` print.

Columns follow Kafka's ``kafka-share-groups`` (GROUP, TOPIC, PARTITION, START-OFFSET, LAG first;
COORDINATOR, STATE; MEMBER-ID, CLIENT-ID, HOST, ASSIGNMENT), then what only this product knows;
settings as ``kafka-configs --describe`` tells them apart: the group's own, the broker's, the default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sharegroup_source.admin.dead_letters import DeadLetter
from sharegroup_source.admin.model import ConfigPlan, GroupDescription, PartitionDescription, ResetPlan, shown_time

__all__ = ["config_table", "dead_letters_table", "describe_table", "reset_table"]


_PARTITION_COLUMNS: list[tuple[str, Callable[[GroupDescription, PartitionDescription], Any]]] = [
    ("GROUP", lambda d, p: d.group_id), ("TOPIC", lambda d, p: p.topic), ("PARTITION", lambda d, p: p.partition),
    ("START-OFFSET", lambda d, p: p.spso), ("LAG", lambda d, p: p.lag), ("ACQUIRED", lambda d, p: p.acquired),
    ("AVAILABLE", lambda d, p: p.available), ("ACKNOWLEDGED", lambda d, p: p.acknowledged),
    ("ARCHIVED", lambda d, p: p.archived), ("MAX-DELIVERY-COUNT", lambda d, p: p.max_delivery_count),
    ("LOG-START-OFFSET", lambda d, p: p.log_start_offset), ("LOG-END-OFFSET", lambda d, p: p.log_end_offset),
    ("OLDEST-LOCK-DEADLINE", lambda d, p: shown_time(p.oldest_lock_deadline)),
]


def describe_table(descriptions: Sequence[GroupDescription]) -> str:
    """Described groups as ``kafka-share-groups --describe`` prints them: groups, share-partitions (its
    GROUP, TOPIC, PARTITION, START-OFFSET, LAG columns first), members, settings (SOURCE ``group`` where
    set for the group, else ``broker`` or ``default``: whose value applies), then notes. Failed groups
    are left out: the caller reports their ``error``."""
    described = [d for d in descriptions if d.error is None or d.partitions]
    groups = _table(["GROUP", "KIND", "COORDINATOR", "STATE", "MEMBERS", "DEAD-LETTERS", "UNSETTLED-EPOCHS",
                     "LOCATION"],
                    [[d.group_id, d.kind, d.coordinator, d.state, len(d.members), d.dead_letter_count,
                      d.unsettled_epochs, d.location] for d in described])
    partitions = _table([name for name, _ in _PARTITION_COLUMNS],
                        [[cell(d, p) for _, cell in _PARTITION_COLUMNS] for d in described for p in d.partitions])
    members = _table(["GROUP", "MEMBER-ID", "CLIENT-ID", "HOST", "KIND", "LAST-SEEN", "RECORDS-HELD", "ASSIGNMENT"],
                     [[d.group_id, m.member_id, m.client_id, m.host, m.kind, shown_time(m.last_seen), m.records_held,
                       _assignment(m.assignment)] for d in described for m in d.members])
    settings = _table(["GROUP", "CONFIG", "VALUE", "SOURCE"],
                      [[d.group_id, s.key, _value(s.value), s.source] for d in described for s in d.settings])
    notes = [f"{d.group_id}: {p.topic}[{p.partition}]: {p.error}" for d in described for p in d.partitions if p.error]
    notes += [f"{d.group_id}: {d.note}" for d in described if d.note]
    return "\n\n".join(part for part in (groups, partitions, members, settings, "\n".join(notes)) if part)


def reset_table(plan: ResetPlan) -> str:
    """A reset plan as Kafka's tool prints one, and what became of it."""
    rows = [[plan.group_id, r.topic, r.partition, r.start_offset, r.new_start_offset, r.discarded]
            for r in plan.partitions]
    table = _table(["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "NEW-START-OFFSET", "IN-FLIGHT-DISCARDED"], rows)
    if not plan.executed:
        done = f"dry run (reset to {plan.to}): nothing changed; add --execute to reset"
    elif plan.version is None:  # a broker group
        done = f"reset to {plan.to}: done by the group's coordinator"
    else:
        done = f"reset to {plan.to}: committed as version {plan.version} of the group's share_state"
    return f"{table}\n\n{done}"


def config_table(plan: ConfigPlan) -> str:
    """A settings change, each setting's value and new value, and what became of it; ``(default)`` is a
    broker group's setting deleted: the broker's value applies again."""
    rows = [[plan.group_id, c.key, _value(c.old), "(default)" if c.new is None else _value(c.new)]
            for c in plan.changes]
    table = _table(["GROUP", "CONFIG", "VALUE", "NEW-VALUE"], rows)
    if not plan.changes:
        done = f"no change: share group '{plan.group_id}' already has these settings"
    elif not plan.executed:
        done = "dry run: nothing changed; add --execute to apply"
    elif plan.kind == "broker":
        done = "applied by the group's coordinator; its members follow the new settings"
    else:
        done = "applied: committed to the group's settings table; its members adopt them at their next heartbeat"
    return f"{table}\n\n{done}" if table else done


def dead_letters_table(letters: Sequence[DeadLetter]) -> str:
    """Dead letters as ``sharegroup dead-letters`` prints them; with their payload (``--payload``), the key and
    value as text where they are UTF-8, else as Python writes bytes."""
    payload = any(letter.headers is not None for letter in letters)
    headers = ["GROUP", "TOPIC", "PARTITION", "OFFSET", "DELIVERIES", "TIME", "REASON"]
    rows = [[d.group_id, d.topic, d.partition, d.offset, d.delivery_count, shown_time(d.time), d.reason]
            + ([_shown_bytes(d.key), _shown_bytes(d.value)] if payload else []) for d in letters]
    return _table(headers + (["KEY", "VALUE"] if payload else []), rows)


def _shown_bytes(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return repr(data)


def _value(value: str | None) -> str | None:
    """A setting's value as a cell: ``''`` for an empty one (no dead-letter topic), which a blank would hide."""
    return "''" if value == "" else value


def _assignment(keys: Sequence[tuple[str, int]]) -> str | None:
    """``orders:0,1;payments:3``, as Kafka's tool prints a member's assignment."""
    by_topic: dict[str, list[str]] = {}
    for topic, partition in keys:
        by_topic.setdefault(topic, []).append(str(partition))
    return ";".join(f"{topic}:{','.join(ps)}" for topic, ps in by_topic.items()) or None


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    """Left-aligned columns, ``-`` where a value is not known; empty when there are no rows."""
    if not rows:
        return ""
    cells = [headers, *[["-" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)

