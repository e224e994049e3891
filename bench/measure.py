"""Measuring vocabulary shared by the bench modules: a steady-state throughput and medians.

Steady state leaves out the first poll or micro-batch: it pays for joining the share group
(and, in Spark, for starting the query's Python workers), which a long-running query pays once.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Throughput", "median_run", "percentiles_ms"]


@dataclass(frozen=True)
class Throughput:
    """``records`` consumed in ``seconds`` at steady state; ``complete`` is False if a run timed out."""

    records: int
    seconds: float
    complete: bool = True

    @property
    def per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "records_per_s": round(self.per_second)}


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput, with every run's rate kept next to it."""
    ordered = sorted(runs, key=lambda r: r["throughput"]["records_per_s"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    rates = [r["throughput"]["records_per_s"] for r in runs]
    chosen["runs_records_per_s"] = rates
    chosen["spread"] = round((max(rates) - min(rates)) / statistics.median(rates), 2) if min(rates) else None
    return chosen


def percentiles_ms(samples_s: list[float]) -> dict[str, float]:
    """p50 and nearest-rank p95 in milliseconds: with few samples p95 is the largest, never below p50."""
    ms = sorted(s * 1000 for s in samples_s)
    if not ms:
        return {"p50_ms": 0.0, "p95_ms": 0.0, "max_ms": 0.0, "samples": 0}
    return {"p50_ms": round(statistics.median(ms), 1), "p95_ms": round(ms[math.ceil(0.95 * len(ms)) - 1], 1),
            "max_ms": round(ms[-1], 1), "samples": len(ms)}
