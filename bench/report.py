"""The bench's outputs: the JSON figures and the short table printed at the end of a run.

The table is what the README's Benchmarks section quotes, so it carries the conclusions as well
as the numbers: the throughput story (five consumers over partitions against the per-partition
limit the in-flight window sets, with its done-when checks), where a batch's time goes, and the
other lettered figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.delta_coordinator import DELTA_CONSUMERS
from bench.members import MEMBER_SERIES
from bench.remote_state import COORDINATORS, STORES
from bench.story import STORY_CONSUMERS

__all__ = ["TARGET_RATIO", "admin_broker_lines", "admin_broker_table", "admin_lines", "admin_table",
           "bounded_state_table", "delta_only_table", "delta_table", "members_lines", "members_only_table",
           "peers_table", "settings_table", "state_only_table", "state_store_lines", "state_store_only_table",
           "story_table", "table", "write_json"]

#: coordinator=delta -> noop must reach this share of the plain reader's records/s, and of format("kafka")'s ((h)).
TARGET_RATIO = 0.8


def write_json(figures: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2) + "\n")


def _rate(run: dict[str, Any]) -> str:
    throughput = run["throughput"]
    mark = "" if throughput["complete"] else " (timed out)"
    return f"{throughput['records_per_s']:>9,}{mark}"


_CELL = (12, 8, 6)  # records/s, ratio to the plain loop, ratio to sharegroup


def _cell(*values: str) -> str:
    return "".join(f"{value:>{width}}" for value, width in zip(values, _CELL, strict=True))


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def story_table(figures: dict[str, Any]) -> list[str]:
    """The throughput story on every peer that ran it: rows the five consumers and the limit, columns the partition
    counts, each cell records/s and its ratios to format("kafka") and to the limit; then the limit's two terms,
    the batches and the done-when checks."""
    lines: list[str] = []
    for peer, story in figures["story"].items():
        scaling, limits = figures["scaling"][peer], figures["limit_per_partition"][peer]
        counts = list(limits)
        rows = {**{name: scaling[name] for name in STORY_CONSUMERS}, "limit": limits}
        labels = {**STORY_CONSUMERS, "limit": "per-partition limit"}
        lines += [f"throughput story on {peer} Kafka: records/s of {story['value_bytes']} B records, steady state, "
                  f"median of {story['rounds']} interleaved round(s); (x of spark_kafka, y of limit)",
                  f"{'':<32}" + "".join(f"{p + ' partitions':>30}" for p in counts)]
        for name, by_p in rows.items():
            cells = []
            for p in counts:
                ratio = story["ratios"][name][p]
                cells.append("n/a" if by_p[p] is None else
                             f"{by_p[p]:,} ({_ratio(ratio['to_spark_kafka'])}, {_ratio(ratio['to_limit'])})")
            lines.append(f"{labels[name]:<32}" + "".join(f"{cell:>30}" for cell in cells))
        limit = story["limit"]
        lines.append(f"{'  limit = records / (ShareFetch':<32}" + "".join(
            f"{_limit_terms(limit[p]):>30}" for p in counts))
        lines.append(f"{'    + Spark own ms in n tasks)':<32}" + "".join(
            f"{_own_terms(limit[p]):>30}" for p in counts))
        for name in ("broker", "broker_tuned", "delta", "spark_kafka"):
            runs = story["runs"][name]
            lines.append(f"{'  ' + name + ' records/batch, ms':<32}" + "".join(
                f"{_batch(runs[p]):>30}" for p in counts))
        tuned = ", ".join(f"{p}: {', '.join(f'{k}={v}' for k, v in story['options']['broker_tuned'][p].items())}"
                          for p in counts)
        lines.append(f"  broker_tuned options: {tuned}")
        floor = story["python_floor"]
        lines.append(f"  Python source floor at {floor['partitions']} partitions (in-memory, "
                     f"{floor['rows_per_batch']:,} rows in {floor['tasks']} tasks, no read): "
                     + ("n/a" if floor["records_per_s"] is None else
                        f"{floor['records_per_s']:,} records/s, {_ratio(floor['to_spark_kafka'])} of spark_kafka; "
                        f"delta {_ratio(floor['delta_to_floor'])} of it; batch p50 {floor['phases_p50_ms']}"))
        lines += [f"  done when: {check['check']} = {_ratio(check['value'])} (at least {check['at_least']}): "
                  f"{_verdict(check['met'])}" for check in story["checks"]]
        lines += [f"  n/a: {key}: {error}" for key, error in story["errors"].items()]
        lines.append("")
    return lines[:-1]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _own_terms(limit: dict[str, Any]) -> str:
    """Spark's own batch at the limit's batch size in each task count measured: ``n tasks: ms``."""
    return "best of " + ", ".join(f"{tasks}: {_ms(run.get('batch_ms_p50'))}"
                                  for tasks, run in limit["spark_batch_by_tasks"].items())


def _limit_terms(limit: dict[str, Any]) -> str:
    if limit.get("limit_records_per_s") is None:
        return "n/a"
    return (f"{limit['records_per_batch']:,} / ({limit['share_fetch_ms']:,.0f} + {limit['spark_batch_ms']:,.0f}"
            f" in {limit['spark_batch_tasks']})")


def _batch(run: dict[str, Any]) -> str:
    if "throughput" not in run:
        return "n/a"
    return f"{run['records_per_batch_p50']:,.0f} in {run['batch_phases_p50_ms'].get('triggerExecution', 0):,.0f} ms"


def peers_table(figures: dict[str, Any]) -> list[str]:
    """Per peer: scaling over the lock limit, and latency at a steady rate below the limit."""
    peers = figures["peers"]
    lines: list[str] = []
    lines += ["scaling over the lock limit (max.record.locks; maxRecordsPerPartition and maxRecordsPerTrigger "
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
              f"{'    acquire (and the settle riding on it): one commit':<58}{p50_95(cost['acquire'])}",
              f"{'    a settle alone: one compare-and-swap commit':<58}{p50_95(cost['settle'])}",
              f"{'    latestOffset (ledger, admitting records, waits)':<58}{p50_95(cost['latest_offset'])}",
              f"{'    of which not member commits ending during it':<58}"
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
    lines += [f"{n:>10} n/a: {error}" for n, error in members.get("errors", {}).items()]
    return lines


def _only_table(figures: dict[str, Any], what: str, lines: list[str]) -> str:
    """An ``--only`` run's table: a title line naming ``what`` it measured, then its ``lines``."""
    run = "quick" if figures["quick"] else "full"
    return "\n".join([f"sharegroup bench {figures['date']} ({run}), {what}, {figures['machine']['cpus']} cores, "
                      f"{figures['elapsed_s']} s", "", *lines])


