"""Interleaved rounds: every consumer once per round, so load from outside the bench falls on all alike.

Round r runs every consumer (in the order given) before round r+1; the median run of each is kept.
A consumer that cannot run (an exception) is reported with its error instead of a figure, and not
tried again. Used by the throughput story (``bench.story``) and (h) (``bench.delta_coordinator``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.measure import median_run

__all__ = ["measure_rounds"]


def measure_rounds(consumers: dict[str, Callable[[], dict[str, Any]]], rounds: int,
                   say: Callable[[str], None], labels: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``rounds`` runs of each consumer, interleaved; the median run of each, or its error (``labels`` name
    the consumers in messages)."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in consumers}
    errors: dict[str, str] = {}
    for _ in range(rounds):
        for name, consume in consumers.items():
            if name in errors:
                continue
            try:
                runs[name].append(consume())
            except Exception as error:  # reported in the figures; the other consumers go on
                errors[name] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}"
                say(f"{labels[name]}: failed: {errors[name][:160]}")
                continue
            say(f"{labels[name]}: {runs[name][-1]['throughput']['records_per_s']:,} records/s")
    return {name: {**(median_run(runs[name]) if runs[name] else {}), **({"error": errors[name]} if name in errors
                                                                        else {})} for name in consumers}
