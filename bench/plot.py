"""The bench's figure: one PNG with the views a reader needs to judge the source.

The headline (four consumers on every Kafka peer, with their ratios to the plain loop and to
sharegroup), throughput against the plain consumer (with the 0.8 target), scaling over partitions and over
maxRecordsPerPartition, where one micro-batch's time goes, and (g) bounded state: a driver's restart
on a long-lived state against a short-lived one, and one compacted-topic epoch's ledger row. Drawn
on an Agg canvas without pyplot, so no display and no global backend state are involved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.delta_coordinator import DELTA_CONSUMERS
from bench.headline import CONSUMERS
from bench.report import TARGET_RATIO

__all__ = ["plot", "plot_bounded_state", "plot_delta"]


def _rate(run: dict[str, Any]) -> float:
    return run["throughput"]["records_per_s"]


def plot(figures: dict[str, Any], path: Path) -> None:
    main = str(figures["main_partitions"])
    state = figures.get("bounded_state")
    delta = figures.get("delta")
    limits = "peers" in figures
    rows = [["headline", "headline"]] + ([["limit_left", "limit_right"]] if limits else []) + [
        ["top_left", "top_right"], ["bottom_left", "bottom_right"]]
    height = 14 + (5 if limits else 0) + (4 if state else 0) + (5 if delta else 0)
    fig = Figure(figsize=(13, height))
    FigureCanvasAgg(fig)
    axes = fig.subplot_mosaic(rows + ([["state_left", "state_right"]] if state else [])
                              + ([["delta_left", "delta_right"]] if delta else []),
                              height_ratios=[1.15] + ([1] if limits else []) + [1, 1] + ([0.8] if state else [])
                              + ([1] if delta else []))
    if limits:
        _limit(axes["limit_left"], figures)
        _latency(axes["limit_right"], figures)
    if state:
        _bounded_state(axes["state_left"], axes["state_right"], state)
    if delta:
        _delta(axes["delta_left"], axes["delta_right"], delta)
    top_left, top_right = axes["top_left"], axes["top_right"]
    bottom_left, bottom_right = axes["bottom_left"], axes["bottom_right"]
    fig.suptitle(f"format(\"sharegroup\") bench, {figures['date']}: "
                 f"{figures['dataset']['records']:,} records of {figures['dataset']['value_bytes']} B, "
                 f"{figures['machine']['cpus']} cores; (a) to (d) on the {figures['kafka']['detail_peer']} peer")
    _headline(axes["headline"], figures)

    plain = _rate(figures["baseline"][main])
    labels = ["plain ShareConsumer", "driver methods\n(no Spark)", "sharegroup -> noop"]
    values = [plain, figures["driver"]["timing"]["records_per_s"], _rate(figures["source"][main])]
    top_left.bar(labels, values, color=["#777777", "#9ecae1", "#3182bd"])
    top_left.axhline(TARGET_RATIO * plain, color="red", linestyle="--", label=f"target: {TARGET_RATIO} x plain")
    top_left.set_title(f"(a, b) records/s at steady state, {main} partitions")
    top_left.legend()

    partitions = [int(p) for p in figures["source"]]
    scaling = {peer: run["scaling"] for peer, run in figures.get("peers", {}).items()} or {
        figures["kafka"]["detail_peer"]: {"baseline": figures["baseline"], "source": figures["source"]}}
    for (peer, run), style in zip(scaling.items(), ["o-", "s--", "^:"], strict=False):
        top_right.plot(partitions, [_rate(run["baseline"][str(p)]) for p in partitions], style, color="#777777",
                       label=f"plain ShareConsumer, {peer}")
        top_right.plot(partitions, [_rate(run["source"][str(p)]) for p in partitions], style, color="#3182bd",
                       label=f"sharegroup -> noop, {peer}")
    top_right.set_xscale("log", base=2)
    top_right.set_xticks(partitions, [str(p) for p in partitions])
    top_right.set_xlabel("partitions")
    top_right.set_title("(d) records/s over partitions")
    top_right.set_yscale("log")
    top_right.legend()

    limits = [int(m) for m in figures["max_records_per_partition"]]
    bottom_left.plot(limits, [_rate(figures["max_records_per_partition"][str(m)]) for m in limits], "o-",
                     color="#3182bd")
    bottom_left.set_xscale("log")
    bottom_left.set_xticks(limits, [f"{m:,}" for m in limits])
    bottom_left.set_ylim(bottom=0)
    bottom_left.set_xlabel("maxRecordsPerPartition")
    bottom_left.set_title(f"(d) records/s over maxRecordsPerPartition, {main} partitions")

    phases = {k: v for k, v in figures["source"][main]["batch_phases_p50_ms"].items() if k != "triggerExecution"}
    buckets = {b["bucket"]: b["ms_per_epoch"] for b in figures["driver"]["profile"]["buckets"]}
    colors = [colormaps["tab20"](i) for i in range(20)]
    _stacked(bottom_right, "Spark batch\n(progress, p50)", phases, colors[:len(phases)])
    _stacked(bottom_right, "driver methods\n(cProfile, mean)", buckets, colors[len(phases):])
    bottom_right.set_xlabel("ms per micro-batch")
    bottom_right.set_title("(c) where a micro-batch's time goes")
    bottom_right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3)

    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / height))  # half an inch for the title, whatever the height
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def plot_bounded_state(figures: dict[str, Any], path: Path) -> None:
    """``--only state``: the two (g) panels alone."""
    fig = Figure(figsize=(13, 4.5))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    fig.suptitle(f"format(\"sharegroup\") bench, {figures['date']}: bounded state, {figures['machine']['cpus']} cores")
    _bounded_state(left, right, figures["bounded_state"])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def plot_delta(figures: dict[str, Any], path: Path) -> None:
    """``--only delta``: the two (h) panels alone."""
    fig = Figure(figsize=(13, 5.5))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    fig.suptitle(f"format(\"sharegroup\") bench, {figures['date']}: coordinator=delta, "
                 f"{figures['machine']['cpus']} cores")
    _delta(left, right, figures["delta"])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _delta(left: Any, right: Any, delta: dict[str, Any]) -> None:
    """Records/s of the plain reader, delta, broker and format("kafka") per peer, with the target; members on one
    partition with their lost races, titled with the coordination cost and driver bytes per epoch."""
    peers = delta["peers"]
    colors = ["#777777", "#31a354", "#3182bd", "#e6550d"]
    width = 0.8 / len(DELTA_CONSUMERS)
    top = max((rate or 0 for peer in peers.values() for rate in peer["records_per_s"].values()), default=0) or 1
    for index, ((name, label), color) in enumerate(zip(DELTA_CONSUMERS.items(), colors, strict=True)):
        for group, peer in enumerate(peers.values()):
            x = group + (index - (len(DELTA_CONSUMERS) - 1) / 2) * width
            rate = peer["records_per_s"][name]
            left.bar(x, rate or 0, width, color=color, label=label if group == 0 else None)
            to_reader = peer["ratio_to_plain_reader"][name]
            text = "n/a" if rate is None else f"{rate:,}" + (
                f"\n{to_reader:.2f}x" if to_reader is not None and name != "plain_reader" else "")
            left.text(x, (rate or 0) + top * 0.01, text, ha="center", va="bottom", fontsize=7)
    for group, peer in enumerate(peers.values()):
        reader = peer["records_per_s"]["plain_reader"]
        if reader:
            left.hlines(TARGET_RATIO * reader, group - 0.45, group + 0.45, colors="red", linestyles="--",
                        label=f"target: {TARGET_RATIO} x plain reader" if group == 0 else None)
    left.set_xticks(range(len(peers)), [f"{peer} Kafka" for peer in peers])
    left.set_ylim(0, top * 1.3)
    left.set_ylabel("records/s, steady state")
    options = delta["options"]
    left.set_title(f"(h) coordinator=delta, {delta['partitions']} partitions, batches of "
                   f"{options['maxRecordsPerTrigger']:,} / tasks of {options['maxRecordsPerPartition']:,}")
    left.legend(fontsize=7, loc="upper right")
    if "members" not in delta:
        right.set_axis_off()
        return
    members = delta["members"]["by_members"]
    counts = list(members)
    rates = [_rate(run) for run in members.values()]
    right.bar([f"{n} member{'s' if n != '1' else ''}" for n in counts], rates, color="#31a354")
    for n, rate, run in zip(counts, rates, members.values(), strict=True):
        right.text(f"{n} member{'s' if n != '1' else ''}", rate, f"{rate:,.0f}/s\n{run['lost_races']:,} lost races",
                   ha="center", va="bottom", fontsize=8)
    right.set_ylim(0, max(rates, default=0) * 1.35 or 1)
    right.set_ylabel("records/s, all members")
    cost, size = delta["coordination"], delta["driver_bytes"]
    right.set_title(f"(h) DeltaShareConsumer processes on ONE partition\n"
                    f"per {cost['records_per_epoch_p50']:,.0f}-record epoch: acquire "
                    f"{cost['acquire']['p50_ms']:.0f} ms, settle {cost['settle']['p50_ms']:.0f} ms p50; "
                    f"driver sends {cost['driver_bytes_per_epoch_p50']:,.0f} B\n(4 KiB records: "
                    f"{size['ratio_4096_to_64']}x the bytes of 64 B records)", fontsize=9)


def _bounded_state(left: Any, right: Any, state: dict[str, Any]) -> None:
    """Restart time per state size, labelled with its peak RSS increase; one sparse epoch's row per encoding."""
    runs = [state["baseline"], state["long_lived"], state["long_lived_maintained"]]
    labels = [f"{run['epochs']:,} epochs" for run in runs[:2]] + [f"{runs[2]['epochs']:,} epochs,\nafter maintenance"]
    left.bar(labels, [run["start_s"] for run in runs], color=["#9ecae1", "#3182bd", "#6baed6"])
    for label, run in zip(labels, runs, strict=True):
        left.text(label, run["start_s"], f"{run['start_s']:.2f} s\n+{run['peak_rss_increase_mb']:.0f} MB peak RSS",
                  ha="center", va="bottom", fontsize=8)
    left.set_ylim(0, max(run["start_s"] for run in runs) * 1.35)
    left.set_ylabel("s: open, fence, ledger reads, index")
    left.set_title(f"(g) driver restart ({state['ratio']['start_s']}x time, "
                   f"{state['ratio']['peak_rss_increase_mb']}x RSS)")
    row = state["ledger_row"]
    encodings = {"first versions\n(every missing offset)": row["legacy_bytes"], "now (gap runs)": row["current_bytes"]}
    right.bar(list(encodings), list(encodings.values()), color=["#777777", "#3182bd"])
    for label, size in encodings.items():
        right.text(label, size, f"{size:,} B", ha="center", va="bottom", fontsize=8)
    right.set_yscale("log")
    right.set_ylim(min(encodings.values()) / 4, max(encodings.values()) * 4)
    right.set_ylabel("ledger data on disk, bytes")
    right.set_title(f"(g) one epoch, {row['records']:,} records over {row['offsets']:,} offsets "
                    f"({row['legacy_to_current']}x)")