def delta_only_table(figures: dict[str, Any]) -> str:
    """``--only delta``: (h) alone."""
    return _only_table(figures, "coordinator=delta only", delta_table(figures["delta"]))


def state_only_table(figures: dict[str, Any]) -> str:
    """``--only state``: the bounded-state figures without Kafka or Spark."""
    return "\n".join([f"sharegroup bench {figures['date']}, bounded state only, {figures['machine']['cpus']} cores, "
                      f"{figures['elapsed_s']} s", "", *bounded_state_table(figures["bounded_state"])])


def table(figures: dict[str, Any]) -> str:
    main = str(figures["main_partitions"])
    per_limit = figures["max_records_per_partition"]
    source = per_limit[figures["max_records_per_partition_default"]]
    driver, state = figures["driver"], figures["state_store"]
    timing, memory = driver["timing"], driver["memory"]
    lines = [
        f"sharegroup bench {figures['date']} ({'quick' if figures['quick'] else 'full'}), records of "
        f"{figures['dataset']['value_bytes']} B, {figures['machine']['cpus']} cores, {figures['elapsed_s']} s",
        "",
        *story_table(figures),
        "",
        f"{'figure, on the ' + figures['kafka']['detail_peer'] + ' peer, ' + main + ' partitions':<58}{'value':>22}",
        f"{'(c) driver methods alone (no Spark), records/s':<58}{timing['records_per_s']:>22,}",
        f"{'    source calls per batch p50 / p95 ms':<58}"
        f"{timing['source_calls']['p50_ms']:>13} / {timing['source_calls']['p95_ms']:<6}",
        f"{'    of which broker round trips p50 / p95 ms':<58}"
        f"{timing['broker_round_trips']['p50_ms']:>13} / {timing['broker_round_trips']['p95_ms']:<6}",
        f"{'    of which the connector own work p50 / p95 ms':<58}"
        f"{timing['connector_own']['p50_ms']:>13} / {timing['connector_own']['p95_ms']:<6}",
        f"{'    records per batch p50':<58}{timing['records_per_batch_p50']:>22,.0f}",
        f"{'(e) ledger write+read per epoch p50 / p95 ms':<58}"
        f"{state['write_plus_read']['p50_ms']:>13} / {state['write_plus_read']['p95_ms']:<6}",
        f"{'    ledger set_status p50 ms; Delta commits per epoch (driver)':<58}"
        f"{state['set_status']['p50_ms']:>13} / {figures['delta_commits_per_epoch']:<6}",
        f"{'(f) driver Python heap peak / held, MB per 10k in flight':<58}"
        f"{memory['python_heap_peak_mb_per_10k']:>13} / {memory['python_heap_held_mb_per_10k']:<6}",
        f"{'    Arrow buffers held, MB per 10k in flight':<58}{memory['arrow_held_mb_per_10k']:>22}",
        f"{'    Spark source runner peak RSS, MB (defaults)':<58}{source.get('runner_rss_peak_mb', '-'):>22}",
        "",
        f"(d) sharegroup -> noop with its default batch over maxRecordsPerPartition, {main} partitions",
        f"{'maxRecordsPerPartition':>22} {'records/s':>10} {'records/batch':>14} {'batch ms':>9}",
    ]
    for limit, run in per_limit.items():
        lines.append(f"{int(limit):>22,} {run['throughput']['records_per_s']:>10,} "
                     f"{run['records_per_batch_p50']:>14,.0f} "
                     f"{run['batch_phases_p50_ms'].get('triggerExecution', 0):>9,.0f}")
    lines += ["", "where a default sharegroup batch's time goes (p50 ms): " + ", ".join(
        f"{k} {v:,.0f}" for k, v in source["batch_phases_p50_ms"].items())]
    lines += ["where the driver methods' time goes (cProfile, ms per epoch): " + ", ".join(
        f"{b['bucket']} {b['ms_per_epoch']}" for b in driver["profile"]["buckets"])]
    if "peers" in figures:
        lines += ["", *peers_table(figures)]
    if "spark_settings" in figures:
        lines += ["", *settings_table(figures["spark_settings"])]
    if "bounded_state" in figures:
        lines += ["", *bounded_state_table(figures["bounded_state"])]
    if "delta" in figures:
        lines += ["", *delta_table(figures["delta"])]
    if "store_run" in figures["state_store"]:
        lines += ["", *state_store_lines(figures["state_store"])]
    if "members" in figures:
        lines += ["", *members_lines(figures["members"])]
    if "admin" in figures:
        lines += ["", *admin_lines(figures["admin"])]
        if "broker_groups_run" in figures["admin"]:
            lines += ["", *admin_broker_lines(figures["admin"])]
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


