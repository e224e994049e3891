"""The KIP-932 state machine, replayed against KIP-932's own examples step by step.

Source of the in-flight table (a): KIP-932 "Queues for Kafka", section on managing durable
share-partition state, the table that starts "Starting state of topic-partition with latest
offset 100" and "Fetch records 100-109". Its rows up to "Acknowledge 119 (consumer 3)" were
checked against the KIP text; the rows after it ("Fetch records 110, 120 (consumer 1)",
"Lock timeout elapsed 111, 112 (consumer 1)", "Acknowledge 113-118 (consumer 2)", "Fetch
records 111, 112 (consumer 3)", "Acknowledge 110 (consumer 1)", "Acknowledge 111, 112 (consumer
3)") could not be retrieved verbatim and are reconstructed from the KIP's rules, ending as the
KIP does with SPSO=120. The KIP gives no times; the times below put consumer 1's lock expiry
between the acquisitions as the table's order requires.

Picture (b), the share-partition with offsets 0-9, is likewise reconstructed from the KIP's
"in-flight records" description and its durable-state rules, not copied.
"""

from __future__ import annotations

import pytest

from state_store import (
    AckType,
    AcquiredRecords,
    InvalidRecordStateError,
    PersistedBatch,
    PersistedState,
    RecordState,
    ShareConfig,
    SharePartition,
)

AV, AQ, ACK, ARC = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
ACCEPT, RELEASE, REJECT = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT
LOCK_MS = 30_000


def cumulative(sp: SharePartition) -> tuple[int, int, list[tuple[int, int, RecordState, int]]]:
    """The KIP's "cumulative state" column: SPSO, SPEO and ranges by state and delivery count."""
    out: list[tuple[int, int, RecordState, int]] = []
    for b in sp.batches:
        if out and out[-1][2] is b.state and out[-1][3] == b.delivery_count:
            out[-1] = (out[-1][0], b.last, b.state, b.delivery_count)
        else:
            out.append((b.first, b.last, b.state, b.delivery_count))
    return sp.spso, sp.speo, out


def holders(sp: SharePartition) -> dict[int, str]:
    return {o: b.member_id for b in sp.batches if b.state is AQ for o in range(b.first, b.last + 1)}