def _headline(axes: Any, figures: dict[str, Any]) -> None:
    """Grouped bars: one group per peer, one bar per consumer, labelled with its ratios."""
    peers = figures["headline"]
    colors = ["#3182bd", "#777777", "#e6550d", "#31a354"]
    width = 0.8 / len(CONSUMERS)
    top = max((rate or 0 for peer in peers.values() for rate in peer["records_per_s"].values()), default=0) or 1
    for index, ((name, label), color) in enumerate(zip(CONSUMERS.items(), colors, strict=True)):
        for group, peer in enumerate(peers.values()):
            x = group + (index - (len(CONSUMERS) - 1) / 2) * width
            rate = peer["records_per_s"][name]
            axes.bar(x, rate or 0, width, color=color, label=label if group == 0 else None)
            to_plain, to_sharegroup = peer["ratio_to_plain"][name], peer["ratio_to_sharegroup"][name]
            text = ("n/a" if rate is None else
                    f"{rate:,}" + (f"\n{to_plain:.2f}x plain" if to_plain is not None and name != "plain" else "")
                    + (f"\n{to_sharegroup:.2f}x sg" if to_sharegroup is not None and name != "sharegroup" else ""))
            axes.text(x, (rate or 0) + top * 0.01, text, ha="center", va="bottom", fontsize=7.5)
    axes.set_xticks(range(len(peers)), [f"{peer} Kafka" for peer in peers])
    axes.set_ylim(0, top * 1.3)
    axes.set_ylabel("records/s, steady state")
    axes.set_title(f"headline: four consumers of the same {figures['main_partitions']}-partition topic "
                   f"(n/a: could not run on that peer)")
    axes.legend(fontsize=8, loc="upper left")


