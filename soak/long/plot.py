"""The long soak's figure: soak-long.png, six panels over the run's minutes, so growth shows as a slope.

Memory of the driver (JVM and Python), of the other processes, batch times per lane, state files
and ledger rows, state bytes (live and on disk), and threads and descriptors. Drawn on an Agg
canvas without pyplot, as bench/plot.py draws the bench's: no display, no global backend state.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from soak.long.intervals import LANES, MB, ROLES, THREAD_ROLES, Interval, TableFigures, roots
from soak.long.verdict import Verdict

__all__ = ["plot"]

_LANE_COLORS = {"broker": "#3182bd", "delta": "#31a354"}
_ROOT_STYLES = {"broker/state": ("#3182bd", "o-"), "delta/state": ("#31a354", "s-"), "delta/group": ("#e6550d", "^-")}

#: One figure of an interval (None where it was not measured).
Value = Callable[[Interval], float | None]


def _process(role: str, figure: str) -> Value:
    return lambda i: getattr(i.process(role), figure)


def _batch(lane: str, figure: str) -> Value:
    return lambda i: getattr(i.lane(lane).batches, figure)


def _root_sum(root: str, figure: Callable[[TableFigures], float], scale: float = 1.0) -> Value:
    return lambda i: sum(figure(t) for t in roots(i).get(root, {}).values()) / scale


def _ledger_rows(root: str) -> Value:
    return lambda i: float(roots(i)[root]["ledger"].rows) if "ledger" in roots(i).get(root, {}) else None


def _line(axes: Any, intervals: list[Interval], value: Value, label: str, style: str = "o-",
          color: str | None = None) -> None:
    points = [(i.end_min, v) for i in intervals if (v := value(i)) is not None]
    if points:
        axes.plot([x for x, _ in points], [y for _, y in points], style, color=color, label=label, markersize=4)


def _driver_memory(axes: Any, intervals: list[Interval]) -> None:
    _line(axes, intervals, _process("driver_jvm", "rss_mb"), "JVM RSS", color="#e6550d")
    _line(axes, intervals, lambda i: None if i.jvm_heap_committed_mb is None or i.process("driver_jvm").rss_mb is None
          else i.process("driver_jvm").rss_mb - i.jvm_heap_committed_mb, "JVM RSS outside the committed heap", "^-",
          "#7f2704")
    _line(axes, intervals, lambda i: i.jvm_heap_live_mb, "JVM heap live (after a full GC)", "o--", "#fd8d3c")
    _line(axes, intervals, lambda i: i.jvm_heap_floor_mb, "JVM heap floor (least live in the interval)", "s--",
          "#a63603")
    _line(axes, intervals, lambda i: i.jvm_metaspace_mb, "JVM metaspace", "o:", "#fdae6b")
    _line(axes, intervals, _process("driver_python", "rss_mb"), "Python RSS", color="#3182bd")
    _line(axes, intervals, lambda i: i.python_heap_mb, "Python heap (soak's own left out)", "o--", "#6baed6")
    _line(axes, intervals, lambda i: i.python_soak_mb, "Python heap, the soak's own", "o:", "#9ecae1")
    axes.set_ylabel("MB")
    axes.set_title("driver memory")


def _other_memory(axes: Any, intervals: list[Interval]) -> None:
    for role, color in (("runner_broker", "#3182bd"), ("runner_delta", "#31a354"), ("task_workers", "#777777"),
                        ("worker", "#e6550d")):
        _line(axes, intervals, _process(role, "rss_mb"), ROLES[role], color=color)
    axes.set_ylabel("MB RSS")
    axes.set_title("the other processes (a runner's line breaks where it was replaced)")


def _batch_times(axes: Any, intervals: list[Interval]) -> None:
    for lane in LANES:
        color = _LANE_COLORS[lane]
        _line(axes, intervals, _batch(lane, "p50_ms"), f"{lane} p50", color=color)
        _line(axes, intervals, _batch(lane, "p99_ms"), f"{lane} p99", "o--", color)
    axes.set_ylabel("ms, durationMs.triggerExecution")
    axes.set_title("batch time per interval")


def _state_files(axes: Any, intervals: list[Interval]) -> None:
    names = sorted({root for i in intervals for root in roots(i)})
    for root in names:
        color, style = _ROOT_STYLES.get(root, ("#777777", "o-"))
        _line(axes, intervals, _root_sum(root, lambda t: t.files), f"{root} data files", style, color)
    axes.set_ylabel("live data files")
    rows = axes.twinx()
    for root in names:
        color, _ = _ROOT_STYLES.get(root, ("#777777", "o-"))
        _line(rows, intervals, _ledger_rows(root), f"{root} ledger rows", "x:", color)
    rows.set_ylabel("ledger rows (dotted)")
    rows.set_ylim(bottom=0)
    rows.legend(fontsize=7, loc="upper right")
    axes.set_title("Delta tables: files and ledger rows")


def _state_bytes(axes: Any, intervals: list[Interval]) -> None:
    for root in sorted({root for i in intervals for root in roots(i)}):
        color, style = _ROOT_STYLES.get(root, ("#777777", "o-"))
        _line(axes, intervals, _root_sum(root, lambda t: t.bytes, MB), f"{root} live", style, color)
        _line(axes, intervals, _root_sum(root, lambda t: t.disk_bytes, MB), f"{root} on disk", "o--", color)
    axes.set_ylabel("MB")
    axes.set_title("Delta tables: bytes")


def _threads(axes: Any, intervals: list[Interval]) -> None:
    colors = {"driver_jvm": "#e6550d", "driver_python": "#3182bd", "runner_delta": "#756bb1", "worker": "#31a354"}
    for role in THREAD_ROLES:
        _line(axes, intervals, _process(role, "threads"), f"{ROLES[role]} threads", color=colors[role])
        _line(axes, intervals, lambda i, role=role: i.thread_floors.get(role), f"{ROLES[role]} threads floor", "s:",
              colors[role])
        _line(axes, intervals, _process(role, "fds"), f"{ROLES[role]} fds", "o--", colors[role])
    axes.set_ylabel("count")
    axes.set_title("threads and open descriptors")


def plot(intervals: list[Interval], verdict: Verdict, title: str, path: Path) -> None:
    fig = Figure(figsize=(13, 12))
    FigureCanvasAgg(fig)
    panels = fig.subplots(3, 2)
    for draw, axes in zip((_driver_memory, _other_memory, _batch_times, _state_files, _state_bytes, _threads),
                          panels.flat, strict=True):
        draw(axes, intervals)
        axes.set_xlabel("minutes")
        axes.set_xlim(left=0)
        axes.set_ylim(bottom=0)
        axes.legend(fontsize=7, loc="upper left")
    failed = ", ".join(check.name for check in verdict.failed[:4])
    fig.suptitle(f"{title}\nverdict: {'flat' if verdict.ok else 'FAILED: ' + failed}", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
