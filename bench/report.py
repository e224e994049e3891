"""The bench's outputs: the JSON figures and the short table printed at the end of a run.

The table is what the README's Benchmarks section quotes, so it carries the conclusions as well
as the numbers: whether the 0.8 target was met, where a batch's time goes, and the in-flight limit
that bounds records per second per partition whatever the source does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.delta_coordinator import DELTA_CONSUMERS
from bench.headline import CONSUMERS

__all__ = ["LIMIT_TARGET", "TARGET_RATIO", "bounded_state_table", "delta_only_table", "delta_table", "limit_note",
           "peers_table", "settings_table", "state_only_table", "table", "write_json"]

#: format("sharegroup") -> noop must reach this share of the plain ShareConsumer's records/s.
TARGET_RATIO = 0.8
#: ... and this share of the limit the in-flight window sets (bench.spark_limit), measured in the same run.
LIMIT_TARGET = 0.9


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
    limits = [peer.get("limit") for peer in peers.values()]
    if any(limits):
        lines.append(f"{'limit: batch / (ShareFetch + Spark own batch)':<46}" + "".join(
            f"{'-' if limit is None else format(limit['limit_records_per_s'], ','):>{width}}" for limit in limits))
        lines.append(f"{'  records / ShareFetch ms / Spark own ms':<46}" + "".join(
            f"{'-' if limit is None else _limit_terms(limit):>{width}}" for limit in limits))
        lines.append(f"{'sharegroup / limit (target ' + str(LIMIT_TARGET) + '), / plain':<46}" + "".join(
            f"{'-' if limit is None else _limit_verdict(limit, peer):>{width}}"
            for limit, peer in zip(limits, peers.values(), strict=True)))
    own = [peer["runs"]["kafka_perf_tool"].get("tool_records_per_s") for peer in peers.values()]
    lines.append(f"{'Kafka perf tool own nMsg.sec (incl. joining)':<46}" + "".join(
        f"{'-' if rate is None else f'{rate:,}':>{width}}" for rate in own))
    lines += [f"n/a on {peer}: {CONSUMERS[name]}: {error}"
              for peer, summary in peers.items() for name, error in summary["errors"].items()]
    return lines


def _limit_terms(limit: dict[str, Any]) -> str:
    return f"{limit['records_per_batch']:,} / {limit['share_fetch_ms']:,.0f} / {limit['spark_batch_ms']:,.0f}"


def _limit_verdict(limit: dict[str, Any], peer: dict[str, Any]) -> str:
    ratio = limit["ratio_to_limit"]
    met = None if ratio is None else ratio >= LIMIT_TARGET
    return f"{_ratio(ratio)} {_verdict(met)} / {_ratio(peer['ratio_to_plain']['sharegroup'])}"


def peers_table(figures: dict[str, Any]) -> list[str]:
    """Per peer: scaling over partitions, over the lock limit, and latency at a steady rate below the limit."""
    peers = figures["peers"]
    counts = list(next(iter(peers.values()))["scaling"]["source"])
    lines = ["scaling over partitions, records/s: plain loop / sharegroup (ratio)",
             f"{'partitions':>10}" + "".join(f"{peer + ' Kafka':>30}" for peer in peers)]
    for count in counts:
        cells = []
        for peer in peers.values():
            plain = peer["scaling"]["baseline"][count]["throughput"]["records_per_s"]
            rate = peer["scaling"]["source"][count]["throughput"]["records_per_s"]
            cells.append(f"{plain:,} / {rate:,} ({rate / plain if plain else 0:.2f})")
        lines.append(f"{count:>10}" + "".join(f"{cell:>30}" for cell in cells))
    lines += ["", "scaling over the lock limit (max.record.locks; maxRecordsPerPartition and maxRecordsPerTrigger "
                  f"follow), {figures['main_partitions']} partitions,",
              "records/s: plain / sharegroup (records per batch)",
              f"{'lock limit':>10}" + "".join(f"{peer + ' Kafka':>36}" for peer in peers)]
    limits = list(next(iter(peers.values()))["lock_limits"]["by_limit"])
    for limit in limits:
        cells = []
        for peer in peers.values():
            run = peer["lock_limits"]["by_limit"][limit]
            cells.append("n/a (see below)" if "error" in run else
                         f"{run['plain_records_per_s']:,} / {run['sharegroup_records_per_s']:,} "
                         f"({run['records_per_batch_p50']:,.0f})")
        lines.append(f"{int(limit):>10,}" + "".join(f"{cell:>36}" for cell in cells))
    lines += [f"n/a on {name}, lock limit {limit}: {run['error']}" for name, peer in peers.items()
              for limit, run in peer["lock_limits"]["by_limit"].items() if "error" in run]
    lines += ["", "latency, produce to the consumer's commit, at a steady rate well below the limit (ms)",
              f"{'':<12}" + "".join(f"{peer + ' Kafka':>40}" for peer in peers),
              f"{'':<12}" + "".join(f"{'rate  p50 / p99':>40}" for _ in peers)]
    for name in ("plain", "sharegroup"):
        cells = []
        for peer in peers.values():
            run = peer["latency"].get(name, {})
            cells.append(f"n/a: {run['error'][:30]}" if "error" in run else
                         f"{run.get('records_per_s') or 0:,}/s  {run.get('p50_ms', 0):,.0f} / "
                         f"{run.get('p99_ms', 0):,.0f}")
        lines.append(f"{name:<12}" + "".join(f"{cell:>40}" for cell in cells))
    return lines


def settings_table(settings: dict[str, Any]) -> list[str]:
    """Spark's own batch cost (the trivial source) with the session as it is and with Spark's default checkpoint
    manager, and what the session saves per batch."""
    lines = [f"Spark's own batch cost, trivial source of {settings['rows_per_batch']:,} rows in {settings['tasks']} "
             f"tasks into noop, p50 ms (median of {settings['rounds']} round(s)); checkpoint files after the run",
             f"{'setting':<52}{'batch':>7}{'session saves':>14}{'walCommit':>10}{'addBatch':>9}{'commitOffsets':>14}"
             f"{'files':>6}"]
    for name, run in settings["by_setting"].items():
        phases = run["phases_p50_ms"]
        lines.append(f"{name:<52}{run['batch_ms_p50']:>7,.0f}{run['session_saves_ms']:>14,.0f}"
                     f"{phases.get('walCommit', 0):>10,.0f}{phases.get('addBatch', 0):>9,.0f}"
                     f"{phases.get('commitOffsets', 0):>14,.0f}{run['checkpoint_files']:>6}")
    return lines


def bounded_state_table(state: dict[str, Any]) -> list[str]:
    """(g): a restart on a long-lived state against a short-lived one, and one sparse epoch's ledger row.

    The ratios are the point: bounded state means a driver restarts on 10,000 epochs about as fast,
    and in about as much memory, as on 10, and a compacted topic's epoch costs its records, not its
    offsets. The column after maintenance tells the epochs' cost from that of the small files the
    driver wrote since its last maintenance."""
    base, big, folded = state["baseline"], state["long_lived"], state["long_lived_maintained"]
    ratio, row = state["ratio"], state["ledger_row"]

    def line(label: str, cell: Any, ratio: str = "") -> str:
        return f"{'    ' + label:<40}{cell(base):>14}{cell(big):>14}{ratio:>7}{cell(folded):>16}"

    return [f"(g) bounded state: a restarting driver's state work before Kafka (open, fence, ledger reads, "
            f"EmittedIndex), median of {state['restarts_per_state']} fresh processes",
            f"{'':<40}{'epochs':>14}{'epochs':>14}{'ratio':>7}{'epochs, after':>16}",
            line("", lambda run: f"{run['epochs']:,}") + " maintenance",
            line("start time, s", lambda run: f"{run['start_s']:.2f}", f"{ratio['start_s']:.1f}"),
            line("peak RSS increase, MB", lambda run: f"{run['peak_rss_increase_mb']:.1f}",
                 f"{ratio['peak_rss_increase_mb']:.1f}"),
            line("live epochs read", lambda run: f"{run['live_epochs']:,}"),
            line("ledger data files / MB", lambda run: f"{run['ledger_files']} / {run['ledger_bytes'] / 2**20:.2f}"),
            line("state build time, s", lambda run: f"{run.get('build_s', '-')}"),
            line("maintenance round p50 / max, s",
                 lambda run: f"{run['maintenance_s_p50']} / {run['maintenance_s_max']}"
                 if run.get("maintenance_s_p50") is not None else "-"),
            f"(g) one epoch of a compacted topic ({row['records']:,} records over {row['offsets']:,} offsets), "
            f"ledger data on disk:",
            f"    {row['current_bytes']:,} B now ({row['gap_runs']:,} gap runs), {row['legacy_bytes']:,} B in the "
            f"first versions' encoding ({row['missing_offsets']:,} missing offsets): {row['legacy_to_current']}x"]


def _verdict(met: bool | None) -> str:
    return "n/a" if met is None else "met" if met else "NOT met"


def delta_table(delta: dict[str, Any]) -> list[str]:
    """(h): coordinator=delta against the plain reader (and format("kafka")) on every peer, then the first peer's
    coordination cost, driver bytes and members on one partition."""
    peers = delta["peers"]
    options = delta["options"]
    width = sum(_CELL)
    used = {peer: (summary.get("records", delta["records"]), summary.get("options", options)) for peer, summary in
            peers.items()}
    sizes = "; ".join(f"{peer}: {records:,} records, maxRecordsPerTrigger {opts['maxRecordsPerTrigger']:,}, "
                      f"maxRecordsPerPartition {opts['maxRecordsPerPartition']:,}"
                      for peer, (records, opts) in used.items())
    lines = [f"(h) coordinator=delta: records of {delta['value_bytes']} B in {delta['partitions']} partitions, the "
             f"same for every consumer of a peer ({sizes}); medians of {delta['rounds']} interleaved round(s)",
             f"{'':<46}" + "".join(f"{peer + ' Kafka':>{width}}" for peer in peers),
             f"{'consumer':<46}" + _cell("records/s", "/reader", "/kafka") * len(peers)]
    for name, label in DELTA_CONSUMERS.items():
        cells = [f"{'n/a':>{width}}" if peer["records_per_s"][name] is None else
                 _cell(f"{peer['records_per_s'][name]:,}", _ratio(peer["ratio_to_plain_reader"][name]),
                       _ratio(peer["ratio_to_spark_kafka"][name])) for peer in peers.values()]
        lines.append(f"{label:<46}" + "".join(cells))
    batch_ms = [[peer["runs"].get(name, {}).get("batch_phases_p50_ms", {}).get("triggerExecution")
                 for name in ("delta", "broker", "spark_kafka")] for peer in peers.values()]
    lines.append(f"{'Spark batch p50 ms, delta / broker / kafka':<46}" + "".join(
        f"{' / '.join('-' if ms is None else f'{ms:,.0f}' for ms in trio):>{width}}" for trio in batch_ms))
    lines.append(f"{'target ' + str(delta['target']) + ' x plain reader / x format(kafka)':<46}" + "".join(
        f"{_verdict(peer['target_met']['plain_reader']) + ' / ' + _verdict(peer['target_met']['spark_kafka']):>{width}}"
        for peer in peers.values()))
    for peer, summary in peers.items():
        phases = summary["runs"]["delta"].get("batch_phases_p50_ms", {})
        if phases:
            lines.append(f"where a delta batch's time goes on {peer} (p50 ms): " + ", ".join(
                f"{k} {v:,.0f}" for k, v in phases.items()))
    lines += [f"n/a on {peer}: {DELTA_CONSUMERS[name]}: {error}"
              for peer, summary in peers.items() for name, error in summary["errors"].items()]
    if "coordination" not in delta:
        return lines
    cost, size, members = delta["coordination"], delta["driver_bytes"], delta["members"]

    def p50_95(figure: dict[str, Any]) -> str:
        return f"{figure['p50_ms']:>9} / {figure['p95_ms']:<8}"

    by_size = size["by_value_bytes"]
    lines += ["", f"(h) on the {delta['detail_peer']} peer: the driver in delta mode, {cost['epochs']} epochs of "
                  f"{cost['records_per_epoch_p50']:,.0f} records ({cost['tasks_per_epoch_p50']:.0f} tasks) in "
                  f"{cost['passes']} pass(es), ms p50 / p95",
              f"{'    acquire: one compare-and-swap commit':<58}{p50_95(cost['acquire'])}",
              f"{'    settle: one compare-and-swap commit':<58}{p50_95(cost['settle'])}",
              f"{'    latestOffset (settle + acquire + ledger)':<58}{p50_95(cost['latest_offset'])}",
              f"{'    of which not the two commits (ledger, admitting records)':<58}"
              f"{p50_95(cost['latest_offset_besides_commits'])}",
              f"{'    planInputPartitions':<58}{p50_95(cost['plan'])}",
              f"{'    one task read into Arrow, in this process (no Spark)':<58}{p50_95(cost['task_read'])}",
              f"{'    driver calls + every task read, no Spark, records/s':<58}"
              f"{cost['without_spark_records_per_s']:>9,}",
              f"{'    driver bytes per epoch p50 (pickled InputPartitions)':<58}"
              f"{cost['driver_bytes_per_epoch_p50']:>9,.0f} ({cost['driver_bytes_per_record']} B per record)",
              f"    driver bytes per {size['epoch_records']:,}-record epoch: 64 B records "
              f"{by_size['64']['driver_bytes_per_epoch_p50']:,.0f} B, 4 KiB records "
              f"{by_size['4096']['driver_bytes_per_epoch_p50']:,.0f} B ({size['ratio_4096_to_64']}x; the records "
              f"themselves {by_size['4096']['record_bytes_per_epoch']:,.0f} B): "
              f"{'GROWS' if size['grows_with_record_size'] else 'does not grow'} with record size",
              "",
              f"(h) members on ONE partition ({members['records']:,} records, max.poll.records "
              f"{members['max_poll_records']:,}, DeltaShareConsumer processes)",
              f"{'members':>10} {'records/s':>10} {'lost races':>11} {'per 1k rec':>11} {'settles':>8} "
              f"{'failed':>7} {'each member accepted':>24}"]
    for n, run in members["by_members"].items():
        per_k = run["lost_races"] / max(run["accepted"], 1) * 1000
        lines.append(f"{n:>10} {_rate(run):>10} {run['lost_races']:>11,} {per_k:>11.1f} {run['settles']:>8,} "
                     f"{run['failed_settles']:>7,} {', '.join(f'{a:,}' for a in run['per_member_accepted']):>24}")
    return lines


def delta_only_table(figures: dict[str, Any]) -> str:
    """``--only delta``: (h) alone."""
    run = "quick" if figures["quick"] else "full"
    return "\n".join([f"sharegroup bench {figures['date']} ({run}), coordinator=delta only, "
                      f"{figures['machine']['cpus']} cores, {figures['elapsed_s']} s", "",
                      *delta_table(figures["delta"])])


def state_only_table(figures: dict[str, Any]) -> str:
    """``--only state``: the bounded-state figures without Kafka or Spark."""
    return "\n".join([f"sharegroup bench {figures['date']}, bounded state only, {figures['machine']['cpus']} cores, "
                      f"{figures['elapsed_s']} s", "", *bounded_state_table(figures["bounded_state"])])


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
    if "peers" in figures:
        lines += ["", *peers_table(figures)]
    if "spark_settings" in figures:
        lines += ["", *settings_table(figures["spark_settings"])]
    if "bounded_state" in figures:
        lines += ["", *bounded_state_table(figures["bounded_state"])]
    if "delta" in figures:
        lines += ["", *delta_table(figures["delta"])]
    if "admin" in figures:
        lines += ["", *admin_lines(figures["admin"])]
    return "\n".join(lines)


def admin_lines(admin: dict[str, Any]) -> list[str]:
    """(i): describing many groups in one call against one call per group, measured in the same run."""
    lines = [f"(i) describe {admin['groups']} Delta groups x {admin['partitions']} partitions on the {admin['peer']} "
             f"peer (median of {admin['rounds']} rounds)",
             f"{'':<24}{'wall s':>9}{'Delta reads':>13}{'ListOffsets':>13}{'Metadata':>10}{'admin clients':>15}"]
    for way in ("one_call", "one_group_at_a_time"):
        f = admin[way]
        lines.append(f"{way.replace('_', ' '):<24}{f['wall_s']:>9}{f['delta_table_reads']:>13}"
                     f"{f['list_offsets_requests']:>13}{f['metadata_requests']:>10}{f['admin_clients']:>15}")
    lines.append(f"{'one call is faster by':<24}{admin['speedup']:>8}x")
    return lines


def admin_table(figures: dict[str, Any]) -> str:
    return "\n".join([f"sharegroup bench {figures['date']} --only admin, {figures['elapsed_s']} s", "",
                      *admin_lines(figures["admin"])])
