"""What a delta-mode query sets on its Delta group before its member's first acquisition.

The same options as with the broker coordinator mean the Delta group's settings: ``groupConfig.*``
(its four settings, set where they differ, old and new logged; live members adopt them at their
next heartbeat) and ``startingOffsets`` (the group's ``share.auto.offset.reset``, set only while the
group has no position in the subscribed topics; a group its first member started where the option asks is said
so at INFO, one started elsewhere is warned about, naming that member).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from sharegroup_source.kafka.group_configs import DELTA_GROUP_CONFIGS, already_started, asked_by
from sharegroup_source.options import SourceOptions
from state_store.group import GroupStore

__all__ = ["set_up_group"]

log = logging.getLogger(__name__)

#: The Delta group's settings that are integers (the fourth, share.auto.offset.reset, is a word).
_INTEGERS = DELTA_GROUP_CONFIGS[:3]


def set_up_group(group: GroupStore, options: SourceOptions, first_run: bool) -> None:
    """Set the Delta group's settings the options ask for, in one commit (``startingOffsets`` on the query's
    ``first_run`` only, as Spark reads it)."""
    starting = options.starting_offsets if first_run else None
    wanted: dict[str, int | str] = {key: int(value) if key in _INTEGERS else value
                                    for key, value in options.group_configs.items()}
    if starting is not None:
        fetched = sorted(key for key in group.share_state.partitions() if key[0] in options.topics)
        if fetched:
            reset = group.settings.auto_offset_reset
            log.log(logging.INFO if reset == starting else logging.WARNING, "%s",
                    already_started(group.group_id, starting, fetched, str(options.group_location_shown),
                                    options.bootstrap_servers, reset=reset, started_by=_first_member(group)))
        else:
            wanted["share.auto.offset.reset"] = starting
    if not wanted:
        return
    for key, (old, new) in group.alter(wanted).items():
        log.warning("share group %s at %s: %s: %s -> %s, as the option %s asks (every member of the group follows "
                    "it)", group.group_id, group.location_shown, key, old, new, asked_by(key, starting))


def _first_member(group: GroupStore) -> str | None:
    """The member that started the group, in words: a worker (``DeltaShareConsumer``) that joined before the
    query tells a group nobody may have read from apart from one an earlier query consumed."""
    members = group.members()
    if not members:
        return None
    first = members[0]
    kind = {"worker": "a DeltaShareConsumer worker", "query": "a query"}.get(first.kind, f"a {first.kind}")
    joined = datetime.fromtimestamp(first.joined_at_ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"its first member, {kind} on {first.host or 'an unknown host'}, joined at {joined}"
