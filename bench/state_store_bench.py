"""Figures for the Delta state store: ledger latency per epoch, acquisition commits per second.

    python -m bench.state_store_bench [--epochs 300] [--seconds 10] [--out path.json]

The driver touches the ledger on every micro-batch, so its per-epoch latency bounds how short a
trigger can be; the Delta coordinator turns every acquisition into a compare-and-swap commit, so
commits per second with 1, 2 and 4 competing processes bound its throughput per share-partition.
Figures are printed and written as JSON (default bench/results/state_store-<date>.json).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa

from state_store import AckType, LedgerEntry, OffsetRange, ShareConfig, StateStore

RECORDS_PER_EPOCH = 500
MAINTAIN_EVERY = 100
ACQUIRE_CHUNK = 200
CONFIG = ShareConfig(max_record_locks=10_000, lock_duration_ms=600_000)


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    return {"p50_ms": round(statistics.median(ms), 2), "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 2),
            "max_ms": round(ms[-1], 2), "samples": len(ms)}


def ledger_latency(root: Path, epochs: int) -> dict[str, Any]:
    """One epoch as the driver does it: ledger it, read it back, mark it EMITTED and then ACKED."""
    store = StateStore(str(root), log_retention=timedelta(0))
    write, read, status, both = [], [], [], []
    for epoch in range(1, epochs + 1):
        first = epoch * RECORDS_PER_EPOCH
        ranges = (OffsetRange("orders", epoch % 4, first, first + RECORDS_PER_EPOCH - 1),)  # delivered once each
        entry = LedgerEntry("bench", epoch, ranges, "run", 0, 30_000, "ACQUIRED")
        t0 = time.perf_counter()
        store.ledger.write_epoch(entry)
        t1 = time.perf_counter()
        store.ledger.get("bench", epoch)
        t2 = time.perf_counter()
        store.ledger.set_status("bench", [epoch], "EMITTED")
        store.ledger.set_status("bench", [epoch], "ACKED")
        t3 = time.perf_counter()
        write.append(t1 - t0)
        read.append(t2 - t1)
        both.append(t2 - t0)
        status.append((t3 - t2) / 2)
        if epoch % MAINTAIN_EVERY == 0:
            store.maintain()
    return {"epochs": epochs, "records_per_epoch": RECORDS_PER_EPOCH, "maintain_every": MAINTAIN_EVERY,
            "write_epoch": percentiles(write), "get": percentiles(read), "write_plus_read": percentiles(both),
            "set_status": percentiles(status)}


def acquire_loop(location: str, member: str, seconds: float, start: Any) -> tuple[int, int]:
    """Acquire and accept chunks for ``seconds``; returns (commits, records)."""
    store = StateStore(location, share_config=CONFIG)
    commits = records = 0
    start.wait()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = int(time.time() * 1000)
        got = store.share_state.acquire("orders", 0, member, ACQUIRE_CHUNK, now, log_end_offset=10**12)
        if got.records:
            acks = [(r.first, r.last, AckType.ACCEPT) for r in got.records]
            store.share_state.acknowledge("orders", 0, member, acks, int(time.time() * 1000))
            commits += 2
            records += got.count
    return commits, records


def acquisition_throughput(root: Path, processes: int, seconds: float) -> dict[str, Any]:
    location = str(root / f"writers-{processes}")
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(processes) as pool:
        start = manager.Barrier(processes)
        jobs = [(location, f"member-{i}", seconds, start) for i in range(processes)]
        results = pool.starmap(acquire_loop, jobs)
    commits = sum(c for c, _ in results)
    records = sum(r for _, r in results)
    return {"processes": processes, "seconds": seconds, "chunk": ACQUIRE_CHUNK, "commits": commits,
            "commits_per_s": round(commits / seconds, 1), "records_per_s": round(records / seconds),
            "commits_per_process": [c for c, _ in results]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=300, help="epochs for the ledger latency run")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each acquisition run")
    default_out = Path("bench/results") / f"state_store-{date.today()}.json"
    parser.add_argument("--out", type=Path, default=default_out, help="where the JSON figures go")
    args = parser.parse_args(argv)

    figures: dict[str, Any] = {
        "date": str(date.today()), "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                               "deltalake": deltalake.__version__, "pyarrow": pa.__version__},
    }
    with tempfile.TemporaryDirectory(prefix="state-store-bench-") as scratch:
        figures["ledger"] = ledger_latency(Path(scratch) / "ledger-run", args.epochs)
        lat = figures["ledger"]
        print(f"ledger, {args.epochs} epochs: write+read p50 {lat['write_plus_read']['p50_ms']} ms, "
              f"p95 {lat['write_plus_read']['p95_ms']} ms (write_epoch p50 {lat['write_epoch']['p50_ms']} "
              f"ms, get p50 {lat['get']['p50_ms']} ms, set_status p50 {lat['set_status']['p50_ms']} ms)")
        figures["acquisition"] = []
        for processes in (1, 2, 4):
            run = acquisition_throughput(Path(scratch), processes, args.seconds)
            figures["acquisition"].append(run)
            print(f"acquisition with {processes} writer process(es): {run['commits_per_s']} commits/s, "
                  f"{run['records_per_s']} records/s, commits per process {run['commits_per_process']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"figures written to {args.out}")
    return figures


if __name__ == "__main__":
    main()
