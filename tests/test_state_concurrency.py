"""Cooperative acquisition through Delta: four OS processes share one share-partition of 20,000 records.

Every acquire, acknowledge and release is a compare-and-swap commit on ``share_state``. Each process
logs what it acquired and settled with the Delta version of the commit that did it; versions order
all commits of all processes, so a record's lock windows can be checked for overlap exactly.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from state_store import AckType, ShareConfig, StateStore

RECORDS = 20_000
CHUNK = 250
PROCESSES = 4
TOPIC = "orders"
CONFIG = ShareConfig(delivery_attempt_limit=10, max_record_locks=4_000, lock_duration_ms=600_000)

# (event, first, last, delivery count or ack type, member, commit version)
Event = tuple[str, int, int, str, str, int]


def now_ms() -> int:
    return int(time.time() * 1000)


def member_loop(location: str, member: str, seed: int, start: Any) -> list[Event]:
    """Acquire chunks until the share-partition is done; release part of some chunks, accept the rest."""
    store = StateStore(location, share_config=CONFIG)
    rng = random.Random(seed)
    log: list[Event] = []
    start.wait()  # all members compete from the first acquisition on
    while True:
        got = store.share_state.acquire(TOPIC, 0, member, CHUNK, now_ms(), log_end_offset=RECORDS)
        if not got.records:
            sp = store.share_state.partition(TOPIC, 0)
            if sp is not None and sp.spso >= RECORDS:
                return log
            time.sleep(0.005)  # everything left is locked by others: wait for releases
            continue
        assert got.version is not None
        acks: list[tuple[int, int, AckType]] = []
        for run in got.records:
            log.append(("acquire", run.first, run.last, str(run.delivery_count), member, got.version))
            if rng.random() < 0.25 and run.delivery_count < 3:
                middle = (run.first + run.last) // 2
                acks.append((run.first, middle, AckType.RELEASE))
                if middle < run.last:
                    acks.append((middle + 1, run.last, AckType.ACCEPT))
            else:
                acks.append((run.first, run.last, AckType.ACCEPT))
        version = store.share_state.acknowledge(TOPIC, 0, member, acks, now_ms())
        assert version is not None
        log += [("settle", first, last, ack.value, member, version) for first, last, ack in acks]


def test_four_processes_share_one_partition_without_overlap(tmp_path: Path) -> None:
    location = str(tmp_path / "state")
    started = time.monotonic()
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(PROCESSES) as pool:
        start = manager.Barrier(PROCESSES)
        logs = pool.starmap(member_loop, [(location, f"member-{i}", i, start) for i in range(PROCESSES)])
    elapsed = time.monotonic() - started

    per_record: dict[int, list[tuple[int, str, str, str]]] = defaultdict(list)
    for log in logs:
        for event, first, last, detail, member, version in log:
            for offset in range(first, last + 1):
                per_record[offset].append((version, event, detail, member))
    assert sorted(per_record) == list(range(RECORDS))

    releases = 0
    for offset, events in per_record.items():
        events.sort()
        for k in range(0, len(events), 2):
            acquired, settled = events[k], events[k + 1] if k + 1 < len(events) else None
            # lock windows never overlap: each acquisition is followed by its holder's settlement
            # before the next acquisition of the record, in commit order
            assert acquired[1] == "acquire" and settled is not None, (offset, events)
            assert settled[1] == "settle" and settled[3] == acquired[3], (offset, events)
            assert settled[0] > acquired[0], (offset, events)
            assert acquired[2] == str(k // 2 + 1), (offset, events)  # delivery count = 1 + releases so far
        outcomes = [e[2] for e in events if e[1] == "settle"]
        assert outcomes[-1] == "ACCEPT" and outcomes.count("ACCEPT") == 1, (offset, events)  # exactly once
        releases += outcomes.count("RELEASE")

    sp = StateStore(location, share_config=CONFIG).share_state.partition(TOPIC, 0)
    assert sp is not None and (sp.spso, sp.speo, sp.batches) == (RECORDS, RECORDS, ())
    acquisitions = {i: sum(1 for e in log if e[0] == "acquire") for i, log in enumerate(logs)}
    overlapping = _holds_overlapping_another_process(logs)
    print(f"\n{PROCESSES} processes settled {RECORDS} records in {elapsed:.1f}s with {releases} releases; "
          f"{overlapping} acquisitions while another process held records; acquisitions per process: {acquisitions}")
    # the processes held records at the same time. Not every process need have won a race: a
    # compare-and-swap commit is not fair, and a process the machine's load slows loses them (one of
    # four acquired nothing in a 3.6 s run beside another whole suite)
    assert releases > 0 and overlapping > 0 and sum(1 for n in acquisitions.values() if n) >= 2, acquisitions


def _holds_overlapping_another_process(logs: list[list[Event]]) -> int:
    """Acquisitions committed while another process held records: between that process's acquire and settle."""
    holds = []  # (acquired at version, settled at version, process)
    for process, log in enumerate(logs):
        acquired = [version for event, *_, version in log if event == "acquire"]
        settled = sorted({version for event, *_, version in log if event == "settle"})
        holds += [(a, min(v for v in settled if v > a), process) for a in set(acquired)]
    return sum(1 for a, _, p in holds if any(q != p and b < a < c for b, c, q in holds))
