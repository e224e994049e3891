"""(g) Bounded state: what a long-lived query's state costs a restarting driver, and one epoch's ledger row.

    python -m bench.bounded_state --measure <stateLocation>   (used by the bench: one restart, JSON on stdout)

Restart: a state location is built as a driver leaves it after ``epochs`` epochs of ``records``
contiguous records each (one offset range per epoch, a few redeliveries, maintenance every
MAINTAIN_EVERY_EPOCHS epochs, the newest epochs unsettled or ACK_FAILED), then fresh processes
do what ``MicroBatchDriver.__init__`` does with the state before it touches Kafka: open the
StateStore, wait for the previous member, fence, read the live and the RELEASED epochs, build
the EmittedIndex. Wall time and the peak RSS increase are compared with the same restart on a
10-epoch state: a bounded state keeps that ratio small.

Row size: one epoch of a compacted topic (10,000 records spread over 1,000,000 offsets) in the
current ledger encoding (gap runs, counts other than 1) against the first versions' encoding
(every missing offset, one count per record), as bytes of the ledger table's data on disk.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa

from sharegroup_source.coordinators.broker.handover import await_previous_member
from sharegroup_source.driver.emitted_index import EmittedIndex
from sharegroup_source.driver.micro_batch import MAINTAIN_EVERY_EPOCHS
from state_store import LedgerEntry, OffsetRange, StateStore
from state_store.ledger import LEDGER_SCHEMA, entry_row, epoch_status
from state_store.table_cache import Snapshot
from state_store.table_commit import Write

__all__ = ["bounded_state", "ledger_row_size", "restart_cost"]

QUERY = "bench"
TOPIC = "orders"
PARTITIONS = 4
#: records per epoch delivered a second time (their ack was lost once): kept as (offset, count) pairs
REDELIVERED_PER_EPOCH = 3
#: the newest epochs' statuses, oldest first, as a driver that died leaves them; every older one is ACKED
TAIL_STATUSES = ("ACK_FAILED", "ACK_FAILED", "EMITTED", "EMITTED", "ACQUIRED")
#: the ledger reads of MicroBatchDriver.__init__: the live epochs (EmittedIndex and foreign epochs) ...
LIVE_STATUSES = ("ACQUIRED", "EMITTED", "ACK_FAILED")
#: ... and the epochs the previous run RELEASEd on stop
RELEASED_STATUSES = ("RELEASED",)
#: fresh processes per state: start time is noisy, the median is reported
RESTARTS = 3
#: the compacted topic of the row-size figure
SPARSE_RECORDS, SPARSE_OFFSETS = 10_000, 1_000_000


# -- building a state as a driver leaves it ------------------------------------------------------
def _final_status(epoch: int, epochs: int) -> str:
    tail = epoch - (epochs - len(TAIL_STATUSES)) - 1
    return TAIL_STATUSES[tail] if tail >= 0 else "ACKED"


def _entry(epoch: int, records: int, status: str = "ACQUIRED") -> LedgerEntry:
    """Epoch ``epoch``: ``records`` contiguous offsets of one partition, right after that partition's last epoch."""
    partition = epoch % PARTITIONS
    first = (epoch - 1) // PARTITIONS * records
    step = max(records // REDELIVERED_PER_EPOCH, 1)
    redelivered = tuple((first + at, 2) for at in range(1, records, step))[:REDELIVERED_PER_EPOCH]
    ranges = (OffsetRange(TOPIC, partition, first, first + records - 1, redelivered=redelivered),)
    return LedgerEntry(QUERY, epoch, ranges, "run-build", epoch * 1_000, epoch * 1_000 + 30_000, status)


def _append(store: StateStore, rows: Callable[[int], list[dict[str, Any]]]) -> None:
    """One ledger commit of ``rows(version)``: the rows carry the Delta version that adds them, as the Ledger's do."""
    def plan(snapshot: Snapshot) -> Write:
        return Write(pa.Table.from_pylist(rows(snapshot.next_version), schema=LEDGER_SCHEMA))

    store.ledger.table.commit(plan)


def _status_rows(epochs: range, status: Callable[[int], str]) -> Callable[[int], list[dict[str, Any]]]:
    return lambda version: [{"query_id": QUERY, "epoch": e, "kind": "STATUS", "status": status(e),
                             "commit_version": version, "updated_at_ms": e * 1_000} for e in epochs]


def _write_block(store: StateStore, block: range, records: int, epochs: int) -> None:
    """Epochs the driver maintained since: batched into three commits (entries, EMITTED, settled), which
    maintenance folds into the same one row per epoch the driver's three commits per epoch become.

    ``entry_row`` is the row ``Ledger.write_epoch`` writes, so the encoding is the current one."""
    _append(store, lambda version: [entry_row(_entry(e, records), version, e * 1_000) for e in block])
    _append(store, _status_rows(block, lambda _: "EMITTED"))
    _append(store, _status_rows(block, lambda e: _final_status(e, epochs)))


def _write_like_the_driver(store: StateStore, block: range, records: int, epochs: int) -> None:
    """Epochs after the last maintenance, commit by commit through the Ledger as a steady driver writes them:
    one commit per epoch, its entry carrying the previous epoch's final status (``settled``); the newest
    epoch keeps the status it was written with. The restart reads these as a couple of hundred small data
    files, which batching would hide."""
    for epoch in block:
        previous = epoch - 1
        settled = {previous: epoch_status(_final_status(previous, epochs))} if previous in block else {}
        store.ledger.write_epoch(_entry(epoch, records), settled=settled)


def build_state(location: str, epochs: int, records: int) -> dict[str, Any]:
    """A state location as a driver leaves it after ``epochs`` epochs; returns build time and footprint."""
    started = time.perf_counter()
    store = StateStore(location)
    store.ledger.fence(QUERY, "run-build")
    maintained = (epochs - len(TAIL_STATUSES)) // MAINTAIN_EVERY_EPOCHS * MAINTAIN_EVERY_EPOCHS
    rounds_s = []  # what a maintenance round costs the driver's background thread (no batch waits for it)
    for start in range(1, maintained + 1, MAINTAIN_EVERY_EPOCHS):
        _write_block(store, range(start, start + MAINTAIN_EVERY_EPOCHS), records, epochs)
        began = time.perf_counter()
        store.maintain()
        rounds_s.append(time.perf_counter() - began)
    _write_like_the_driver(store, range(maintained + 1, epochs + 1), records, epochs)
    footprint = store.footprint()["ledger"]
    return {"epochs": epochs, "records_per_epoch": records, "build_s": round(time.perf_counter() - started, 1),
            "maintenances": maintained // MAINTAIN_EVERY_EPOCHS,
            "maintenance_s_p50": round(statistics.median(rounds_s), 3) if rounds_s else None,
            "maintenance_s_max": round(max(rounds_s), 3) if rounds_s else None,
            "ledger_files": footprint.files, "ledger_bytes": footprint.bytes}


# -- one restart, in a fresh process -------------------------------------------------------------
def _reset_peak_rss() -> bool:
    """Linux lets a process reset its peak RSS (VmHWM): the peak then covers the restart alone."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def restart_once(location: str) -> dict[str, Any]:
    """What MicroBatchDriver.__init__ does with the state before its share consumer exists."""
    gc.collect()
    process = psutil.Process()
    before = process.memory_info().rss
    exact = _reset_peak_rss()
    started = time.perf_counter()
    store = StateStore(location)
    await_previous_member(store.progress, QUERY, 0)
    store.ledger.fence(QUERY, uuid.uuid4().hex)
    live = store.ledger.entries(QUERY, statuses=LIVE_STATUSES)
    emitted = EmittedIndex(live)
    released = {e.epoch: e for e in store.ledger.entries(QUERY, statuses=RELEASED_STATUSES)}
    elapsed = time.perf_counter() - started
    peak = _peak_rss() if exact else max(_peak_rss(), process.memory_info().rss)
    return {"start_s": round(elapsed, 3), "peak_rss_increase_mb": round((peak - before) / 2**20, 1),
            "held_rss_increase_mb": round((process.memory_info().rss - before) / 2**20, 1),
            "live_epochs": len(live), "indexed_ranges": len(emitted), "released_epochs": len(released),
            "peak_is_exact": exact}


def _restart_in_fresh_process(location: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "bench.bounded_state", "--measure", location],
                          capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"restart measurement failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def restart_cost(location: str, repeats: int = RESTARTS) -> dict[str, Any]:
    """The median restart of ``repeats`` fresh processes (each also writes its fence row, as a driver does)."""
    runs = [_restart_in_fresh_process(location) for _ in range(repeats)]
    median = {key: statistics.median(run[key] for run in runs)
              for key in ("start_s", "peak_rss_increase_mb", "held_rss_increase_mb")}
    return {**median, **{k: runs[-1][k] for k in ("live_epochs", "indexed_ranges", "released_epochs",
                                                   "peak_is_exact")},
            "runs_start_s": [run["start_s"] for run in runs]}


# -- one epoch's ledger row ----------------------------------------------------------------------
def _compacted_records(seed: int = 7) -> list[tuple[int, int]]:
    """What survives compaction: SPARSE_RECORDS offsets of SPARSE_OFFSETS, the first and last among them,
    a few redelivered."""
    inner = random.Random(seed).sample(range(1, SPARSE_OFFSETS - 1), SPARSE_RECORDS - 2)
    offsets = [0, *sorted(inner), SPARSE_OFFSETS - 1]
    again = set(offsets[1::SPARSE_RECORDS // REDELIVERED_PER_EPOCH][:REDELIVERED_PER_EPOCH])
    return [(o, 2 if o in again else 1) for o in offsets]


def _legacy_row(records: list[tuple[int, int]], version: int) -> dict[str, Any]:
    """The row the first versions wrote: every missing offset, one delivery count per record, no encoding."""
    present = {o for o, _ in records}
    first, last = records[0][0], records[-1][0]
    return {"query_id": QUERY, "epoch": 1, "kind": "ENTRY", "status": "ACQUIRED", "commit_version": version,
            "updated_at_ms": 0, "member_id": "run-1", "acquired_at_ms": 0, "lock_deadline_ms": 30_000,
            "ranges": [{"topic": TOPIC, "partition": 0, "first_offset": first, "last_offset": last,
                        "gaps": [o for o in range(first, last + 1) if o not in present],
                        "delivery_counts": [c for _, c in records]}],
            "ranges_encoding": None}


def ledger_row_size(root: Path) -> dict[str, Any]:
    """Bytes of the ledger table's data after one compacted-topic epoch, in either encoding."""
    records = _compacted_records()
    entry = LedgerEntry(QUERY, 1, (OffsetRange.of(TOPIC, 0, records),), "run-1", 0, 30_000, "ACQUIRED")
    current = StateStore(str(root / "current"))
    current.ledger.write_epoch(entry)
    legacy = StateStore(str(root / "legacy"))
    legacy.ledger.table.commit(lambda s: Write(pa.Table.from_pylist([_legacy_row(records, s.next_version)],
                                                                    schema=LEDGER_SCHEMA)))
    read_back = legacy.ledger.get(QUERY, 1)
    if read_back is None or read_back.ranges != entry.ranges:
        raise RuntimeError("the first versions' row does not read back as the same epoch")
    sizes = {name: store.footprint()["ledger"].bytes for name, store in (("current", current), ("legacy", legacy))}
    range_ = entry.ranges[0]
    return {"records": SPARSE_RECORDS, "offsets": SPARSE_OFFSETS, "gap_runs": len(range_.gaps),
            "missing_offsets": range_.last - range_.first + 1 - range_.record_count,
            "current_bytes": sizes["current"], "legacy_bytes": sizes["legacy"],
            "legacy_to_current": round(sizes["legacy"] / sizes["current"], 1)}


# -- the figure ----------------------------------------------------------------------------------
def bounded_state(root: Path, epochs: int, records: int, baseline_epochs: int,
                  say: Callable[[str], None], built: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """(g): restart cost on a ``baseline_epochs`` and an ``epochs`` state, and the ledger row sizes.

    Both states are built before any restart is timed, and ``built()`` is called then: what runs beside the
    builds (the bench starts Spark there) has settled before the restarts, which are timed on a quiet machine."""
    states = {}
    for label, count in (("baseline", baseline_epochs), ("long_lived", epochs)):
        location = str(root / f"state-{count}")
        states[label] = (location, build_state(location, count, records))
        say(f"(g) built {count:,} epochs of {records:,} records in {states[label][1]['build_s']} s "
            f"({states[label][1]['ledger_files']} ledger files, {states[label][1]['ledger_bytes']:,} B)")
    built()
    restarts = {}
    for label, (location, figures) in states.items():
        restarts[label] = {**figures, **restart_cost(location)}
        say(f"(g) restart on {figures['epochs']:,} epochs: {restarts[label]['start_s']} s, "
            f"peak RSS +{restarts[label]['peak_rss_increase_mb']} MB")
    base, big = restarts["baseline"], restarts["long_lived"]
    restarts["long_lived_maintained"] = _after_maintenance(states["long_lived"][0])
    say(f"(g) restart on {epochs:,} epochs right after maintenance: {restarts['long_lived_maintained']['start_s']} s, "
        f"peak RSS +{restarts['long_lived_maintained']['peak_rss_increase_mb']} MB")
    rows = ledger_row_size(root / "row-size")
    say(f"(g) one compacted-topic epoch: {rows['current_bytes']:,} B, first versions {rows['legacy_bytes']:,} B")
    return {**restarts, "ratio": {
        "start_s": round(big["start_s"] / max(base["start_s"], 1e-3), 1),
        "peak_rss_increase_mb": round(big["peak_rss_increase_mb"] / max(base["peak_rss_increase_mb"], 0.1), 1)},
        "difference": {"start_s": round(big["start_s"] - base["start_s"], 3),
                       "peak_rss_increase_mb": round(big["peak_rss_increase_mb"] - base["peak_rss_increase_mb"], 1)},
        "restarts_per_state": RESTARTS, "ledger_row": rows}


def _after_maintenance(location: str) -> dict[str, Any]:
    """The same restart once maintenance folded the small files the driver wrote since the last one: tells
    the cost of many epochs apart from the cost of up to MAINTAIN_EVERY_EPOCHS epochs' worth of small files."""
    store = StateStore(location)
    store.maintain()
    footprint = store.footprint()["ledger"]
    return {"epochs": store.ledger.max_epoch(QUERY), "ledger_files": footprint.files,
            "ledger_bytes": footprint.bytes, **restart_cost(location)}


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", required=True, help="state location to restart a driver on, once")
    print(json.dumps(restart_once(parser.parse_args().measure)))


if __name__ == "__main__":
    _main()