def admin_broker_lines(admin: dict[str, Any]) -> list[str]:
    """(j): our CLI against Kafka's tool, describing every share group of one broker, start-up included; the
    requests as the broker counted them, and our API's own count (one per API per coordinator, whatever N)."""
    run = admin["broker_groups_run"]
    if "skipped" in run:
        return [f"(j) broker groups: skipped, {run['skipped']}"]
    lines = [f"(j) describe --all-groups, N share groups x {run['partitions']} partitions on {run['brokers']} Apache "
             f"Kafka broker(s), wall s with Python / JVM start (median of interleaved rounds), Kafka requests sent",
             f"{'groups':>7}{'rounds':>7}{'sharegroup s':>14}{'Kafka tool s':>14}{'tool/ours':>10}"
             f"{'ours reqs':>11}{'tool reqs':>11}{'API s':>8}{'API reqs':>10}{'1 req s':>9}{'N reqs s':>10}  agreed"]
    for count, f in admin["broker_groups"].items():
        ours, tool, api, agreement = f["sharegroup"], f["kafka_tool"], f["python_api"], f["agreement"]
        lines.append(f"{int(count):>7,}{f['rounds']:>7}{ours['wall_s']:>14}{tool['wall_s']:>14}"
                     f"{f['kafka_tool_over_sharegroup']:>9}x{ours.get('requests_total', '-'):>11}"
                     f"{tool.get('requests_total', '-'):>11}{api['wall_s']:>8}{sum(api['requests'].values()):>10}"
                     f"{f['offsets_one_request']['wall_s']:>9}{f['offsets_one_per_group']['wall_s']:>10}  "
                     f"{'yes' if agreement['agreed'] else 'NO, ' + str(agreement['first_disagreements'][:1])}")
    lines.append(f"ours reqs / tool reqs: the broker's count ({run['broker_requests_counted']}); API reqs: "
                 "describe_groups' own Counter, per API at the most groups: " + ", ".join(
                     f"{api} {n}" for api, n in list(admin["broker_groups"].values())[-1]["python_api"]
                     ["requests"].items()))
    lines.append("1 req s / N reqs s: DescribeShareGroupOffsets of the N groups in one request, and in N "
                 "single-group requests, 5 in flight at a time (as ours sends them)")
    return lines


