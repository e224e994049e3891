"""The headline comparison: four consumers of the same topic on one Kafka peer.

(1) ``format("sharegroup")`` -> noop, (2) a plain confluent-kafka ShareConsumer loop, (3) Kafka's
own share consumer perf tool (the Java client) and (4) Spark's own ``format("kafka")`` -> noop,
each on a fresh share group (or, for (4), a fresh checkpoint) over the same records. Runs go in
rounds, one of each consumer per round, so load from outside the bench falls on all four alike;
the median run of each is kept. A consumer that cannot run on a peer (an exception) is reported
with its error instead of a figure, and not tried again on that peer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.measure import median_run

__all__ = ["CONSUMERS", "measure_rounds", "summary"]

#: The four consumers, in the order every output lists them.
CONSUMERS = {
    "sharegroup": 'format("sharegroup") -> noop',
    "plain": "plain confluent-kafka ShareConsumer loop",
    "kafka_perf_tool": "Kafka ShareConsumerPerformance (Java client)",
    "spark_kafka": 'Spark format("kafka") -> noop',
}


def measure_rounds(consumers: dict[str, Callable[[], dict[str, Any]]], rounds: int,
                   say: Callable[[str], None], labels: Mapping[str, str] = CONSUMERS) -> dict[str, dict[str, Any]]:
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


def _rate(run: dict[str, Any] | None) -> int | None:
    return run["throughput"]["records_per_s"] if run and "throughput" in run else None


def summary(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each consumer's records/s and its ratio to the plain loop and to sharegroup (None where it did not run)."""
    rates = {name: _rate(runs.get(name)) for name in CONSUMERS}

    def ratio(name: str, to: str) -> float | None:
        return round(rates[name] / rates[to], 3) if rates[name] is not None and rates[to] else None

    return {"records_per_s": rates,
            "ratio_to_plain": {name: ratio(name, "plain") for name in CONSUMERS},
            "ratio_to_sharegroup": {name: ratio(name, "sharegroup") for name in CONSUMERS},
            "errors": {name: run["error"] for name, run in runs.items() if "error" in run},
            "runs": runs}