def test_kip932_in_flight_table_step_by_step() -> None:
    sp = SharePartition(100, ShareConfig(lock_duration_ms=LOCK_MS))
    # Starting state of topic-partition with latest offset 100
    assert cumulative(sp) == (100, 100, [])
    assert sp.persisted() == PersistedState(100, ())

    # Fetch records 100-109
    assert sp.acquire("c0", 10, now_ms=0, log_end_offset=110) == [AcquiredRecords(100, 109, 1)]
    assert cumulative(sp) == (100, 110, [(100, 109, AQ, 1)])

    # Acknowledge 100-109 -> SPSO=110 (the KIP writes StartOffset 110, no state batches)
    sp.acknowledge("c0", [(100, 109, ACCEPT)], now_ms=500)
    assert cumulative(sp) == (110, 110, [])
    assert sp.persisted() == PersistedState(110, ())

    # Fetch records 110-119: consumer 1 gets 110-112, consumer 2 gets 113-118, consumer 3 gets 119
    assert sp.acquire("c1", 3, now_ms=1_000, log_end_offset=120) == [AcquiredRecords(110, 112, 1)]
    assert sp.acquire("c2", 6, now_ms=2_000, log_end_offset=120) == [AcquiredRecords(113, 118, 1)]
    assert sp.acquire("c3", 1, now_ms=3_000, log_end_offset=120) == [AcquiredRecords(119, 119, 1)]
    assert cumulative(sp) == (110, 120, [(110, 119, AQ, 1)])
    assert holders(sp) == {**dict.fromkeys(range(110, 113), "c1"), **dict.fromkeys(range(113, 119), "c2"),
                           119: "c3"}

    # Release 110 (consumer 1). The KIP's write carries the changed batch {110, 110, Available, 1};
    # our durable view is the whole window, Acquired persisted as Available with its count.
    sp.acknowledge("c1", [(110, 110, RELEASE)], now_ms=4_000)
    assert cumulative(sp) == (110, 120, [(110, 110, AV, 1), (111, 119, AQ, 1)])
    assert sp.persisted() == PersistedState(110, (PersistedBatch(110, 119, AV, 1),))

    # Acknowledge 119 (consumer 3)
    sp.acknowledge("c3", [(119, 119, ACCEPT)], now_ms=5_000)
    assert cumulative(sp) == (110, 120, [(110, 110, AV, 1), (111, 118, AQ, 1), (119, 119, ACK, 1)])
    assert sp.persisted() == PersistedState(110, (PersistedBatch(110, 118, AV, 1),
                                                  PersistedBatch(119, 119, ACK, 1)))

    # Fetch records 110, 120 (consumer 1)
    got = sp.acquire("c1", 10, now_ms=6_000, log_end_offset=121)
    assert got == [AcquiredRecords(110, 110, 2), AcquiredRecords(120, 120, 1)]
    assert cumulative(sp) == (110, 121, [(110, 110, AQ, 2), (111, 118, AQ, 1), (119, 119, ACK, 1),
                                         (120, 120, AQ, 1)])

    # Lock timeout elapsed 111, 112 (consumer 1): its first lock ends at 1_000 + 30_000
    assert sp.expire_locks(now_ms=31_000) == 2
    assert cumulative(sp) == (110, 121, [(110, 110, AQ, 2), (111, 112, AV, 1), (113, 118, AQ, 1),
                                         (119, 119, ACK, 1), (120, 120, AQ, 1)])

    # Acknowledge 113-118 (consumer 2), whose lock runs until 32_000
    sp.acknowledge("c2", [(113, 118, ACCEPT)], now_ms=31_500)
    assert cumulative(sp) == (110, 121, [(110, 110, AQ, 2), (111, 112, AV, 1), (113, 119, ACK, 1),
                                         (120, 120, AQ, 1)])

    # Fetch records 111, 112 (consumer 3)
    assert sp.acquire("c3", 10, now_ms=32_000, log_end_offset=121) == [AcquiredRecords(111, 112, 2)]
    assert cumulative(sp) == (110, 121, [(110, 112, AQ, 2), (113, 119, ACK, 1), (120, 120, AQ, 1)])
    assert holders(sp) == {110: "c1", 111: "c3", 112: "c3", 120: "c1"}

    # Acknowledge 110 (consumer 1) -> SPSO=111
    sp.acknowledge("c1", [(110, 110, ACCEPT)], now_ms=33_000)
    assert cumulative(sp) == (111, 121, [(111, 112, AQ, 2), (113, 119, ACK, 1), (120, 120, AQ, 1)])

    # Acknowledge 111, 112 (consumer 3) -> SPSO=120
    sp.acknowledge("c3", [(111, 112, ACCEPT)], now_ms=34_000)
    assert cumulative(sp) == (120, 121, [(120, 120, AQ, 1)])
    assert sp.persisted() == PersistedState(120, (PersistedBatch(120, 120, AV, 1),))


def test_kip932_offsets_0_to_9_picture_and_durable_state() -> None:
    """Offsets 0-9: below the SPSO archived, in flight every state, past the SPEO not yet delivered."""
    sp = SharePartition(0, ShareConfig(lock_duration_ms=LOCK_MS))
    assert sp.acquire("a", 5, now_ms=0, log_end_offset=10) == [AcquiredRecords(0, 4, 1)]
    assert sp.acquire("b", 3, now_ms=0, log_end_offset=10) == [AcquiredRecords(5, 7, 1)]
    sp.acknowledge("a", [(0, 1, ACCEPT), (2, 2, RELEASE), (3, 3, REJECT)], now_ms=100)
    sp.acknowledge("b", [(6, 6, ACCEPT)], now_ms=100)

    assert cumulative(sp) == (2, 8, [(2, 2, AV, 1), (3, 3, ARC, 1), (4, 5, AQ, 1), (6, 6, ACK, 1),
                                     (7, 7, AQ, 1)])
    states = [sp.state_of(o) for o in range(10)]
    assert [(s.state, s.delivery_count) for s in states] == [
        (ARC, 0), (ARC, 0),  # 0-1 acknowledged, then the SPSO moved past them: archived
        (AV, 1),  # 2 released: available again, one delivery counted
        (ARC, 1),  # 3 rejected
        (AQ, 1), (AQ, 1),  # 4 held by a, 5 held by b
        (ACK, 1),  # 6 acknowledged, but 4-5 keep the SPSO behind it
        (AQ, 1),  # 7 held by b
        (AV, 0), (AV, 0),  # 8-9 past the SPEO: never delivered
    ]
    assert [s.member_id for s in states[4:8]] == ["a", "b", None, "b"]

    # The durable form: the SPSO and batches of (first, last, state, delivery count). No members,
    # no locks; Acquired persists as Available with its count; nothing below the SPSO or past the SPEO.
    durable = sp.persisted()
    assert durable == PersistedState(2, (PersistedBatch(2, 2, AV, 1), PersistedBatch(3, 3, ARC, 1),
                                         PersistedBatch(4, 5, AV, 1), PersistedBatch(6, 6, ACK, 1),
                                         PersistedBatch(7, 7, AV, 1)))

    # A new leader recovering from the durable form hands out the same records, counting the lost locks.
    recovered = SharePartition.from_persisted(durable, ShareConfig(lock_duration_ms=LOCK_MS))
    assert recovered.persisted() == durable
    assert recovered.acquire("c", 10, now_ms=1_000, log_end_offset=10) == [
        AcquiredRecords(2, 2, 2), AcquiredRecords(4, 5, 2), AcquiredRecords(7, 7, 2),
        AcquiredRecords(8, 9, 1)]


