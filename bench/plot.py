"""The bench's figure: one PNG with the views a reader needs to judge the source.

The throughput story (records/s over partitions, one line per consumer and the per-partition
limit, the done-when checks in its title), the limit's two terms against a default sharegroup
batch, latency, (d) over maxRecordsPerPartition, (c) where one micro-batch's time goes, (g)
bounded state (a driver's restart on a long-lived state against a short-lived one, and one
compacted-topic epoch's ledger row), (h) coordinator=delta, (j) ``sharegroup describe --all-groups`` against
Kafka's own tool over the number of groups, (k) both coordinators' state on local disk against S3 and (l) members
with per-record work on one partition, and N queries in one broker group.
Drawn on an Agg canvas without pyplot, so no display and no global backend state are involved.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.delta_coordinator import DELTA_CONSUMERS
from bench.members import MEMBER_SERIES
from bench.remote_state import COORDINATORS, STORES
from bench.report import TARGET_RATIO
from bench.story import STORY_CONSUMERS

__all__ = ["plot", "plot_admin_broker", "plot_bounded_state", "plot_delta", "plot_members", "plot_state_store"]


def _rate(run: dict[str, Any]) -> float:
    return run["throughput"]["records_per_s"]


def plot(figures: dict[str, Any], path: Path) -> None:
    state = figures.get("bounded_state")
    delta = figures.get("delta")
    broker = figures.get("admin", {}).get("broker_groups")
    stores = figures["state_store"] if "local" in figures.get("state_store", {}) else None
    members = figures["members"] if "runs" in figures.get("members", {}) else None
    stories = list(figures.get("story", {}))
    rows = [[f"story_{peer}", f"story_{peer}"] for peer in stories] + [
        ["limit_left", "limit_right"], ["bottom_left", "bottom_right"]]
    height = (10 + 6 * len(stories) + (4 if state else 0) + (5 if delta else 0) + (4 if broker else 0)
              + (4 if stores else 0) + (5 if members else 0))
    fig = Figure(figsize=(13, height))
    FigureCanvasAgg(fig)
    axes = fig.subplot_mosaic(rows + ([["state_left", "state_right"]] if state else [])
                              + ([["delta_left", "delta_right"]] if delta else [])
                              + ([["broker_left", "broker_right"]] if broker else [])
                              + ([["stores_left", "stores_right"]] if stores else [])
                              + ([["members_left", "members_right"]] if members else []),
                              height_ratios=[1.4] * len(stories) + [1, 1] + ([0.8] if state else [])
                              + ([1] if delta else []) + ([0.8] if broker else []) + ([0.8] if stores else [])
                              + ([1] if members else []))
    fig.suptitle(f"format(\"sharegroup\") bench, {figures['date']}: records of {figures['dataset']['value_bytes']} B, "
                 f"{figures['machine']['cpus']} cores; (c) and (d) on the {figures['kafka']['detail_peer']} peer")
    for peer in stories:
        _story(axes[f"story_{peer}"], figures, peer)
    if stories:
        _limit_terms(axes["limit_left"], figures["story"][stories[0]], stories[0])
    else:
        axes["limit_left"].set_axis_off()
    _latency(axes["limit_right"], figures)
    if state:
        _bounded_state(axes["state_left"], axes["state_right"], state)
    if delta:
        _delta(axes["delta_left"], axes["delta_right"], delta)
    if broker:
        _admin_broker(axes["broker_left"], axes["broker_right"], figures["admin"])
    if stores:
        _state_store(axes["stores_left"], axes["stores_right"], stores)
    if members:
        _members(axes["members_left"], axes["members_right"], members)
    bottom_left, bottom_right = axes["bottom_left"], axes["bottom_right"]

    per_limit = figures["max_records_per_partition"]
    limits = [int(m) for m in per_limit]
    bottom_left.plot(limits, [_rate(per_limit[str(m)]) for m in limits], "o-", color="#3182bd")
    for m in limits:
        run = per_limit[str(m)]
        bottom_left.annotate(f"{run['batch_phases_p50_ms'].get('triggerExecution', 0):,.0f} ms/batch",
                             (m, _rate(run)), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7.5)
    bottom_left.set_xscale("log")
    bottom_left.set_xticks(limits, [f"{m:,}" for m in limits])
    bottom_left.set_ylim(bottom=0, top=max(_rate(run) for run in per_limit.values()) * 1.25 or 1)
    bottom_left.set_xlabel("maxRecordsPerPartition")
    bottom_left.set_title(f"(d) sharegroup, default batch, over maxRecordsPerPartition, "
                          f"{figures['main_partitions']} partitions")

    source = per_limit[figures["max_records_per_partition_default"]]
    phases = {k: v for k, v in source["batch_phases_p50_ms"].items() if k != "triggerExecution"}
    buckets = {b["bucket"]: b["ms_per_epoch"] for b in figures["driver"]["profile"]["buckets"]}
    colors = [colormaps["tab20"](i) for i in range(20)]
    _stacked(bottom_right, "Spark batch\n(progress, p50)", phases, colors[:len(phases)])
    _stacked(bottom_right, "driver methods\n(cProfile, mean)", buckets, colors[len(phases):])
    bottom_right.set_xlabel("ms per micro-batch")
    bottom_right.set_title("(c) where a default micro-batch's time goes")
    bottom_right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3)

    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / height))  # half an inch for the title, whatever the height
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


_STORY_STYLES = {"plain": ("#777777", "o-"), "broker": ("#3182bd", "s-"), "broker_tuned": ("#9ecae1", "s--"),
                 "delta": ("#31a354", "^-"), "spark_kafka": ("#e6550d", "D-"), "kafka_perf_tool": ("#bbbbbb", "v:")}


def _story(axes: Any, figures: dict[str, Any], peer: str) -> None:
    """Records/s over partitions: one line per consumer and the per-partition limit, the done-when checks in the
    title."""
    scaling, limits, story = figures["scaling"][peer], figures["limit_per_partition"][peer], figures["story"][peer]
    counts = [int(p) for p in limits]
    for name, label in STORY_CONSUMERS.items():
        color, style = _STORY_STYLES[name]
        points = [(p, scaling[name][str(p)]) for p in counts if scaling[name][str(p)] is not None]
        axes.plot([p for p, _ in points], [r for _, r in points], style, color=color, label=f"{name}: {label}")
    points = [(p, limits[str(p)]) for p in counts if limits[str(p)] is not None]
    axes.plot([p for p, _ in points], [r for _, r in points], "k:", linewidth=2.5,
              label="limit: partitions x lock limit / (ShareFetch + Spark's own batch)")
    for p, rate in points:
        axes.annotate(f"{rate:,}", (p, rate), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7.5)
    broker = [(p, scaling["broker"][str(p)]) for p in counts if scaling["broker"][str(p)] is not None]
    for p, rate in broker:
        ratio = story["ratios"]["broker"][str(p)]["to_limit"]
        axes.annotate(f"{rate:,}" + (f"\n{ratio:.2f} of limit" if ratio is not None else ""), (p, rate),
                      textcoords="offset points", xytext=(0, -22), ha="center", fontsize=7.5, color="#3182bd")
    axes.set_xscale("log", base=2)
    axes.set_xticks(counts, [str(p) for p in counts])
    axes.set_xlabel("partitions")
    axes.set_yscale("log")
    axes.set_ylabel("records/s, steady state (log)")
    checks = "; ".join(f"{check['check'].split(': ')[1]} = {'-' if check['value'] is None else check['value']:}"
                       f" ({'met' if check['met'] else 'not met'})" for check in story["checks"])
    axes.set_title(f"throughput story on {peer} Kafka, {story['value_bytes']} B records, median of {story['rounds']} "
                   f"interleaved round(s)\n{checks}", fontsize=10)
    axes.legend(fontsize=7.5, loc="lower right")


def _limit_terms(axes: Any, story: dict[str, Any], peer: str) -> None:
    """The limit's two terms per partition count, stacked, beside a default broker batch's time."""
    counts = list(story["limit"])
    x = range(len(counts))
    fetch = [story["limit"][p].get("share_fetch_ms") or 0 for p in counts]
    own = [story["limit"][p].get("spark_batch_ms") or 0 for p in counts]
    axes.bar([i - 0.2 for i in x], fetch, 0.4, color="#777777", label="ShareFetch (window / plain loop's rate)")
    axes.bar([i - 0.2 for i in x], own, 0.4, bottom=fetch, color="#e6550d",
             label="Spark's own batch (trivial source, best task count)")
    broker = [story["runs"]["broker"][p].get("batch_phases_p50_ms", {}).get("triggerExecution", 0) for p in counts]
    axes.bar([i + 0.2 for i in x], broker, 0.4, color="#3182bd", label="sharegroup default batch (p50)")
    for i, p in enumerate(counts):
        axes.text(i - 0.2, fetch[i] + own[i], f"{story['limit'][p]['records_per_batch']:,}\nrecords",
                  ha="center", va="bottom", fontsize=7)
        axes.text(i + 0.2, broker[i], f"{story['runs']['broker'][p].get('records_per_batch_p50', 0):,.0f}\nrecords",
                  ha="center", va="bottom", fontsize=7)
    axes.set_xticks(list(x), [f"{p} partitions" for p in counts])
    axes.set_ylabel("ms per batch of partitions x lock limit")
    axes.set_title(f"the limit's terms on {peer} Kafka, against a default sharegroup batch")
    axes.legend(fontsize=7, loc="upper left")


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
    _two_panels(path, 5.5, f"format(\"sharegroup\") bench, {figures['date']}: coordinator=delta, "
                f"{figures['machine']['cpus']} cores", lambda left, right: _delta(left, right, figures["delta"]))


def plot_admin_broker(figures: dict[str, Any], path: Path) -> None:
    """``--only admin-broker``: the two (j) panels alone."""
    _two_panels(path, 4.5, f"sharegroup admin bench, {figures['date']}: describe --all-groups on one Apache Kafka "
                f"broker, {figures['machine']['cpus']} cores",
                lambda left, right: _admin_broker(left, right, figures["admin"])
                if "broker_groups" in figures["admin"] else None)


def plot_state_store(figures: dict[str, Any], path: Path) -> None:
    """``--only state-store``: the two (k) panels alone."""
    _two_panels(path, 4.5, f"format(\"sharegroup\") bench, {figures['date']}: state on local disk against S3, "
                f"{figures['machine']['cpus']} cores",
                lambda left, right: _state_store(left, right, figures["state_store"])
                if "local" in figures["state_store"] else None)


def plot_members(figures: dict[str, Any], path: Path) -> None:
    """``--only members``: the two (l) panels alone."""
    _two_panels(path, 5.5, f"format(\"sharegroup\") bench, {figures['date']}: members with work on one partition, "
                f"and N queries in one broker group, {figures['machine']['cpus']} cores",
                lambda left, right: _members(left, right, figures["members"]) if "runs" in figures["members"] else None)


def _two_panels(path: Path, height: float, title: str, draw: Callable[[Any, Any], None]) -> None:
    """One figure of two panels side by side, drawn by ``draw(left, right)``, saved as ``path``."""
    fig = Figure(figsize=(13, height))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    fig.suptitle(title)
    draw(left, right)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _admin_broker(left: Any, right: Any, admin: dict[str, Any]) -> None:
    """Wall seconds over the number of groups, our CLI against Kafka's tool (each with its start-up) and our API
    in-process; the Kafka requests each sent, on a log scale: ours one per API per coordinator but
    DescribeShareGroupOffsets, one per group."""
    by_count = admin["broker_groups"]
    counts = [int(n) for n in by_count]
    ways = {"sharegroup": ("sharegroup describe (Python start included)", "#3182bd", "o-"),
            "kafka_tool": ("kafka-share-groups --offsets (JVM start included)", "#e6550d", "D-"),
            "python_api": ("describe_groups(), in-process", "#9ecae1", "s--"),
            "offsets_one_request": ("DescribeShareGroupOffsets: 1 request of N groups", "#555555", "x:"),
            "offsets_one_per_group": ("DescribeShareGroupOffsets: N requests of 1 group", "#aaaaaa", "+:")}
    for way, (label, color, style) in ways.items():
        walls = [by_count[str(n)][way]["wall_s"] for n in counts]
        left.plot(counts, walls, style, color=color, label=label)
        if way in ("sharegroup", "kafka_tool"):
            for n, wall in zip(counts, walls, strict=True):
                left.annotate(f"{wall:.2f} s", (n, wall), textcoords="offset points", ha="center", fontsize=7.5,
                              xytext=(0, 6 if way == "kafka_tool" else -14), color=color)
    left.set_xscale("log")
    left.set_xticks(counts, [f"{n:,}" for n in counts])
    left.set_xlabel("share groups")
    left.set_ylim(bottom=0)
    left.set_ylabel("wall s, median")
    agreed = all(f["agreement"]["agreed"] for f in by_count.values())
    left.set_title(f"(j) describe every group, {admin['broker_groups_run']['partitions']} partitions each; SPSO and "
                   f"lag {'agree' if agreed else 'DISAGREE'}", fontsize=10)
    left.legend(fontsize=7.5, loc="upper left")
    x = range(len(counts))
    for offset, way in ((-0.2, "sharegroup"), (0.2, "kafka_tool")):
        sent = [by_count[str(n)][way].get("requests_total") or 0 for n in counts]
        right.bar([i + offset for i in x], sent, 0.4, color=ways[way][1], label=ways[way][0].split(" (")[0])
        for i, n in enumerate(sent):
            right.text(i + offset, n, f"{n:,}", ha="center", va="bottom", fontsize=7.5)
    right.set_xticks(list(x), [f"{n:,} group{'s' if n != 1 else ''}" for n in counts])
    right.set_yscale("log")
    right.set_ylabel("Kafka requests sent (broker's count)")
    right.set_title("(j) requests per describe (the broker's count)", fontsize=10)
    right.legend(fontsize=7.5, loc="upper left")


def _state_store(left: Any, right: Any, stores: dict[str, Any]) -> None:
    """Grouped bars per coordinator, local disk beside S3: the Spark batch p50 (labelled with Delta commits per
    steady batch) and records/s."""
    run = stores["store_run"]
    colors = {"local": "#3182bd", "s3": "#e6550d"}
    x = range(len(COORDINATORS))
    for offset, (store, where) in zip((-0.2, 0.2), STORES.items(), strict=True):
        figures = [stores[store].get(coordinator, {}) for coordinator in COORDINATORS]
        batch = [figure.get("batch_p50_ms") or 0 for figure in figures]
        rates = [figure["throughput"]["records_per_s"] if "throughput" in figure else 0 for figure in figures]
        left.bar([i + offset for i in x], batch, 0.4, color=colors[store], label=where)
        right.bar([i + offset for i in x], rates, 0.4, color=colors[store], label=where)
        for i, (figure, ms, rate) in enumerate(zip(figures, batch, rates, strict=True)):
            commits = figure.get("commits", {}).get("per_batch_steady")
            left.text(i + offset, ms, "n/a" if commits is None else f"{ms:,.0f} ms\n{commits} commits/batch",
                      ha="center", va="bottom", fontsize=7.5)
            right.text(i + offset, rate, f"{rate:,}", ha="center", va="bottom", fontsize=7.5)
    for axes, label in ((left, "Spark batch p50, ms"), (right, "records/s, steady state")):
        axes.set_xticks(list(x), list(COORDINATORS))
        axes.set_ylabel(label)
        axes.set_ylim(0, max((bar.get_height() for bar in axes.patches), default=0) * 1.35 or 1)
        axes.legend(fontsize=7.5, loc="upper left")
    left.set_title(f"(k) state on local disk and on S3, {run['partitions']} partitions, batches of "
                   f"{run['trigger']:,} records", fontsize=10)
    right.set_title(f"(k) records/s, median of {run['rounds']} interleaved round(s)", fontsize=10)


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


_MEMBER_STYLES = {"workers": ("#31a354", "^-"), "workers_and_query": ("#a1d99b", "^--"),
                  "large_batches": ("#777777", "o-"), "small_batches": ("#3182bd", "s-"),
                  "small_batches_and_query": ("#9ecae1", "s--")}


def _members(left: Any, right: Any, members: dict[str, Any]) -> None:
    """Records/s over members on one partition, one line per series, each labelled with its speed-up at the most
    members; N queries' records/s in one broker group, each bar labelled with how the records split."""
    counts = [int(n) for n in next(iter(members["delta"].values()))]
    for coordinator, by_name in MEMBER_SERIES.items():
        for name, label in by_name.items():
            color, style = _MEMBER_STYLES[name]
            rates = members[coordinator][name]
            points = [(n, rates[str(n)]) for n in counts if rates[str(n)] is not None]
            speedup = members["speedup"][coordinator][name].get(str(counts[-1]))
            left.plot([n for n, _ in points], [r for _, r in points], style, color=color,
                      label=f"{coordinator}: {label}" + (f" ({speedup:.2f}x)" if speedup is not None else ""))
            if points:
                left.annotate(f"{points[-1][1]:,}", points[-1], textcoords="offset points", xytext=(4, 0),
                              fontsize=7, color=color, va="center")
    left.set_xscale("log", base=2)
    left.set_xticks(counts, [str(n) for n in counts])
    left.set_xlim(counts[0] * 0.85, counts[-1] * 1.35)
    left.set_ylim(bottom=0)
    left.set_xlabel("members on ONE partition (each a process)")
    left.set_ylabel("records/s, members' start to last record acknowledged")
    left.set_title(f"(l) members with {members['work_ms']:g} ms of work per record, {members['records']:,} records, "
                   f"max.poll.records {members['max_poll_records']}", fontsize=10)
    left.legend(fontsize=7, loc="upper left")
    queries, setup = members["queries"], members["queries_run"]
    labels = [f"{n} quer{'y' if n == '1' else 'ies'}" for n in queries]
    rates = [query.get("records_per_s") or 0 for query in queries.values()]
    right.bar(labels, rates, color="#3182bd")
    for label, rate, query in zip(labels, rates, queries.values(), strict=True):
        text = "n/a" if "split" not in query else (
            f"{rate:,}/s\nsplit {' / '.join(f'{n:,}' for n in query['split'])}\n"
            f"{query['duplicates']} duplicates, {query['missing']} missing")
        right.text(label, rate, text, ha="center", va="bottom", fontsize=7.5)
    right.set_ylim(0, max(rates, default=0) * 1.4 or 1)
    right.set_ylabel("records/s, all queries")
    right.set_title(f"(l) N queries (Spark applications) in one broker group, {setup['partitions']} partitions, "
                    f"{setup['records']:,} records", fontsize=10)
