"""Whether the long soak stayed flat: memory, batch time and state against tolerances, and every record once.

Flat means, as the issue puts it: no growth of memory or batch time from the second interval to
the last beyond noise (the first pays for start-up: JIT, caches, the first maintenance rounds),
state bounded by maintenance, nothing lost, nothing duplicated, and no failure that no fault
caused. Every tolerance below is a named constant with the reason for its size; a figure is
judged only where it means something (a process replaced between the two intervals says nothing
of growth, and is reported as not judged, as is a table too young to have reached its bound).

The driver's threads and descriptors are allowed, on top of their tolerance, what Spark itself leaves
behind per start of a streaming query (soak.long.spark_baseline, measured in the same run) times
the lanes' query starts between the two intervals: the broker lane restarts every half minute or
so under its faults, and each start leaves a thread or two of Spark's that nothing frees.

Batch times and state are compared with the largest value of the first half of the intervals (batch
times from the second on), not with the interval before the last: a fault's recovery lands in some
intervals and not others, and a table bounded by maintenance reaches its plateau within minutes (the driver
maintains every 50 epochs, the Delta group every 200 commits) and then saws up and down between
rounds, which the largest of several samples covers; a table that grows steadily passes any
margin against the interval before the last (n against n-1), but not against the first half.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta

from sharegroup_source.driver.micro_batch import MAINTAIN_EVERY_EPOCHS
from soak.long.intervals import LANES, MB, ROLES, THREAD_ROLES, Interval, ProcessFigures, SparkPerStart, TableFigures
from state_store import StateStore
from state_store.table_retention import ORPHAN_RETENTION_HOURS, USER_DATA_RETENTION

__all__ = ["BATCH_P50", "BATCH_P99", "CAPPED_POOLS", "DEAD_BYTES", "DEAD_BYTES_PER_ROW", "FDS", "LEDGER_KEEP_EPOCHS",
           "MEMORY", "MIN_BATCHES", "ORPHAN_RETENTION", "RETAINED_BY_EPOCH", "STATE_BYTES", "STATE_BYTES_PER_ROW",
           "STATE_FILES", "STATE_LOG_FILES", "STATE_ROWS", "THREADS", "USER_DATA", "Check", "LaneOutcome",
           "Tolerance", "Verdict", "judge"]


@dataclass(frozen=True)
class Tolerance:
    """Growth allowed over a baseline: ``ratio`` of it or ``floor`` (in the figure's unit), whichever is larger."""

    ratio: float
    floor: float

    def limit(self, baseline: float) -> float:
        return baseline + max(baseline * self.ratio, self.floor)


#: Memory, by the figure judged (MB), second interval against the last.
MEMORY: dict[str, Tolerance] = {
    # less the committed heap, which is committed and touched from the start (soak.long.processes.DRIVER_JVM_OPTIONS)
    # and judged by its live floor: what the JVM holds beside it, the code cache, which fills as the JIT compiles more
    # of Spark in the first hour, metaspace, stacks, the collector's structures. (Judged whole before, G1 committing
    # more heap stepped it 113 MB in one interval of 2026-11-29's fifth 2-hour run, and it stayed there.) A run
    # that did not read the committed heap is judged on all of it
    "driver JVM RSS": Tolerance(0.15, 64),
    # the least of the live heap read every minute (soak.long.processes.heap_floor): what stays when no batch holds
    # anything; beside Spark's own per query start (the sessions the queries cloned), its caches fill and empty:
    # the JVM objects py4j holds for Python, the plans of the lanes' queries. A run before the floor was read is
    # judged on its single readings, in flight included: 101 to 171 MB in 2026-11-29's fourth 2-hour run, the
    # second interval the least of all
    "driver JVM heap": Tolerance(0.25, 48),
    # loaded classes; codegen of the same plans loads no new ones
    "driver JVM metaspace": Tolerance(0.10, 8),
    # pymalloc and Arrow's pool keep freed memory for reuse; judged net of the soak's own bookkeeping (a byte a
    # record and more) and of what tracing it costs
    "driver Python RSS": Tolerance(0.15, 48),
    # traced bytes outside the soak's modules: py4j's objects, pyspark's, a batch's DataFrame in the sink call
    "driver Python heap": Tolerance(0.10, 8),
    # Python processes holding Delta snapshots, Arrow buffers and librdkafka's queues, which swing with a batch
    ROLES["runner_broker"]: Tolerance(0.20, 48),
    ROLES["runner_delta"]: Tolerance(0.20, 48),
    ROLES["task_workers"]: Tolerance(0.20, 64),
    ROLES["worker"]: Tolerance(0.20, 48),
}
#: Threads per process, second interval against the last: librdkafka runs about ten per client (one per broker and
#: bootstrap address), and clients come and go (an independent member, the worker's pooled readers, connections
#: after a broker's restart), as do Spark's cached pools; seen 61-96 in the driver Python and 62-129 in the worker, up
#: and down (2026-11-28). A leak of one per batch is far beyond. What Spark leaves per query start is allowed apart.
#: Judged on each interval's least count outside the capped pools below (soak.long.processes.thread_counts): the
#: driver Python's count is a sample at the sample's moment, and librdkafka's clients are made and closed meanwhile.
THREADS = Tolerance(0.25, 40)
#: Spark's cached thread pools with a maximum, by the name the kernel keeps (15 characters): the driver's block
#: manager endpoints (``ThreadUtils.newDaemonCachedThreadPool(name, 100)``, read from Spark 4.2's bytecode). A pool
#: grows while asks queue up and lets a thread go after 60 s idle, so a sample counts from a few to dozens (+57 and
#: +52 between the second and the last interval of 2026-11-29's third 2-hour run, both far below 100). They cannot
#: leak past their maximum: they are taken out of the threads' growth and judged against it instead. So is the tokio
#: runtime delta-rs's Python binding keeps, one a process (``rt()`` in its python/src/utils.rs: tokio's defaults, a
#: worker a core and at most 512 blocking threads, each let go after 10 s idle): every local file operation of a
#: Delta table runs on a blocking thread, so the pool holds about as many as the busiest 10 s needed at once, which
#: a table's file count sets (the delta lane's worker: 32 to 223 at one sample or another of 2026-11-29's fifth
#: 2-hour run; 250 through four minutes of an embedded run, counted every 15 s).
CAPPED_POOLS: dict[str, int] = {"block-manager-a": 100, "block-manager-s": 100,
                                "tokio-rt-worker": 512 + (os.cpu_count() or 1)}
#: Open descriptors per process: sockets to three brokers come and go with kills and restarts. (Spark's per query
#: start, allowed apart: the Python data source's worker factory, a listening socket and selectors, in the JVM;
#: py4j's callback socket in the driver's Python.)
FDS = Tolerance(0.10, 32)
#: Batch time p50 (ms): the median moves with what else two cores run at the moment (three brokers, two lanes).
BATCH_P50 = Tolerance(0.25, 100)
#: Batch time p99 (ms): of a few hundred batches, the few slowest, which are the ones a fault held up (a partition's
#: leader killed under the batch, a 1 s pause in the sink): a recovery's time, which swings with where the faults
#: fell (12-minute runs, 2026-11-28: 3.1-13.8 s on the broker lane, 5.0-35.6 s on the delta lane, up and down),
#: hence the largest of the first half as the baseline. A batch that slows for good shows in p50 first. A run's
#: first batch is left out of both: after a driver kill it waits out the dead member's locks by design.
BATCH_P99 = Tolerance(1.0, 10_000)
#: An interval with fewer batches than this gives no percentile worth comparing.
MIN_BATCHES = 20
#: State, per table, against the largest of the first half. Files: what a table gains between two maintenance rounds,
#: which a sample may catch at any point: the driver's every MAINTAIN_EVERY_EPOCHS epochs, the ledger gaining up to
#: three files an epoch (its entry, EMITTED, the settled status) and the progress table some more; the Delta group's
#: tables every 200 of a member's commits. A table whose maintenance never compacts gains thousands an hour.
STATE_FILES = Tolerance(0.25, 4 * MAINTAIN_EVERY_EPOCHS)
#: Rows: tables that append a row per change (a member's heartbeat, a run's counters) and fold them at maintenance gain
#: about a row per file between two rounds; bytes: such files are a few KB each (the Delta group's members table went
#: from 29 KB to 300 KB between two samples, 116 files, 2026-11-28).
STATE_ROWS = Tolerance(0.25, 4 * MAINTAIN_EVERY_EPOCHS)
STATE_BYTES = Tolerance(0.25, 1024 * 1024)
#: Files in a table's ``_delta_log``: internal state keeps a minute of log past its checkpoint, which maintenance
#: writes every round, so the log holds about a round's commits and a minute's more (the Delta group's tables: 200
#: of a member's commits between rounds, several a second in all). A table whose log is never cleaned up keeps every
#: commit: the Delta group's share_state went from 3,722 to 17,968 log files in two hours (2026-11-29).
STATE_LOG_FILES = Tolerance(0.25, 1_000)
#: User data: the dead letters keep every rejected record, their log for days and replaced files for a week
#: (USER_DATA_RETENTION), so their rows, bytes, log and bytes on disk grow through any soak by design and are not
#: judged; their data files are (compaction bounds them).
USER_DATA = ("dead_letters",)
#: The ledger keeps a query's newest epochs (StateStore.maintain's default, as the driver calls it), and the
#: decisions table those epochs' decisions: until that many epochs ran, their rows and bytes grow by design. Their
#: size per row is judged instead (an epoch's row must not grow fatter), and the ledger's rows against that bound.
LEDGER_KEEP_EPOCHS: int = inspect.signature(StateStore.maintain).parameters["ledger_keep_epochs"].default
RETAINED_BY_EPOCH = ("ledger", "decisions")
#: Bytes per row: each data file adds its footer and schema (about a kilobyte), spread over few rows while a table
#: is young and has many small files, so the first intervals' figure is high and moves with the file count.
STATE_BYTES_PER_ROW = Tolerance(0.25, 512)
#: Bytes on disk beyond the live snapshot (files replaced by compaction, files of lost commit races, the log):
#: vacuum deletes unreferenced files only after ORPHAN_RETENTION_HOURS, so they pile up for that long before they
#: level off; judged on the intervals after it only.
DEAD_BYTES = Tolerance(0.25, 1024 * 1024)
ORPHAN_RETENTION = timedelta(hours=ORPHAN_RETENTION_HOURS)
#: The same, per live row, for the tables RETAINED_BY_EPOCH: their maintenance rewrites the whole table, so what a
#: row costs is judged while the table grows by design until it holds its epochs. A rewrite that lost its commit race
#: to the batches' appends used to leave its copy of the whole table until the orphan retention let vacuum delete it:
#: 663 -> 943 B per row between the intervals judged in the sixth 2-hour run (2026-11-30), more copies of a larger
#: table as the rewrite took longer; StateTable deletes a lost rewrite's file at once since.
DEAD_BYTES_PER_ROW = Tolerance(0.25, 64)


@dataclass(frozen=True)
class LaneOutcome:
    """A lane's end, after its drain (soak.run.account's report, and the delta lane's worker)."""

    produced: int
    in_sink: int
    elsewhere: int
    lost: int
    duplicated: int
    #: query failures no fault caused, and the worker's ends the soak did not ask for
    failures: tuple[str, ...] = ()
    query_starts: int = 0
    faults: int = 0
    #: records another member ACCEPTed without an answer that never came back: applied, so neither lost nor taken
    unanswered: int = 0


@dataclass(frozen=True)
class Check:
    """One judgement: ``ok`` None when the figure could not be judged (``detail`` says why)."""

    name: str
    ok: bool | None
    detail: str


@dataclass(frozen=True)
class Verdict:
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok is not False for check in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [check for check in self.checks if check.ok is False]

    def text(self) -> str:
        """The failed checks and the ones not judged, each on a line, then the count of those that passed."""
        shown = [c for c in self.checks if c.ok is not True]
        lines = [f"- {'FAILED' if c.ok is False else 'not judged'}: {c.name}: {c.detail}" for c in shown]
        passed = sum(c.ok is True for c in self.checks)
        lines.append(f"- {passed} of {len(self.checks)} checks passed")
        verdict = "flat: nothing grew beyond its tolerance, nothing lost or duplicated, no failure no fault caused"
        return "\n".join([f"verdict: {verdict if self.ok else 'FAILED'}", *lines])


def _grew(name: str, baseline: float | None, last: float | None, tolerance: Tolerance, unit: str) -> Check:
    if baseline is None or last is None:
        return Check(name, None, "not measured in both intervals")
    limit = tolerance.limit(baseline)
    return Check(name, last <= limit, f"{baseline:,.1f} -> {last:,.1f} {unit} (limit {limit:,.1f})")


# -- memory and processes -------------------------------------------------------------------------
def _same_processes(second: ProcessFigures, last: ProcessFigures) -> bool:
    return bool(second.pids) and second.pids == last.pids


def _starts_between(second: Interval, last: Interval) -> int:
    return sum(last.lane(lane).query_starts - second.lane(lane).query_starts for lane in LANES)


def _grew_with_starts(name: str, baseline: float | None, last: float | None, tolerance: Tolerance, unit: str,
                      each: float, starts: int) -> Check:
    """:func:`_grew`, with Spark's ``each`` a query start times ``starts`` added to the limit where there are any."""
    if not each or not starts or baseline is None or last is None:
        return _grew(name, baseline, last, tolerance, unit)
    limit = tolerance.limit(baseline) + each * starts
    return Check(name, last <= limit, f"{baseline:,.1f} -> {last:,.1f} {unit} (limit {tolerance.limit(baseline):,.1f} "
                                      f"+ Spark's {each:g} a query start x {starts} starts = {limit:,.1f})")


def _net(rss_mb: float | None, soak_mb: float | None) -> float | None:
    """Resident memory less the soak's own bookkeeping and tracing (none measured: all of it)."""
    return None if rss_mb is None else rss_mb - (soak_mb or 0.0)


def _memory(second: Interval, last: Interval, spark: SparkPerStart) -> list[Check]:
    python = second.process("driver_python"), last.process("driver_python")
    checks = [_jvm_rss(second, last),
              _heap(second, last, spark),
              _grew("driver JVM metaspace", second.jvm_metaspace_mb, last.jvm_metaspace_mb,
                    MEMORY["driver JVM metaspace"], "MB"),
              _grew("driver Python RSS net of the soak's own", _net(python[0].rss_mb, second.python_soak_mb),
                    _net(python[1].rss_mb, last.python_soak_mb), MEMORY["driver Python RSS"], "MB"),
              _grew("driver Python heap", second.python_heap_mb, last.python_heap_mb, MEMORY["driver Python heap"],
                    "MB")]
    for role in ("runner_broker", "runner_delta", "task_workers", "worker"):
        before, after = second.process(role), last.process(role)
        name = f"{ROLES[role]} RSS"
        if not _same_processes(before, after):
            checks.append(Check(name, None, f"not the same processes in both intervals ({list(before.pids)} -> "
                                            f"{list(after.pids)}): restarted in between"))
            continue
        checks.append(_grew(name, before.rss_mb, after.rss_mb, MEMORY[ROLES[role]], "MB"))
    starts = _starts_between(second, last)
    for role in THREAD_ROLES:
        before, after = second.process(role), last.process(role)
        if not _same_processes(before, after):
            checks.append(Check(f"{ROLES[role]} threads and descriptors", None, "restarted in between"))
            continue
        threads = _threads(role, second, last, spark.thread_count(role), starts)
        fds = _grew_with_starts(f"{ROLES[role]} descriptors", before.fds, after.fds, FDS, "fds",
                                spark.fd_count(role), starts)
        checks.append(_named(threads, before.thread_names, after.thread_names))
        checks.append(_named(fds, before.fd_kinds, after.fd_kinds))
        checks += [Check(f"{ROLES[role]} {pool} threads", after.thread_names.get(pool, 0) <= cap,
                         f"{after.thread_names.get(pool, 0)} (Spark's pool keeps at most {cap})")
                   for pool, cap in CAPPED_POOLS.items() if pool in after.thread_names]
    return checks


def _jvm_rss(second: Interval, last: Interval) -> Check:
    """The driver JVM's RSS outside its committed heap; a run that did not read the committed heap, all of it."""
    before, after = second.process("driver_jvm").rss_mb, last.process("driver_jvm").rss_mb
    committed = second.jvm_heap_committed_mb, last.jvm_heap_committed_mb
    if before is None or after is None or committed[0] is None or committed[1] is None:
        return _grew("driver JVM RSS", before, after, MEMORY["driver JVM RSS"], "MB")
    return _grew("driver JVM RSS outside the heap", before - committed[0], after - committed[1],
                 MEMORY["driver JVM RSS"], "MB")


def _heap(second: Interval, last: Interval, spark: SparkPerStart) -> Check:
    """The driver JVM's heap floor, allowed Spark's own per query start; a run without floors, its single readings."""
    if second.jvm_heap_floor_mb is None or last.jvm_heap_floor_mb is None:
        return _grew("driver JVM heap live", second.jvm_heap_live_mb, last.jvm_heap_live_mb, MEMORY["driver JVM heap"],
                     "MB")
    return _grew_with_starts("driver JVM heap floor", second.jvm_heap_floor_mb, last.jvm_heap_floor_mb,
                             MEMORY["driver JVM heap"], "MB", spark.jvm_heap_mb, _starts_between(second, last))


def _threads(role: str, second: Interval, last: Interval, each: float, starts: int) -> Check:
    """A process's least thread count of the interval, allowed Spark's own per query start; a run without floors,
    its single counts less Spark's capped pools."""
    floors = second.thread_floors.get(role), last.thread_floors.get(role)
    if floors[0] is None or floors[1] is None:
        return _grew_with_starts(f"{ROLES[role]} threads", _uncapped(second.process(role)),
                                 _uncapped(last.process(role)), THREADS, "threads", each, starts)
    return _grew_with_starts(f"{ROLES[role]} threads floor", floors[0], floors[1], THREADS, "threads", each, starts)


def _uncapped(figures: ProcessFigures) -> int | None:
    """A process's threads less those of Spark's capped pools (:data:`CAPPED_POOLS`), which are judged apart."""
    if figures.threads is None:
        return None
    return figures.threads - sum(figures.thread_names.get(pool, 0) for pool in CAPPED_POOLS)


def _named(check: Check, before: Mapping[str, int], after: Mapping[str, int], most: int = 4) -> Check:
    """A failed count's check, with the names (thread names, descriptor kinds) that grew most beside it."""
    grown = sorted(((after[k] - before.get(k, 0), k) for k in after if after[k] > before.get(k, 0)), reverse=True)
    if check.ok is not False or not grown:
        return check
    return replace(check, detail=f"{check.detail}; grew: " + ", ".join(f"{k} +{n}" for n, k in grown[:most]))


# -- batch times --------------------------------------------------------------------------------
def _batches(intervals: list[Interval]) -> list[Check]:
    """Each lane's steady batches in the last interval against the largest of the first half's, from the second."""
    earlier, last = intervals[1:max(2, math.ceil(len(intervals) / 2))], intervals[-1]
    checks = []
    for lane in LANES:
        judged = [i.lane(lane).batches for i in earlier if i.lane(lane).batches.count >= MIN_BATCHES]
        after = last.lane(lane).batches
        if not judged or after.count < MIN_BATCHES:
            counts = ", ".join(str(i.lane(lane).batches.count) for i in [*earlier, last])
            checks.append(Check(f"{lane} lane batch time", None, f"{counts} batches: fewer than {MIN_BATCHES}"))
            continue
        for name, figure, tolerance in (("p50", "p50_ms", BATCH_P50), ("p99", "p99_ms", BATCH_P99)):
            peak = max(getattr(b, figure) or 0.0 for b in judged)
            value = getattr(after, figure)
            limit = tolerance.limit(peak)
            checks.append(Check(f"{lane} lane batch time {name}", value is not None and value <= limit,
                                f"largest of the first half {peak:,.0f}, last {_or_dash(value)} ms "
                                f"(limit {limit:,.0f})"))
    return checks


def _or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


# -- state --------------------------------------------------------------------------------------
def _bounded(name: str, earlier: list[TableFigures], last: TableFigures, figure: Callable[[TableFigures], float],
             tolerance: Tolerance, unit: str) -> Check:
    peak = max(figure(t) for t in earlier)
    limit = tolerance.limit(peak)
    value = figure(last)
    return Check(name, value <= limit, f"largest of the first half {peak:,.0f}, last {value:,.0f} {unit} "
                                       f"(limit {limit:,.0f})")


def _per_row(table: TableFigures) -> float:
    return table.bytes / table.rows if table.rows else 0.0


def _dead(table: TableFigures) -> float:
    """Bytes on disk beyond the live snapshot."""
    return table.disk_bytes - table.bytes


def _dead_per_row(table: TableFigures) -> float:
    return _dead(table) / table.rows if table.rows else 0.0


def _state(intervals: list[Interval]) -> list[Check]:
    last = intervals[-1]
    first_half = intervals[:math.ceil(len(intervals) / 2)]
    after_orphans = [i for i in intervals if i.end_s >= ORPHAN_RETENTION.total_seconds()]
    checks = []
    for label, table in sorted(last.tables.items()):
        if table.error is not None:
            checks.append(Check(f"{label} state", None, f"could not be read: {table.error}"))
            continue
        earlier = [i.tables[label] for i in first_half if label in i.tables and i.tables[label].error is None]
        if not earlier:
            checks.append(Check(f"{label} state", None, "made after the first half of the run"))
            continue
        checks.append(_bounded(f"{label} files", earlier, table, lambda t: t.files, STATE_FILES, "files"))
        name = label.rpartition("/")[2]
        if name in USER_DATA:
            checks.append(Check(f"{label} rows, bytes and log", None,
                                f"{table.rows:,} rows, {table.bytes / MB:,.1f} MB, {table.log_files:,} log files; "
                                f"user data keeps what it holds, its log {USER_DATA_RETENTION.log.days} days"))
            continue
        checks.append(_bounded(f"{label} log files", earlier, table, lambda t: t.log_files, STATE_LOG_FILES, "files"))
        if name in RETAINED_BY_EPOCH:
            checks.append(_bounded(f"{label} bytes per row", earlier, table, _per_row, STATE_BYTES_PER_ROW, "B"))
            if label.endswith("/ledger"):
                limit = LEDGER_KEEP_EPOCHS * (1 + STATE_ROWS.ratio)
                checks.append(Check(f"{label} rows", table.rows <= limit,
                                    f"{table.rows:,} rows; the ledger keeps {LEDGER_KEEP_EPOCHS:,} epochs "
                                    f"(limit {limit:,.0f})"))
        else:
            checks.append(_bounded(f"{label} rows", earlier, table, lambda t: t.rows, STATE_ROWS, "rows"))
            checks.append(_bounded(f"{label} bytes", earlier, table, lambda t: t.bytes, STATE_BYTES, "B"))
        dead = [i.tables[label] for i in after_orphans[:math.ceil(len(after_orphans) / 2)] if label in i.tables]
        if len(after_orphans) < 3 or not dead:
            checks.append(Check(f"{label} bytes on disk beyond the snapshot", None,
                                f"needs 3 intervals after vacuum's {ORPHAN_RETENTION_HOURS} h orphan retention; "
                                f"now {_dead(table) / MB:,.1f} MB"))
            continue
        if name in RETAINED_BY_EPOCH:
            checks.append(_bounded(f"{label} bytes on disk beyond the snapshot per row", dead, table, _dead_per_row,
                                   DEAD_BYTES_PER_ROW, "B"))
        else:
            checks.append(_bounded(f"{label} bytes on disk beyond the snapshot", dead, table,
                                   _dead, DEAD_BYTES, "B"))
    return checks


# -- records ------------------------------------------------------------------------------------
def _records(outcomes: dict[str, LaneOutcome]) -> list[Check]:
    checks = []
    for lane in LANES:
        outcome = outcomes.get(lane)
        if outcome is None:
            checks.append(Check(f"{lane} lane", False, "no outcome: the lane did not finish"))
            continue
        checks += [
            Check(f"{lane} lane ran", outcome.produced > 0 and outcome.in_sink > 0,
                  f"{outcome.produced:,} produced, {outcome.in_sink:,} in the sink, {outcome.elsewhere:,} elsewhere"),
            Check(f"{lane} lane lost", outcome.lost == 0, f"{outcome.lost:,} records"),
            Check(f"{lane} lane duplicated", outcome.duplicated == 0, f"{outcome.duplicated:,} records"),
            Check(f"{lane} lane failures no fault caused", not outcome.failures,
                  "; ".join(outcome.failures) if outcome.failures else "none"),
        ]
    return checks


def judge(intervals: list[Interval], outcomes: dict[str, LaneOutcome],
          spark: SparkPerStart | None = None) -> Verdict:
    """Every check on the run's intervals and the lanes' outcomes; ``spark``: what Spark leaves in the driver per
    query start, measured in the same run (none allows nothing)."""
    checks: list[Check] = []
    if len(intervals) < 3:
        checks.append(Check("growth", None, f"{len(intervals)} intervals: needs 3 (start-up, a second, a last)"))
    else:
        checks += (_memory(intervals[1], intervals[-1], spark or SparkPerStart()) + _batches(intervals)
                   + _state(intervals))
    return Verdict(tuple(checks + _records(outcomes)))
