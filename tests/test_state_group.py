"""The Delta coordinator's group state: settings, one-commit share-state updates, members.

Real Delta tables in a temp dir; no Kafka, no Spark.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from state_store import (
    AckType,
    AcquiredRecords,
    GroupSettings,
    GroupSettingsError,
    GroupStore,
    RecordState,
    SharePartition,
    StateStoreError,
)

TOPIC = "orders"
Key = tuple[str, int]


def version_of(store: GroupStore) -> int:
    return DeltaTable(os.path.join(store.location, "share_state")).version()


def acquire_everywhere(member: str, count: int, log_end_offset: int) -> Any:
    """A change for update_all: ``count`` records of every share-partition for ``member``."""
    def change(partitions: dict[Key, SharePartition]) -> dict[Key, list[AcquiredRecords]]:
        return {key: sp.acquire(member, count, now_ms=0, log_end_offset=log_end_offset)
                for key, sp in sorted(partitions.items())}
    return change


# -- share_state: one commit for the whole group ----------------------------------------------
def test_update_all_commits_every_changed_partition_in_one_commit(tmp_path: Path) -> None:
    store = GroupStore.open(str(tmp_path), "g", {})
    keys = {(TOPIC, 0): 0, (TOPIC, 1): 5, ("it's", 0): 0}  # a quote in a topic name must not break the predicate
    got, created = store.share_state.update_all(acquire_everywhere("m", 2, 10), keys)
    assert created == version_of(store)
    assert got == {(TOPIC, 0): [AcquiredRecords(0, 1, 1)], (TOPIC, 1): [AcquiredRecords(5, 6, 1)],
                   ("it's", 0): [AcquiredRecords(0, 1, 1)]}

    got, version = store.share_state.update_all(acquire_everywhere("m", 3, 10), keys)
    assert version == created + 1 == version_of(store)  # three rows changed, one commit
    assert got[(TOPIC, 1)] == [AcquiredRecords(7, 9, 1)]
    partitions = store.share_state.partitions()
    assert {key: (sp.spso, sp.speo) for key, sp in partitions.items()} == {
        (TOPIC, 0): (0, 5), (TOPIC, 1): (5, 10), ("it's", 0): (0, 5)}
    assert DeltaTable(os.path.join(store.location, "share_state")).to_pyarrow_table().num_rows == 3

    def accept_one(partitions: dict[Key, SharePartition]) -> None:
        partitions[(TOPIC, 1)].acknowledge("m", [(5, 9, AckType.ACCEPT)], now_ms=1)

    assert store.share_state.update_all(accept_one, keys)[1] == version + 1
    after = store.share_state.partitions()
    assert after[(TOPIC, 1)].spso == 10
    assert after[(TOPIC, 0)].batches == partitions[(TOPIC, 0)].batches  # the rows it did not touch are kept


def test_update_all_commits_nothing_when_nothing_changes(tmp_path: Path) -> None:
    store = GroupStore.open(str(tmp_path), "g", {})
    keys = {(TOPIC, 0): 0, (TOPIC, 1): 0}
    store.share_state.update_all(acquire_everywhere("m", 5, 5), keys)
    before = version_of(store)
    got, version = store.share_state.update_all(acquire_everywhere("m", 5, 5), keys)  # all locked already
    assert (got, version) == ({(TOPIC, 0): [], (TOPIC, 1): []}, None)
    assert store.share_state.update_all(lambda partitions: None, keys) == (None, None)
    assert version_of(store) == before


def test_update_all_writes_a_new_partitions_row_to_keep_its_start(tmp_path: Path) -> None:
    store = GroupStore.open(str(tmp_path), "g", {})
    assert store.share_state.update_all(lambda partitions: None, {(TOPIC, 0): 42})[1] is not None
    assert store.share_state.update_all(lambda partitions: None, {(TOPIC, 0): 99})[1] is None
    assert store.share_state.partitions()[(TOPIC, 0)].spso == 42  # the first sight's SPSO holds


def acquire_one_at_a_time(location: str, member: str, times: int, start: Any) -> list[tuple[str, int, int]]:
    """``times`` update_all acquisitions of one record from whichever share-partition has one."""
    store = GroupStore.open(location, "g", {"share.record.lock.duration.ms": 600_000})
    keys = {(TOPIC, 0): 0, (TOPIC, 1): 0}

    def take_one(partitions: dict[Key, SharePartition]) -> list[tuple[str, int, int]]:
        now = int(time.time() * 1000)
        for (topic, partition), sp in sorted(partitions.items()):
            got = sp.acquire(member, 1, now, log_end_offset=50)
            if got:
                return [(topic, partition, offset) for run in got for offset in range(run.first, run.last + 1)]
        return []

    start.wait()
    return [taken for _ in range(times) for taken in store.share_state.update_all(take_one, keys)[0]]


def test_two_processes_never_acquire_the_same_record(tmp_path: Path) -> None:
    location = str(tmp_path / "group")
    GroupStore.open(location, "g", {"share.record.lock.duration.ms": 600_000})
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(2) as pool:
        start = manager.Barrier(2)
        taken = pool.starmap(acquire_one_at_a_time, [(location, f"member-{i}", 50, start) for i in range(2)])
    assert [len(t) for t in taken] == [50, 50]
    assert not set(taken[0]) & set(taken[1])
    assert set(taken[0]) | set(taken[1]) == {(TOPIC, p, o) for p in (0, 1) for o in range(50)}
    partitions = GroupStore.existing(location).share_state.partitions()
    holders = {b.member_id for sp in partitions.values() for b in sp.batches}
    assert holders == {"member-0", "member-1"}
    assert all(b.state is RecordState.ACQUIRED for sp in partitions.values() for b in sp.batches)


# -- settings ---------------------------------------------------------------------------------
def test_first_member_creates_the_settings_and_later_ones_adopt_them(tmp_path: Path) -> None:
    location = str(tmp_path / "group")
    first = GroupStore.open(location, "g", {"share.delivery.count.limit": 3, "share.auto.offset.reset": "earliest"})
    expected = GroupSettings(delivery_count_limit=3, auto_offset_reset="earliest")
    assert first.settings == expected
    assert first.share_state.config == expected.share_config
    later = GroupStore.open(location, "g", {"share.delivery.count.limit": 3})
    assert (later.group_id, later.settings) == ("g", expected)
    assert GroupStore.open(location, "g", {}).settings == expected
    assert GroupStore.existing(location).settings == expected
    assert DeltaTable(os.path.join(location, "settings")).to_pyarrow_table().num_rows == 1


def test_a_member_asking_for_other_settings_is_refused(tmp_path: Path) -> None:
    location = str(tmp_path / "group")
    GroupStore.open(location, "g", {"share.delivery.count.limit": 5})
    refused = (f"group 'g' at {location} has share.delivery.count.limit=5; this member asks for 3: "
               "use the group's value or a new groupLocation")
    with pytest.raises(GroupSettingsError) as caught:
        GroupStore.open(location, "g", {"share.delivery.count.limit": 3})
    assert str(caught.value) == refused
    with pytest.raises(GroupSettingsError, match=r"lock.duration.ms=30000; this member asks for 1000, and "
                                                 r"share.auto.offset.reset=latest; this member asks for earliest"):
        GroupStore.open(location, "g", {"share.record.lock.duration.ms": 1000, "share.auto.offset.reset": "earliest"})


def test_a_location_holding_another_group_is_refused(tmp_path: Path) -> None:
    location = str(tmp_path / "group")
    GroupStore.open(location, "orders-group", {})
    with pytest.raises(GroupSettingsError, match="holds share group 'orders-group', not 'payments-group'"):
        GroupStore.open(location, "payments-group", {})


def test_settings_race_creates_one_row(tmp_path: Path) -> None:
    location = str(tmp_path / "group")
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(2) as pool:
        start = manager.Barrier(2)
        made = pool.starmap(open_settings, [(location, 3, start), (location, 7, start)])
    assert made[0] == made[1] in (3, 7)  # one created the group, the other adopted its value
    assert DeltaTable(os.path.join(location, "settings")).to_pyarrow_table().num_rows == 1


def open_settings(location: str, max_record_locks: int, start: Any) -> int:
    """The group's in-flight window as a member asking for ``max_record_locks`` finds it: its own
    if it created the group, else the group's, read after the refusal."""
    start.wait()
    try:
        return GroupStore.open(location, "g", {"share.partition.max.record.locks": max_record_locks}
                               ).settings.max_record_locks
    except GroupSettingsError:
        return GroupStore.existing(location).settings.max_record_locks


