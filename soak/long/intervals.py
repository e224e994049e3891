"""The long soak's figures, one :class:`Interval` per sample, and the markdown tables made of them.

A sample closes an interval: memory, threads and descriptors are as they are at that moment,
batch times are those of the batches that finished within the interval, record counts and table
sizes are as they stand then. Everything is plain data (dataclasses of numbers and strings) so
soak-long.json holds exactly what the tables, the plot and the verdict are made from, and an
earlier run's JSON can be judged and drawn again (``python -m soak.long --report``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["LANES", "MB", "ROLES", "THREAD_ROLES", "BatchFigures", "Interval", "LaneFigures", "ProcessFigures",
           "RecordFigures", "SparkPerStart", "TableFigures", "markdown", "roots"]

#: The two lanes: the soak of soak/run.py on the broker's share group, and the Delta group's query and worker.
LANES = ("broker", "delta")
#: The processes sampled, by role, and how the tables name them.
ROLES = {
    "driver_jvm": "driver JVM",
    "driver_python": "driver Python",
    "runner_broker": "source runner, broker lane",
    "runner_delta": "source runner, delta lane",
    "task_workers": "Spark's Python task workers",
    "worker": "DeltaShareConsumer worker",
}
#: The processes whose threads and descriptors are judged: the long-lived ones (the broker lane's runner is killed
#: and started again hundreds of times; Spark's task workers come and go).
THREAD_ROLES = ("driver_jvm", "driver_python", "runner_delta", "worker")
MB = 1024 * 1024


@dataclass(frozen=True)
class ProcessFigures:
    """One role's processes at a sample: their pids, and their resident memory, threads and open descriptors summed.

    The pids say whether the same processes lived through two samples: memory of a process
    that was replaced in between (a killed runner, a restarted worker) says nothing of growth.
    """

    pids: tuple[int, ...] = ()
    rss_mb: float | None = None
    threads: int | None = None
    fds: int | None = None
    #: threads by name (digits as ``#``: librdkafka's ``rdk:broker#``, the JVM's pools), so a growth names its owner
    thread_names: dict[str, int] = field(default_factory=dict)
    #: descriptors by kind: socket, pipe, anon_inode (selectors, eventfds) or file
    fd_kinds: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TableFigures:
    """One Delta table at a sample: its version, the live snapshot's data files, bytes and rows, and what the
    table's folder holds on disk (files compaction replaced or a lost commit race left, not vacuumed yet, and
    the log)."""

    version: int | None = None
    files: int = 0
    bytes: int = 0
    rows: int = 0
    disk_bytes: int = 0
    log_files: int = 0
    error: str | None = None
    #: every file under the table's folder (data files live or not, the log)
    disk_files: int = 0
    #: what the ``_delta_log`` folder holds (commits, checkpoints): tells the log from data files beyond the snapshot
    log_bytes: int | None = None


@dataclass(frozen=True)
class BatchFigures:
    """The batches that finished in the interval (those that read records): how many, and their
    ``durationMs.triggerExecution`` percentiles; a run's first batch apart (``first_of_run``), since after a fault
    it is the recovery (the planned batch replayed, the killed member's locks waited out), not the steady pace."""

    count: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    first_of_run: int = 0
    first_of_run_max_ms: float | None = None


@dataclass(frozen=True)
class RecordFigures:
    """A lane's records so far. ``elsewhere``: taken by another member of the group (the delta lane's worker, the
    broker lane's independent members); ``pending``: delivered to Kafka and in neither place yet (in flight);
    ``overdue``: pending although produced before the previous sample, an interval or more ago (lost, unless
    the drain brings them); ``duplicated``: held twice (by the sink, by the worker, or on the delta lane by both,
    whose group gives each record to one member)."""

    produced: int = 0
    in_sink: int = 0
    elsewhere: int = 0
    in_both: int = 0
    pending: int = 0
    overdue: int = 0
    duplicated: int = 0


@dataclass(frozen=True)
class LaneFigures:
    batches: BatchFigures = field(default_factory=BatchFigures)
    records: RecordFigures = field(default_factory=RecordFigures)
    #: starts of the lane's query so far (the first included): restarts after faults and failures
    query_starts: int = 0


@dataclass(frozen=True)
class SparkPerStart:
    """Spark's own objects left in the driver per start of a streaming query (soak.long.spark_baseline measures
    them). Per driver process (``driver_jvm``, ``driver_python``): threads by name and descriptors by kind left per
    query start."""

    threads: dict[str, dict[str, int]] = field(default_factory=dict)
    fds: dict[str, dict[str, int]] = field(default_factory=dict)
    starts: int = 0
    #: the driver JVM's live heap left per start (the session the query cloned, most likely held by the idle-worker
    #: monitor thread it leaves), net of what its batches add to Spark's status store (capped by count, full in a
    #: soak's first minutes)
    jvm_heap_mb: float = 0.0

    def thread_count(self, role: str) -> int:
        return sum(self.threads.get(role, {}).values())

    def fd_count(self, role: str) -> int:
        return sum(self.fds.get(role, {}).values())

    def to_dict(self) -> dict[str, Any]:
        return {"threads": self.threads, "fds": self.fds, "starts": self.starts, "jvm_heap_mb": self.jvm_heap_mb}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SparkPerStart:
        """As :meth:`to_dict` wrote it; none (a run from before the probe) allows nothing."""
        return cls(**data) if data else cls()


@dataclass(frozen=True)
class Interval:
    """One sample: the interval ``index`` (from 1) ending ``end_s`` seconds after the lanes started."""

    index: int
    end_s: float
    seconds: float
    processes: dict[str, ProcessFigures] = field(default_factory=dict)
    #: the driver JVM's heap after a full collection (what is live, batches in flight included), and its metaspace
    #: (loaded classes)
    jvm_heap_live_mb: float | None = None
    jvm_metaspace_mb: float | None = None
    #: the driver Python's heap outside the soak's own modules (tracemalloc), and its pymalloc blocks (all)
    python_heap_mb: float | None = None
    python_blocks: int | None = None
    lanes: dict[str, LaneFigures] = field(default_factory=dict)
    #: by label: lane/root/table, e.g. ``delta/group/share_state``
    tables: dict[str, TableFigures] = field(default_factory=dict)
    #: how long taking this sample took (the soak's main thread waits for it)
    sample_s: float = 0.0
    #: the soak's own bookkeeping in the driver Python's heap (record numbers, independent members): part of its RSS
    python_soak_mb: float | None = None
    #: the least of the driver JVM's live heap read every minute of the interval: what stays, not what is in flight
    jvm_heap_floor_mb: float | None = None
    #: the least thread count of each of :data:`THREAD_ROLES`' processes, counted every 15 s of the interval
    thread_floors: dict[str, int] = field(default_factory=dict)
    #: the heap the driver JVM has committed (its RSS less this is what it holds outside the heap)
    jvm_heap_committed_mb: float | None = None

    @property
    def end_min(self) -> float:
        return self.end_s / 60

    def process(self, role: str) -> ProcessFigures:
        return self.processes.get(role, ProcessFigures())

    def lane(self, name: str) -> LaneFigures:
        return self.lanes.get(name, LaneFigures())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Interval:
        """An interval as :meth:`to_dict` wrote it (JSON turns tuples into lists)."""
        return cls(
            **{**data,
               "processes": {role: ProcessFigures(**{**figures, "pids": tuple(figures.get("pids", ()))})
                             for role, figures in data.get("processes", {}).items()},
               "lanes": {name: LaneFigures(BatchFigures(**lane["batches"]), RecordFigures(**lane["records"]),
                                           lane.get("query_starts", 0))
                         for name, lane in data.get("lanes", {}).items()},
               "tables": {label: TableFigures(**figures) for label, figures in data.get("tables", {}).items()}})


def roots(interval: Interval) -> dict[str, dict[str, TableFigures]]:
    """The tables by root (``broker/state``, ``delta/state``, ``delta/group``), then by table name."""
    grouped: dict[str, dict[str, TableFigures]] = {}
    for label, figures in sorted(interval.tables.items()):
        root, _, name = label.rpartition("/")
        grouped.setdefault(root, {})[name] = figures
    return grouped


# -- markdown --------------------------------------------------------------------------------------
def _n(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pair(*values: float | None, digits: int = 0) -> str:
    return " / ".join(_n(v, digits) for v in values)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _processes(intervals: list[Interval]) -> str:
    headers = ["min", "driver JVM RSS / committed heap MB", "JVM heap live / floor / metaspace MB",
               "driver Python RSS / heap MB", "runners RSS MB broker / delta", "task workers RSS MB (n)",
               "worker RSS MB", "threads (floor) JVM / Python / delta runner / worker",
               "fds JVM / Python / delta runner / worker"]
    rows = []
    for i in intervals:
        jvm, python, worker, tasks = (i.process(r) for r in ("driver_jvm", "driver_python", "worker", "task_workers"))
        judged = [i.process(role) for role in THREAD_ROLES]
        threads = " / ".join(f"{_n(p.threads)} ({_n(i.thread_floors.get(role))})" if role in i.thread_floors
                             else _n(p.threads) for role, p in zip(THREAD_ROLES, judged, strict=True))
        rows.append([_n(i.end_min), _pair(jvm.rss_mb, i.jvm_heap_committed_mb),
                     _pair(i.jvm_heap_live_mb, i.jvm_heap_floor_mb, i.jvm_metaspace_mb),
                     _pair(python.rss_mb, i.python_heap_mb, digits=1),
                     _pair(i.process("runner_broker").rss_mb, i.process("runner_delta").rss_mb),
                     f"{_n(tasks.rss_mb)} ({len(tasks.pids)})", _n(worker.rss_mb),
                     threads, _pair(*(p.fds for p in judged))])
    return _table(headers, rows)


def _records(intervals: list[Interval]) -> str:
    headers = ["min"]
    for name in LANES:
        headers += [f"{name}: batches, p50 / p99 ms (runs' first batches: n, max ms)",
                    f"{name}: produced / in sink / elsewhere / overdue / duplicated"]
    rows = []
    for i in intervals:
        row = [_n(i.end_min)]
        for name in LANES:
            lane = i.lane(name)
            b, r = lane.batches, lane.records
            firsts = f" ({b.first_of_run}, {_n(b.first_of_run_max_ms)})" if b.first_of_run else ""
            row += [f"{b.count:,}, {_pair(b.p50_ms, b.p99_ms)}{firsts}",
                    _pair(r.produced, r.in_sink, r.elsewhere, r.overdue, r.duplicated)]
        rows.append(row)
    return _table(headers, rows)


def _state(intervals: list[Interval]) -> str:
    names = sorted({root for i in intervals for root in roots(i)})
    headers = ["min"] + [f"{root}: files / live MB / rows (ledger rows)" for root in names] + ["on disk MB (files)"]
    rows = []
    for i in intervals:
        grouped = roots(i)
        row = [_n(i.end_min)]
        for root in names:
            tables = grouped.get(root, {})
            files = sum(t.files for t in tables.values())
            live = sum(t.bytes for t in tables.values()) / MB
            rows_ = sum(t.rows for t in tables.values())
            ledger = f" ({tables['ledger'].rows:,})" if "ledger" in tables else ""
            row.append(f"{files:,} / {live:,.2f} / {rows_:,}{ledger}")
        disk = sum(t.disk_bytes for t in i.tables.values()) / MB
        row.append(f"{disk:,.1f} ({sum(t.disk_files for t in i.tables.values()):,})")
        rows.append(row)
    return _table(headers, rows)


def markdown(intervals: list[Interval]) -> str:
    """Three tables, a row per interval: the processes, the batches and records, the Delta tables."""
    return "\n\n".join([
        "Processes (memory and threads at the interval's end; the driver Python's heap leaves out the soak's own "
        "bookkeeping):", _processes(intervals),
        "Batches (finished within the interval) and records (so far):", _records(intervals),
        "Delta tables (live snapshot; disk: every file under the tables, the log and unvacuumed files included):",
        _state(intervals)])