def admin_broker_table(figures: dict[str, Any]) -> str:
    return "\n".join([f"sharegroup bench {figures['date']} --only admin-broker, {figures['elapsed_s']} s", "",
                      *admin_broker_lines(figures["admin"])])


def state_store_lines(stores: dict[str, Any]) -> list[str]:
    """(k): both coordinators with their state on local disk and on S3: the Spark batch p50, records/s and Delta
    commits per batch (over the steady batches, and over the whole run), then where the commits go, per table."""
    run = stores["store_run"]
    if "skipped" in run:
        return [f"(k) state on local disk against S3: skipped, {run['skipped']}"]
    lines = [f"(k) state on local disk against S3 ({run['s3'].split(' (')[0]}), {run['partitions']} partitions, "
             f"{run['records']:,} records of {run['value_bytes']} B, maxRecordsPerTrigger {run['trigger']:,}, into "
             f"noop; median of {run['rounds']} interleaved round(s)",
             f"{'':<24}{'batch p50':>10}{'latestOffset':>13}{'records/s':>11}{'batches':>8}"
             f"{'Delta commits per batch':>25}{'commits seen':>14}",
             f"{'coordinator, state on':<24}{'ms':>10}{'p50 ms':>13}{'':>11}{'':>8}{'steady (whole run)':>25}"
             f"{'store / logs':>14}"]
    tables = []
    for coordinator in COORDINATORS:
        for store, where in STORES.items():
            figure = stores[store].get(coordinator, {})
            name = f"{coordinator}, {where.split(' (')[0]}"
            if "throughput" not in figure:
                lines.append(f"{name:<24}n/a: {figure.get('error', 'not measured')[:100]}")
                continue
            commits = figure["commits"]
            seen = f"{commits.get('server_commit_puts', commits.get('log_files'))} / {commits['total']}"
            per_batch = f"{commits['per_batch_steady']:.2f} ({commits['per_batch']:.2f})"
            latest = figure["batch_phases_p50_ms"].get("latestOffset")
            lines.append(f"{name:<24}{_ms(figure['batch_p50_ms']):>10}{_ms(latest):>13}{_rate(figure):>11}"
                         f"{figure['batches']:>8}{per_batch:>25}{seen:>14}")
            tables.append(f"  {name}: " + ", ".join(f"{table} {t['in_steady_window']} / {t['commits']}"
                                                     for table, t in commits["by_table"].items())
                          + (f"; commit PUTs outside the state tables {commits['outside_the_state_tables']}, "
                             f"refused (412) {commits['server_conflicts']}" if "server_conflicts" in commits else ""))
    lines += ["commits seen: on local disk the _delta_log/<version>.json files, on S3 the commit PUTs the server "
              "stored; logs: every table's newest version + 1",
              "commits per table, in the steady window of the median run / over the run:", *tables]
    lines += [f"n/a: {key}: {error}" for key, error in run.get("errors", {}).items()]
    return lines