def test_delivery_limit_archives_on_release_and_lock_expiry() -> None:
    sp = SharePartition(0, ShareConfig(delivery_attempt_limit=2, lock_duration_ms=10))
    sp.acquire("m", 2, now_ms=0, log_end_offset=2)
    sp.acknowledge("m", [(0, 1, RELEASE)], now_ms=1)
    assert sp.acquire("m", 2, now_ms=2, log_end_offset=2) == [AcquiredRecords(0, 1, 2)]
    assert sp.expire_locks(now_ms=12) == 2  # second delivery failed too: the limit is reached
    assert cumulative(sp) == (2, 2, [])
    assert sp.state_of(0).state is ARC


def test_recovered_count_at_the_limit_is_archived_not_delivered_again() -> None:
    durable = PersistedState(0, (PersistedBatch(0, 0, AV, 3), PersistedBatch(1, 1, AV, 1)))
    sp = SharePartition.from_persisted(durable, ShareConfig(delivery_attempt_limit=3))
    assert sp.acquire("m", 5, now_ms=0, log_end_offset=2) == [AcquiredRecords(1, 1, 2)]
    assert sp.spso == 1


def test_in_flight_window_is_bounded_by_max_record_locks() -> None:
    sp = SharePartition(0, ShareConfig(max_record_locks=5))
    assert sp.acquire("a", 100, now_ms=0, log_end_offset=100) == [AcquiredRecords(0, 4, 1)]
    assert sp.acquire("b", 100, now_ms=0, log_end_offset=100) == []
    sp.acknowledge("a", [(0, 1, ACCEPT)], now_ms=1)
    assert sp.acquire("b", 100, now_ms=2, log_end_offset=100) == [AcquiredRecords(5, 6, 1)]
    assert sp.speo - sp.spso == 5


def test_gaps_are_archived_and_skipped() -> None:
    sp = SharePartition(0)
    got = sp.acquire("a", 4, now_ms=0, log_end_offset=10, gaps=[1, 2, 5])
    assert got == [AcquiredRecords(0, 0, 1), AcquiredRecords(3, 4, 1), AcquiredRecords(6, 6, 1)]
    assert cumulative(sp) == (0, 7, [(0, 0, AQ, 1), (1, 2, ARC, 0), (3, 4, AQ, 1), (5, 5, ARC, 0),
                                     (6, 6, AQ, 1)])
    sp.acknowledge("a", [(0, 6, ACCEPT)], now_ms=1)  # one range over the gaps, as ShareAcknowledge allows
    assert cumulative(sp) == (7, 7, [])


def test_gap_found_among_released_records_is_archived() -> None:
    sp = SharePartition(0)
    sp.acquire("a", 3, now_ms=0, log_end_offset=3)
    sp.acknowledge("a", [(0, 2, RELEASE)], now_ms=1)
    assert sp.acquire("b", 3, now_ms=2, log_end_offset=3, gaps=[1]) == [AcquiredRecords(0, 0, 2),
                                                                          AcquiredRecords(2, 2, 2)]
    assert sp.state_of(1).state is ARC


def test_log_start_offset_moves_the_spso_past_deleted_records() -> None:
    sp = SharePartition(0)
    sp.acquire("a", 5, now_ms=0, log_end_offset=5)
    sp.acknowledge("a", [(0, 4, RELEASE)], now_ms=1)
    assert sp.acquire("b", 10, now_ms=2, log_end_offset=8, log_start_offset=3) == [
        AcquiredRecords(3, 4, 2), AcquiredRecords(5, 7, 1)]
    assert sp.spso == 3
    assert sp.lost_unread() == [(0, 2)], "records given back and not delivered again are lost"


