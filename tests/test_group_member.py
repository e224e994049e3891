"""A Delta group member gives way to another member's renewal (unit tests, no Kafka, no Delta).

Every commit of a Delta group races every other on one table, so a member whose locks are in their
last third (its renewal keeps losing) gets the table: the others hold their commits off until its
renewal lands or the lock ends, unless locks of their own are that close too.
"""

from __future__ import annotations

import pytest

from sharegroup_source.coordinators.delta.member import GIVE_WAY_PAUSE_S, GiveWay, give_way
from state_store import SharePartition
from state_store.share_partition import ShareConfig

LOCK_MS = 30_000
THIRD_MS = LOCK_MS / 3


def held_at(now_ms: int, **members_acquired_ms_ago: int) -> SharePartition:
    """A share-partition where each member acquired 10 records that long before ``now_ms``."""
    sp = SharePartition(0, ShareConfig(lock_duration_ms=LOCK_MS))
    for member, ago_ms in members_acquired_ms_ago.items():
        assert sp.acquire(member, 10, now_ms - ago_ms, log_end_offset=1_000), member
    return sp


def test_a_member_gives_way_to_another_whose_lock_is_in_its_last_third():
    now = 1_000_000
    with pytest.raises(GiveWay) as way:
        give_way([held_at(now, mine=1_000), held_at(now, late=LOCK_MS - 2_000)], "mine", now, THIRD_MS)
    assert way.value.member_id == "late" and way.value.lapse_in_s == 2.0
    assert way.value.pause_s == GIVE_WAY_PAUSE_S


def test_a_member_whose_own_lock_is_that_close_goes_ahead():
    now = 1_000_000
    give_way([held_at(now, late=LOCK_MS - 2_000, mine=LOCK_MS - 1_000)], "mine", now, THIRD_MS)


@pytest.mark.parametrize("ago_ms", [1_000, THIRD_MS * 2 - 1, LOCK_MS, LOCK_MS + 5_000],
                         ids=["fresh", "two-thirds-left", "ended-now", "ended"])
def test_no_way_is_given_to_a_lock_with_more_than_a_third_left_or_one_that_ended(ago_ms):
    now = 1_000_000
    give_way([held_at(now, other=int(ago_ms))], "mine", now, THIRD_MS)