def _limit(axes: Any, figures: dict[str, Any]) -> None:
    """Per peer: sharegroup, the limit (batch / (ShareFetch + Spark's own batch)) and the plain loop, with ratios;
    the lock limits' sharegroup rates as points."""
    peers = {name: peer for name, peer in figures["headline"].items() if "limit" in peer}
    bars = {"sharegroup -> noop": "#3182bd", "limit": "#e6550d", "plain ShareConsumer": "#777777"}
    width = 0.8 / len(bars)
    top = 1.0
    for group, peer in enumerate(peers.values()):
        limit = peer["limit"]
        values = [peer["records_per_s"]["sharegroup"] or 0, limit["limit_records_per_s"],
                  peer["records_per_s"]["plain"] or 0]
        top = max(top, *values)
        for index, ((label, color), value) in enumerate(zip(bars.items(), values, strict=True)):
            x = group + (index - 1) * width
            axes.bar(x, value, width, color=color, label=label if group == 0 else None)
            axes.text(x, value, f"{value:,.0f}", ha="center", va="bottom", fontsize=7.5)
        axes.text(group, top * 1.02, f"{limit['ratio_to_limit']:.2f}x limit (target {figures['limit_target']}), "
                  f"{peer['ratio_to_plain']['sharegroup']:.2f}x plain\nlimit = {limit['records_per_batch']:,} / "
                  f"({limit['share_fetch_ms']:.0f} + {limit['spark_batch_ms']:.0f} ms)", ha="center", fontsize=8)
    axes.set_xticks(range(len(peers)), [f"{name} Kafka" for name in peers])
    axes.set_yscale("log")
    axes.set_ylim(1_000, top * 3)
    axes.set_ylabel("records/s")
    axes.set_title(f"sharegroup against the in-flight limit, {figures['main_partitions']} partitions")
    axes.legend(fontsize=7, loc="lower right")