def test_only_records_nobody_processed_or_holds_are_lost_to_the_log_start() -> None:
    """Acknowledged and held records are not lost; Available ones and those past the SPEO are, as one run each."""
    sp = SharePartition(0)
    sp.acquire("a", 6, now_ms=0, log_end_offset=6)
    sp.acknowledge("a", [(0, 1, ACCEPT), (2, 2, RELEASE), (4, 5, RELEASE)], now_ms=1)  # 3 stays held by a
    sp.acquire("b", 1, now_ms=2, log_end_offset=20, log_start_offset=10)
    assert sp.lost_unread() == [(2, 2), (4, 9)]
    assert sp.spso == 10


def test_acknowledgement_by_another_member_is_refused_and_changes_nothing() -> None:
    sp = SharePartition(0)
    sp.acquire("a", 3, now_ms=0, log_end_offset=3)
    before = sp.batches
    refused = r"member b cannot acknowledge offsets 0-2: .*ACQUIRED by member a"
    with pytest.raises(InvalidRecordStateError, match=refused):
        sp.acknowledge("b", [(0, 2, ACCEPT)], now_ms=1)
    with pytest.raises(InvalidRecordStateError, match="beyond the SPEO"):
        sp.acknowledge("a", [(0, 0, ACCEPT), (2, 3, ACCEPT)], now_ms=1)
    with pytest.raises(ValueError, match="overlap at offset 1"):
        sp.acknowledge("a", [(0, 1, ACCEPT), (1, 2, RELEASE)], now_ms=1)
    assert sp.batches == before  # all or nothing: offset 0 was not accepted either


def test_acknowledgement_of_non_acquired_or_expired_records_is_refused() -> None:
    sp = SharePartition(0, ShareConfig(lock_duration_ms=10))
    sp.acquire("a", 2, now_ms=0, log_end_offset=4)
    sp.acknowledge("a", [(0, 0, ACCEPT)], now_ms=1)
    with pytest.raises(InvalidRecordStateError, match="below the SPSO"):
        sp.acknowledge("a", [(0, 0, ACCEPT)], now_ms=2)
    with pytest.raises(InvalidRecordStateError, match="offsets 1-1: they are AVAILABLE"):
        sp.acknowledge("a", [(1, 1, ACCEPT)], now_ms=10)  # the lock ended at 10


def test_release_member_gives_back_only_its_records() -> None:
    sp = SharePartition(0)
    sp.acquire("a", 2, now_ms=0, log_end_offset=5)
    sp.acquire("b", 2, now_ms=0, log_end_offset=5)
    assert sp.release_member("a", now_ms=1) == 2
    assert cumulative(sp) == (0, 4, [(0, 1, AV, 1), (2, 3, AQ, 1)])
    assert holders(sp) == {2: "b", 3: "b"}


def test_release_member_keeps_the_spans_it_is_told_to_keep() -> None:
    sp = SharePartition(0, ShareConfig(lock_duration_ms=30_000))
    sp.acquire("a", 10, now_ms=0, log_end_offset=20)  # 0-9
    sp.acquire("b", 2, now_ms=0, log_end_offset=20)  # 10-11
    assert sp.release_member("a", now_ms=1, keep=[(2, 4), (8, 8)]) == 6
    assert [(b.first, b.last, b.state, b.member_id) for b in sp.batches] == [
        (0, 1, AV, None), (2, 4, AQ, "a"), (5, 7, AV, None), (8, 8, AQ, "a"), (9, 9, AV, None), (10, 11, AQ, "b")]
    assert sp.release_member("b", now_ms=1, keep=[(2, 4)]) == 2, "only the member's own records are kept"