def test_existing_on_an_empty_location_raises_and_writes_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for location in (empty, tmp_path / "absent"):
        with pytest.raises(StateStoreError, match="no share group at"):
            GroupStore.existing(str(location))
    assert list(empty.iterdir()) == [] and not (tmp_path / "absent").exists()


def test_an_unknown_setting_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"share\.lock\.ms"):
        GroupStore.open(str(tmp_path), "g", {"share.lock.ms": 5})
    with pytest.raises(ValueError, match=r"share\.auto\.offset\.reset must be one of"):
        GroupStore.open(str(tmp_path), "g", {"share.auto.offset.reset": "by_duration:PT1H"})
    with pytest.raises(ValueError, match=r"share\.delivery\.count\.limit must be at least 1, got 0"):
        GroupStore.open(str(tmp_path), "g", {"share.delivery.count.limit": 0})
    assert not (tmp_path / "settings").exists()  # nothing was created for a member refused at the door


# -- members ----------------------------------------------------------------------------------
def test_members_join_heartbeat_and_leave_latest_row_wins(tmp_path: Path) -> None:
    store = GroupStore.open(str(tmp_path), "g", {})
    store.join("query-1", "query")
    store.join("worker-1", "worker")
    joined = {m.member_id: m for m in store.members()}
    time.sleep(0.002)
    store.heartbeat("query-1")
    store.leave("worker-1")
    store.leave("worker-1")  # already left: nothing written
    members = {m.member_id: m for m in GroupStore.existing(str(tmp_path)).members()}
    assert set(members) == {"query-1", "worker-1"}
    query, worker = members["query-1"], members["worker-1"]
    assert (query.kind, query.host, query.pid, query.left_at_ms) == ("query", joined["query-1"].host, os.getpid(),
                                                                     None)
    assert query.joined_at_ms == joined["query-1"].joined_at_ms < query.last_seen_ms
    assert worker.kind == "worker" and worker.left_at_ms is not None and worker.left_at_ms == worker.last_seen_ms
    with pytest.raises(StateStoreError, match=r"member worker-1 of group 'g' .* left"):
        store.heartbeat("worker-1")
    with pytest.raises(StateStoreError, match=r"member nobody .* never joined"):
        store.heartbeat("nobody")
    with pytest.raises(ValueError, match="member kind"):
        store.join("x", "spark")


def test_maintain_folds_member_rows_and_keeps_the_group(tmp_path: Path) -> None:
    store = GroupStore.open(str(tmp_path), "g", {"share.delivery.count.limit": 2})
    store.join("m", "query")
    for _ in range(3):
        store.heartbeat("m")
    store.share_state.update_all(acquire_everywhere("m", 1, 5), {(TOPIC, 0): 0})
    before = store.members()
    store.maintain()
    assert DeltaTable(os.path.join(str(tmp_path), "members")).to_pyarrow_table().num_rows == 1
    reopened = GroupStore.existing(str(tmp_path))
    assert reopened.members() == before
    assert reopened.settings.delivery_count_limit == 2
    assert reopened.share_state.partitions()[(TOPIC, 0)].speo == 1