def state_store_only_table(figures: dict[str, Any]) -> str:
    """``--only state-store``: (k) alone."""
    return _only_table(figures, "state store local against S3 only", state_store_lines(figures["state_store"]))


def _split(run: dict[str, Any]) -> str:
    """Records each member worked on, a query's marked q."""
    return ", ".join(f"{n:,}{'q' if role == 'query' else ''}" for n, role in zip(run["split"], run["roles"],
                                                                                  strict=True))


def members_lines(members: dict[str, Any]) -> list[str]:
    """(l): records/s of each series over the member count on one partition (x of one member), what one poll
    took and how the largest run split; then N queries in one broker group; exactly once over every run."""
    if "skipped" in members:
        return [f"(l) members: skipped, {members['skipped']}"]
    runs = members["runs"]
    counts = list(next(iter(next(iter(members["speedup"].values())).values())))
    lines = [f"(l) members with {members['work_ms']:g} ms of work per record (time.sleep, one record after another), "
             f"ONE partition, {members['records']:,} records of {members['value_bytes']} B, max.poll.records and "
             f"maxRecordsPerTrigger {members['max_poll_records']}, each member a process, {members['rounds']} "
             f"round(s); records/s (x of 1 member)",
             f"{'series':<60}" + "".join(f"{n + ' member' + ('s' if n != '1' else ''):>15}" for n in counts)
             + f"{'records per poll p50 / max':>28}"]
    for coordinator, by_name in MEMBER_SERIES.items():
        for name, label in by_name.items():
            rates, speedups = members[coordinator][name], members["speedup"][coordinator][name]
            cells = ["n/a" if rates[n] is None else f"{rates[n]:,} ({speedups[n]:.2f})" for n in counts]
            last = runs[coordinator][name][counts[-1]]
            polls = last.get("records_per_poll", {})
            lines.append(f"{coordinator + ': ' + label:<60}" + "".join(f"{cell:>15}" for cell in cells)
                         + f"{str(polls.get('p50', '-')) + ' / ' + str(polls.get('max', '-')):>28}")
    lines.append(f"  records each member worked on at {counts[-1]} members (q: the query):")
    lines += [f"    {coordinator}, {name}: " + (_split(run) if "split" in run else "n/a")
              for coordinator, by_name in MEMBER_SERIES.items() for name in by_name
              for run in [runs[coordinator][name][counts[-1]]]]
    setup = members["queries_run"]
    lines += ["", f"(l) N queries (Spark applications, each a process with its own SparkSession) as the N members "
                  f"of one broker group: {setup['partitions']} partitions, {setup['records']:,} records, the same "
                  f"work per record in foreachBatch, {setup['options']}",
              f"{'queries':>8}{'records/s':>11}{'x of 1':>8}  {'records each query worked on':<34}"
              f"{'duplicates':>11}{'missing':>8}  all acknowledged"]
    for n, query in members["queries"].items():
        if query.get("records_per_s") is None:
            lines.append(f"{n:>8}  n/a: {query.get('error')}")
            continue
        split = ", ".join(f"{records:,}" for records in query["split"])
        acknowledged = "yes" if query["acknowledged_all"] else "NO"
        lines.append(f"{n:>8}{query['records_per_s']:>11,}{setup['speedup'][n]:>8.2f}  {split:<34}"
                     f"{query['duplicates']:>11,}{query['missing']:>8,}  {acknowledged}")
    once = members["exactly_once"]
    broken = once["duplicates"] or once["missing"] or once["unacknowledged_runs"]
    lines.append(f"  exactly once over every run of (l): {once['duplicates']} duplicate(s), {once['missing']} missing, "
                 f"runs not all acknowledged: {once['unacknowledged_runs'] or 'none'}"
                 + ("  <-- EXACTLY ONCE BROKEN" if broken else ""))
    lines += [f"  n/a: {key}: {error}" for key, error in members["errors"].items()]
    return lines


def members_only_table(figures: dict[str, Any]) -> str:
    """``--only members``: (l) alone."""
    return _only_table(figures, "members and queries on one group only", members_lines(figures["members"]))