def test_hand_over_makes_another_member_the_holder_of_live_locks_within_its_spans() -> None:
    sp = SharePartition(0, ShareConfig(lock_duration_ms=30_000))
    sp.acquire("run-0", 5, now_ms=0, log_end_offset=20)  # 0-4, until 30,000
    sp.acquire("run-0", 5, now_ms=10_000, log_end_offset=20)  # 5-9, until 40,000
    sp.acquire("w", 2, now_ms=10_000, log_end_offset=20)  # 10-11
    assert sp.hand_over("run-0", "run-1", [(0, 7), (10, 11)], now_ms=35_000) == 3  # 0-4 lapsed; not w's 10-11
    holders_now = {(b.first, b.last): (b.state, b.member_id, b.lock_deadline_ms) for b in sp.batches}
    assert holders_now == {(0, 4): (AV, None, None), (5, 7): (AQ, "run-1", 65_000), (8, 9): (AQ, "run-0", 40_000),
                           (10, 11): (AQ, "w", 40_000)}
    with pytest.raises(InvalidRecordStateError, match="ACQUIRED by member run-1"):
        sp.acknowledge("run-0", [(5, 7, ACCEPT)], now_ms=36_000)
    sp.acknowledge("run-1", [(5, 7, ACCEPT)], now_ms=36_000)


def test_adjacent_equal_batches_merge() -> None:
    sp = SharePartition(0)
    for first in range(0, 100, 10):
        sp.acquire("a", 10, now_ms=0, log_end_offset=100)
        assert len(sp.batches) == 1, first  # one lock window: one batch, however many fetches
    sp.acknowledge("a", [(o, o, RELEASE) for o in range(1, 100, 2)], now_ms=1)
    assert len(sp.batches) == 100
    sp.acknowledge("a", [(o, o, RELEASE) for o in range(0, 100, 2)], now_ms=1)
    assert sp.batches and len(sp.batches) == 1


def test_persisted_state_below_spso_is_dropped_and_acquired_is_rejected() -> None:
    durable = PersistedState(5, (PersistedBatch(0, 6, AV, 1), PersistedBatch(7, 7, ACK, 1)))
    assert SharePartition.from_persisted(durable).persisted() == PersistedState(
        5, (PersistedBatch(5, 6, AV, 1), PersistedBatch(7, 7, ACK, 1)))
    with pytest.raises(ValueError, match="durable form has no locks"):
        SharePartition.from_persisted(PersistedState(0, (PersistedBatch(0, 1, AQ, 1),)))


def test_renew_extends_only_the_members_live_locks_it_names() -> None:
    sp = SharePartition(0, ShareConfig(lock_duration_ms=30_000))
    sp.acquire("a", 5, now_ms=0, log_end_offset=25)  # 0-4, lock until 30,000
    sp.acquire("b", 5, now_ms=20_000, log_end_offset=25)  # 5-9, until 50,000
    sp.acquire("a", 5, now_ms=20_000, log_end_offset=25)  # 10-14, until 50,000
    sp.acquire("a", 5, now_ms=20_000, log_end_offset=25)  # 15-19, until 50,000: its answer never reached "a"
    assert sp.renew_member("a", [(0, 14)], now_ms=35_000) == 5  # 0-4 ended at 30,000: released, not renewed
    deadlines = {(b.first, b.last): (b.state, b.member_id, b.lock_deadline_ms) for b in sp.batches}
    assert deadlines == {(0, 4): (AV, None, None), (5, 9): (AQ, "b", 50_000), (10, 14): (AQ, "a", 65_000),
                         (15, 19): (AQ, "a", 50_000)}
    assert sp.renew_member("c", [(0, 24)], now_ms=35_000) == 0
    assert sp.renew_member("a", [(12, 30)], now_ms=40_000) == 8  # 12-14 and 15-19, not 10-11
    assert sp.state_of(11).lock_deadline_ms == 65_000 and sp.state_of(12).lock_deadline_ms == 70_000
    with pytest.raises(InvalidRecordStateError):
        sp.acknowledge("a", [(10, 11, ACCEPT)], now_ms=65_000)  # a renewed lock ends too
    assert sp.renew_member("a", [(10, 11)], now_ms=65_000) == 0


def test_archived_at_limit_reports_release_and_expiry_at_the_limit_not_reject() -> None:
    sp = SharePartition(0, ShareConfig(delivery_attempt_limit=2, lock_duration_ms=10))
    sp.acquire("m", 6, now_ms=0, log_end_offset=6)
    sp.acknowledge("m", [(0, 5, RELEASE)], now_ms=1)
    assert sp.acquire("m", 6, now_ms=2, log_end_offset=6) == [AcquiredRecords(0, 5, 2)]
    assert sp.archived_at_limit() == []  # first release: back to Available
    sp.acknowledge("m", [(0, 1, RELEASE), (2, 2, REJECT), (3, 3, ACCEPT)], now_ms=3)
    assert sp.archived_at_limit() == [AcquiredRecords(0, 1, 2)]  # the member dead-letters its REJECT
    assert sp.expire_locks(now_ms=12) == 2
    assert sp.archived_at_limit() == [AcquiredRecords(0, 1, 2), AcquiredRecords(4, 5, 2)]
    assert cumulative(sp) == (6, 6, [])


