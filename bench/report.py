"""The bench's outputs: the JSON figures and the short table printed at the end of a run.

The table is what the README's Benchmarks section quotes, so it carries the conclusions as well
as the numbers: whether the 0.8 target was met, where a batch's time goes, and the in-flight limit
that bounds records per second per partition whatever the source does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.headline import CONSUMERS

__all__ = ["TARGET_RATIO", "limit_note", "table", "write_json"]

#: format("sharegroup") -> noop must reach this share of the plain ShareConsumer's records/s.
TARGET_RATIO = 0.8


def write_json(figures: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2) + "\n")


def limit_note(lock_limit: int, batch_seconds: float) -> str:
    ceiling = lock_limit / batch_seconds if batch_seconds else float("nan")
    return (f"physical limit: a share-partition has at most {lock_limit:,} records in flight "
            f"(group.share.partition.max.record.locks; the embedded broker's record_lock_limit), so records/s per "
            f"partition cannot exceed {lock_limit:,} / batch duration = {lock_limit:,} / {batch_seconds:.2f} s = "
            f"{ceiling:,.0f} records/s per partition at this run's median batch time")


def _rate(run: dict[str, Any]) -> str:
    throughput = run["throughput"]
    mark = "" if throughput["complete"] else " (timed out)"
    return f"{throughput['records_per_s']:>9,}{mark}"


_CELL = (12, 8, 6)  # records/s, ratio to the plain loop, ratio to sharegroup


def _cell(*values: str) -> str:
    return "".join(f"{value:>{width}}" for value, width in zip(values, _CELL, strict=True))


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def headline_table(figures: dict[str, Any]) -> list[str]:
    """The four consumers on every peer: records/s, and the ratio to the plain loop and to sharegroup."""
    peers = figures["headline"]
    width = sum(_CELL)
    lines = [f"headline: the same {figures['dataset']['records']:,} records in {figures['main_partitions']} "
             f"partitions, steady-state records/s and ratios",
             f"{'':<46}" + "".join(f"{peer + ' Kafka':>{width}}" for peer in peers),
             f"{'consumer':<46}" + _cell("records/s", "/plain", "/sg") * len(peers)]
    for name, label in CONSUMERS.items():
        cells = [f"{'n/a':>{width}}" if peer["records_per_s"][name] is None else
                 _cell(f"{peer['records_per_s'][name]:,}", _ratio(peer["ratio_to_plain"][name]),
                       _ratio(peer["ratio_to_sharegroup"][name])) for peer in peers.values()]
        lines.append(f"{label:<46}" + "".join(cells))
    batch_ms = [[run.get("batch_phases_p50_ms", {}).get("triggerExecution") for run in (
        peer["runs"]["sharegroup"], peer["runs"]["spark_kafka"])] for peer in peers.values()]
    lines.append(f"{'Spark batch p50 ms, sharegroup / format(kafka)':<46}" + "".join(
        f"{' / '.join('-' if ms is None else f'{ms:,.0f}' for ms in pair):>{width}}" for pair in batch_ms))
    own = [peer["runs"]["kafka_perf_tool"].get("tool_records_per_s") for peer in peers.values()]
    lines.append(f"{'Kafka perf tool own nMsg.sec (incl. joining)':<46}" + "".join(
        f"{'-' if rate is None else f'{rate:,}':>{width}}" for rate in own))
    lines += [f"n/a on {peer}: {CONSUMERS[name]}: {error}"
              for peer, summary in peers.items() for name, error in summary["errors"].items()]
    return lines


def table(figures: dict[str, Any]) -> str:
    main = str(figures["main_partitions"])
    baseline, source = figures["baseline"][main], figures["source"][main]
    driver, state = figures["driver"], figures["state_store"]
    timing, memory = driver["timing"], driver["memory"]
    verdict = "met" if figures["target_met"] else "NOT met"
    lines = [
        f"sharegroup bench {figures['date']} ({'quick' if figures['quick'] else 'full'}), "
        f"{figures['dataset']['records']:,} records of {figures['dataset']['value_bytes']} B, "
        f"{figures['machine']['cpus']} cores, {figures['elapsed_s']} s",
        "",
        *headline_table(figures),
        "",
        f"{'figure, on the ' + figures['kafka']['detail_peer'] + ' peer':<58}{'value':>22}",
        f"{'(a) plain ShareConsumer, ' + main + ' partitions, records/s':<58}{_rate(baseline):>22}",
        f"{'(b) format(sharegroup) -> noop, steady state, records/s':<58}{_rate(source):>22}",
        f"{'    ratio (b)/(a), target ' + str(TARGET_RATIO):<58}{figures['ratio']:>15.2f} {verdict:>6}",
        f"{'    driver methods alone (no Spark), records/s':<58}{timing['records_per_s']:>22,}",
        f"{'(c) source calls per batch p50 / p95 ms':<58}"
        f"{timing['source_calls']['p50_ms']:>13} / {timing['source_calls']['p95_ms']:<6}",
        f"{'    of which broker round trips p50 / p95 ms':<58}"
        f"{timing['broker_round_trips']['p50_ms']:>13} / {timing['broker_round_trips']['p95_ms']:<6}",
        f"{'    of which the connector own work p50 / p95 ms':<58}"
        f"{timing['connector_own']['p50_ms']:>13} / {timing['connector_own']['p95_ms']:<6}",
        f"{'    records per batch p50':<58}{timing['records_per_batch_p50']:>22,.0f}",
        f"{'    Spark batch p50 ms (triggerExecution)':<58}"
        f"{source['batch_phases_p50_ms'].get('triggerExecution', 0):>22,.0f}",
        f"{'(e) ledger write+read per epoch p50 / p95 ms':<58}"
        f"{state['write_plus_read']['p50_ms']:>13} / {state['write_plus_read']['p95_ms']:<6}",
        f"{'    ledger set_status p50 ms; Delta commits per epoch (driver)':<58}"
        f"{state['set_status']['p50_ms']:>13} / {figures['delta_commits_per_epoch']:<6}",
        f"{'(f) driver Python heap peak / held, MB per 10k in flight':<58}"
        f"{memory['python_heap_peak_mb_per_10k']:>13} / {memory['python_heap_held_mb_per_10k']:<6}",
        f"{'    Arrow buffers held, MB per 10k in flight':<58}{memory['arrow_held_mb_per_10k']:>22}",
        f"{'    Spark source runner peak RSS, MB':<58}{source['runner_rss_peak_mb']:>22}",
        "",
        "(d) scaling over partitions (records/s)",
        f"{'partitions':>10} {'plain':>10} {'source':>10} {'ratio':>7} {'records/batch':>14} {'batch ms':>9}",
    ]
    for partitions, run in figures["source"].items():
        plain = figures["baseline"][partitions]["throughput"]["records_per_s"]
        rate = run["throughput"]["records_per_s"]
        lines.append(f"{partitions:>10} {plain:>10,} {rate:>10,} {rate / plain if plain else 0:>7.2f} "
                     f"{run['records_per_batch_p50']:>14,.0f} "
                     f"{run['batch_phases_p50_ms'].get('triggerExecution', 0):>9,.0f}")
    lines += ["", f"(d) scaling over maxRecordsPerPartition, {main} partitions (records/s)",
              f"{'maxRecordsPerPartition':>22} {'source':>10} {'batch ms':>9}"]
    for limit, run in figures["max_records_per_partition"].items():
        lines.append(f"{limit:>22} {run['throughput']['records_per_s']:>10,} "
                     f"{run['batch_phases_p50_ms'].get('triggerExecution', 0):>9,.0f}")
    lines += ["", "where a Spark batch's time goes (p50 ms): " + ", ".join(
        f"{k} {v:,.0f}" for k, v in source["batch_phases_p50_ms"].items())]
    lines += ["where the driver methods' time goes (cProfile, ms per epoch): " + ", ".join(
        f"{b['bucket']} {b['ms_per_epoch']}" for b in driver["profile"]["buckets"])]
    lines += ["", figures["limit_note"]]
    return "\n".join(lines)