def _latency(axes: Any, figures: dict[str, Any]) -> None:
    """p50 and p99 latency, produce to commit, of the plain loop and the sharegroup query on every peer."""
    labels, p50, p99 = [], [], []
    for peer, run in figures["peers"].items():
        for name in ("plain", "sharegroup"):
            figure = run["latency"].get(name, {})
            labels.append(f"{name}\n{peer}")
            p50.append(figure.get("p50_ms", 0))
            p99.append(figure.get("p99_ms", 0))
    x = range(len(labels))
    axes.bar([i - 0.2 for i in x], p50, 0.4, color="#3182bd", label="p50")
    axes.bar([i + 0.2 for i in x], p99, 0.4, color="#9ecae1", label="p99")
    for i, (low, high) in enumerate(zip(p50, p99, strict=True)):
        axes.text(i, high, f"{low:,.0f} / {high:,.0f}", ha="center", va="bottom", fontsize=7.5)
    axes.set_xticks(list(x), labels, fontsize=8)
    axes.set_ylabel("ms, produce to commit")
    rates = ", ".join(f"{peer} {run['latency']['rate_records_per_s']:,}/s" for peer, run in figures["peers"].items())
    axes.set_title(f"latency at a steady rate well below the limit ({rates})")
    axes.legend(fontsize=8)


def _stacked(axes: Any, label: str, parts: dict[str, float], colors: list[Any]) -> None:
    left = 0.0
    for (name, ms), color in zip(parts.items(), colors, strict=False):
        if ms > 0:
            axes.barh(label, ms, left=left, label=name, color=color)
            left += ms
