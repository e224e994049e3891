"""A long-running query's state stays small: 1,000 epochs through the ledger and share_state.

Every epoch is ledgered with its own commit. Status changes and share-partition transitions are
batched ten epochs to a commit (one settle per ten micro-batches) to keep the test near 20 s on
two cores; maintenance runs every 100 epochs, as the source is meant to call it.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from state_store import AckType, LedgerEntry, OffsetRange, ShareConfig, SharePartition, StateStore

EPOCHS = 1_000
RECORDS_PER_EPOCH = 10
BATCH = 10
MAINTAIN_EVERY = 100
KEEP_EPOCHS = 100


def disk_usage(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def test_thousand_epochs_leave_a_bounded_state(tmp_path: Path) -> None:
    root = tmp_path / "state"
    store = StateStore(str(root), share_config=ShareConfig(lock_duration_ms=600_000),
                       log_retention=timedelta(0))
    started = time.monotonic()
    peak_files = 0
    for first_epoch in range(1, EPOCHS + 1, BATCH):
        epochs = range(first_epoch, first_epoch + BATCH)

        def settle_and_acquire(sp: SharePartition, epochs: range = epochs) -> None:
            if sp.spso < sp.speo:
                sp.acknowledge("run", [(sp.spso, sp.speo - 1, AckType.ACCEPT)], now_ms=0)
            for _ in epochs:
                sp.acquire("run", RECORDS_PER_EPOCH, now_ms=0, log_end_offset=EPOCHS * RECORDS_PER_EPOCH)

        store.share_state.update("orders", 0, settle_and_acquire)
        for epoch in epochs:
            first = (epoch - 1) * RECORDS_PER_EPOCH
            ranges = (OffsetRange("orders", 0, first, first + RECORDS_PER_EPOCH - 1),)
            store.ledger.write_epoch(LedgerEntry("q", epoch, ranges, "run", 0, 600_000, "ACQUIRED"))
        store.ledger.set_status("q", epochs, "ACKED")
        peak_files = max(peak_files, disk_usage(root)[0])
        if epochs[-1] % MAINTAIN_EVERY == 0:
            store.maintain(ledger_keep_epochs=KEEP_EPOCHS)
    elapsed = time.monotonic() - started

    sizes = store.footprint()
    files, size = disk_usage(root)
    log_files = sum(len(os.listdir(root / name / "_delta_log")) for name in ("ledger", "share_state"))
    live = ", ".join(f"{name} {fp.files} files/{fp.bytes} B"
                     for name, fp in sizes.items() if fp.version is not None)
    print(f"\n{EPOCHS} epochs in {elapsed:.1f}s; live: {live}; on disk: {files} files, {size} B "
          f"({log_files} in _delta_log); peak {peak_files} files")

    assert store.ledger.max_epoch("q") == EPOCHS
    assert [e.epoch for e in store.ledger.entries("q")] == list(range(EPOCHS - KEEP_EPOCHS + 1, EPOCHS + 1))
    sp = store.share_state.partition("orders", 0)
    assert sp is not None and sp.spso == (EPOCHS - BATCH) * RECORDS_PER_EPOCH  # only the last batch in flight
    assert len(sp.batches) == 1  # ten epochs' locks, one state batch
    assert sizes["ledger"].files == 1 and sizes["share_state"].files == 1
    assert sizes["ledger"].bytes < 64_000 and sizes["share_state"].bytes < 16_000
    assert files < 40 and size < 512_000
    assert peak_files < 400  # between maintenance runs the state grows by one small file per commit