def test_archived_at_limit_reports_what_acquire_archives_and_starts_empty_when_rebuilt() -> None:
    durable = PersistedState(0, (PersistedBatch(0, 1, AV, 3), PersistedBatch(2, 2, AV, 1)))
    config = ShareConfig(delivery_attempt_limit=3)
    sp = SharePartition.from_persisted(durable, config)
    assert sp.acquire("m", 5, now_ms=0, log_end_offset=5, gaps=[3]) == [AcquiredRecords(2, 2, 2),
                                                                         AcquiredRecords(4, 4, 1)]
    assert sp.archived_at_limit() == [AcquiredRecords(0, 1, 3)]  # the gap at 3 is not reported
    assert SharePartition(sp.spso, config, sp.batches).archived_at_limit() == []


# -- what describing and resetting a group need ------------------------------------------------
def test_counts_by_state_sum_to_the_in_flight_window_and_skip_offsets_below_start() -> None:
    sp = SharePartition(0, ShareConfig(lock_duration_ms=LOCK_MS))
    sp.acquire("a", 4, now_ms=0, log_end_offset=10)  # 0-3
    sp.acquire("b", 4, now_ms=0, log_end_offset=10)  # 4-7
    sp.acknowledge("a", [(1, 1, ACCEPT), (2, 2, REJECT), (3, 3, RELEASE)], now_ms=1)
    assert cumulative(sp)[:2] == (0, 8)
    counts = {state: sp.count(state) for state in RecordState}
    assert counts == {AV: 1, AQ: 5, ACK: 1, ARC: 1}
    assert sum(counts.values()) == sp.speo - sp.spso
    assert sp.count(ACK, ARC, start=2) == 1 and sp.count(AQ, start=6) == 2
    assert sp.holders() == {"a": 1, "b": 4}
    sp.expire_locks(now_ms=LOCK_MS)
    assert sp.holders() == {}


def test_reset_discards_in_flight_state_and_is_refused_while_records_are_acquired() -> None:
    sp = SharePartition(0, ShareConfig(lock_duration_ms=LOCK_MS))
    sp.acquire("a", 5, now_ms=0, log_end_offset=10)
    sp.acknowledge("a", [(0, 1, RELEASE)], now_ms=1)
    with pytest.raises(InvalidRecordStateError, match="Acquired by a"):
        sp.reset(3)
    assert cumulative(sp) == (0, 5, [(0, 1, AV, 1), (2, 4, AQ, 1)])  # a refusal changes nothing
    sp.expire_locks(now_ms=LOCK_MS)
    assert sp.reset(3) == 5
    assert cumulative(sp) == (3, 3, []) and sp.persisted() == PersistedState(3, ())
    assert sp.acquire("b", 10, now_ms=LOCK_MS, log_end_offset=10) == [AcquiredRecords(3, 9, 1)]
    with pytest.raises(ValueError, match="negative"):
        SharePartition(0).reset(-1)


def test_remove_topic_deletes_its_rows_in_one_commit_and_a_check_can_refuse(tmp_path) -> None:
    from deltalake import DeltaTable

    from state_store.group import GroupStore

    group = GroupStore.open(str(tmp_path), "g", {})
    table = group.share_state

    def acquire_everything(partitions):
        for sp in partitions.values():
            sp.acquire("m", 5, now_ms=0, log_end_offset=5)

    table.update_all(acquire_everything, {("o'rders", 0): 0, ("o'rders", 1): 0, ("other", 0): 0})
    version = DeltaTable(str(tmp_path / "share_state")).version()

    seen = []

    def refuse(partitions):
        seen.append({key: sp.holders() for key, sp in partitions.items()})
        raise InvalidRecordStateError("held")

    with pytest.raises(InvalidRecordStateError, match="held"):
        table.remove_topic("o'rders", refuse)
    assert seen == [{("o'rders", 0): {"m": 5}, ("o'rders", 1): {"m": 5}, ("other", 0): {"m": 5}}]
    assert DeltaTable(str(tmp_path / "share_state")).version() == version
    assert table.remove_topic("o'rders") == ([0, 1], version + 1)
    assert sorted(table.partitions()) == [("other", 0)]
    assert table.remove_topic("o'rders") == ([], None)
