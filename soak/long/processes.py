"""The resources of every process of the long soak: memory, threads and open descriptors, and the two heaps.

Processes are found from this one (the driver's Python, where the SparkSession lives): its child
JVM running SparkSubmit is the driver JVM; the JVM's Python children are the driver-side source
runners (one per query, found by their command line) and Spark's Python task workers; the
DeltaShareConsumer worker is the delta lane's child process. Resident memory (RSS) is summed over
a role's processes; forked task workers share pages, so their sum overstates what they use, the
same way at every sample. Descriptors (``num_fds``) count files, sockets and pipes: a leaked
connection shows there, not in ``open_files``.

The JVM heap is asked of the JVM with ``jcmd`` (the JDK's tool, present where ``make jars`` runs):
``GC.run``, then ``GC.heap_info``. Heap in use without a collection is mostly garbage waiting for
the next one and swings by hundreds of MB between samples; after a full collection it is what is
live. A full collection costs the driver a pause of a few hundred ms at most: one per sample, and
one a minute for the heap floor (:func:`heap_floor`).
(pyspark reaches the JVM's ``Runtime`` only through the session's private ``_jvm``, which the
soak does not use: tests/test_public_names.py holds bench and soak to public names.)

One reading is what was live at that moment, batches in flight included: two lanes' batches, their plans, task
results and Arrow buffers swung it by 30 to 50 MB between samples (2026-11-29's fourth 2-hour run: 101 MB at the
second interval, the run's least, then 115 to 171 MB). :func:`heap_floor` reads it every minute and keeps the least
of an interval: what stays when no batch holds anything, which is what grows if something leaks. Threads are
counted the same way (:func:`thread_counts`, every 15 s): delta-rs's tokio pool in the delta lane's worker held 32 to
223 threads at one sample or another of the same run (2026-11-29), each let go after 10 s idle; a leaked thread
stays in the least count.

The driver Python's heap is tracemalloc's count of the bytes allocated through Python's allocators
and not freed, leaving out those allocated by the soak's own modules: the soak keeps every record
number and its independent members' bookkeeping, by design, and that would hide the growth of the
rest (pyspark, py4j, the foreachBatch calls). ``sys.getallocatedblocks()`` is recorded beside it,
but cannot be the figure: it counts small objects only, every one alike, the soak's included.
tracemalloc must start before anything worth measuring is allocated (``start_tracing``), and costs
the traced process some CPU on every allocation; this process mostly waits on Spark.

The driver Python's resident memory is sampled after a collection and after its allocators gave back
the free pages they keep (glibc's ``malloc_trim``, Arrow's pool's ``release_unused``), as the JVM's
heap is judged after a full collection: what is live, not what an allocator holds on to. glibc gives
each thread that allocates an arena of its own (up to eight per core), and every start of a query
leaves py4j a callback thread. In the third 2-hour run (2026-11-29) the driver's RSS grew 84 MB
while the traced heap grew 2 MB; in the next, over 20 minutes of its first hour, it grew 14 MB: 8 MB
in glibc's arenas (its 64 MiB-aligned heaps and the main heap), 3 MB in Arrow's mimalloc region, 2 MB
in pymalloc's arenas, 1 MB in the stacks of 42 new threads. Other processes cannot be trimmed from
here; their RSS is what the kernel says.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import re
import subprocess
import sys
import threading
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import psutil
import pyarrow as pa

from sharegroup_testing.workers import source_workers
from soak.long.intervals import MB, ProcessFigures
from soak.long.verdict import CAPPED_POOLS

__all__ = [
    "DRIVER_JVM_OPTIONS",
    "HEAP_READ_EVERY_S",
    "JCMD_TIMEOUT_S",
    "THREADS_COUNT_EVERY_S",
    "Floors",
    "HeapReading",
    "driver_jvm",
    "figures_of",
    "heap_floor",
    "jvm_heap",
    "python_heap",
    "release_free_memory",
    "start_tracing",
    "task_workers",
    "thread_counts",
    "uncapped_threads",
]

#: A jcmd call starts a JVM of its own and waits for the driver JVM's answer (a full collection included).
JCMD_TIMEOUT_S = 60.0
#: How often the heap floor reads the driver JVM's live heap: ten readings an interval, a full collection a minute.
HEAP_READ_EVERY_S = 60.0
#: How often the thread floors count threads: pools let a thread idle this long go (delta-rs's tokio blocking pool
#: after 10 s, Spark's cached pools after 60 s), so an interval's least count has each pool at its low.
THREADS_COUNT_EVERY_S = 15.0
#: The driver JVM's heap committed and touched from its start: Spark's default driver memory (1g) as its least size
#: too, so G1 never grows or shrinks what it commits and the JVM's RSS moves with what it holds outside the heap (code
#: cache, metaspace, thread stacks, the collector's own structures, direct buffers). The heap is judged by its live
#: floor. Before (2026-11-29's fifth 2-hour run) the RSS stepped 786 to 899 MB in one interval as G1 committed more
#: heap, and stayed there. (Spark refuses -Xmx here: spark.driver.memory sets it.)
DRIVER_JVM_OPTIONS = "-Xms1g -XX:+AlwaysPreTouch"
#: What the driver JVM runs (pyspark starts it with spark-submit).
SPARK_SUBMIT = "org.apache.spark.deploy.SparkSubmit"
#: Frames tracemalloc keeps per allocation: the innermost is enough to tell whose it is, and is the cheapest.
TRACE_FRAMES = 1
#: The soak's own modules: their allocations are its bookkeeping, left out of the driver Python's heap.
SOAK_FILES = str(Path(__file__).parents[1] / "*")


def start_tracing() -> None:
    """Trace the driver Python's allocations from now on (call it first thing in the process)."""
    if not tracemalloc.is_tracing():
        tracemalloc.start(TRACE_FRAMES)


def figures_of(processes: Iterable[psutil.Process]) -> ProcessFigures:
    """Resident memory, threads and descriptors summed over ``processes``, threads by name and descriptors by kind;
    those that ended meanwhile left out."""
    pids, rss, threads, fds = [], 0, 0, 0
    names: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for process in processes:
        try:
            with process.oneshot():
                rss += process.memory_info().rss
                threads += process.num_threads()
                fds += process.num_fds()
            names.update(_thread_names(process.pid))
            kinds.update(_fd_kinds(process.pid))
            pids.append(process.pid)
        except psutil.Error:
            continue
    if not pids:
        return ProcessFigures()
    return ProcessFigures(tuple(sorted(pids)), round(rss / MB, 1), threads, fds, dict(names), dict(kinds))


def uncapped_threads(pid: int) -> int | None:
    """The process's threads outside the capped pools; None once it ended."""
    names = _thread_names(pid)
    return sum(n for name, n in names.items() if name not in CAPPED_POOLS) if names else None


def _thread_names(pid: int) -> Counter[str]:
    """The process's threads by the name the kernel keeps (15 characters), digits as ``#``."""
    names: Counter[str] = Counter()
    for task in Path(f"/proc/{pid}/task").glob("*/comm"):
        try:
            names[re.sub(r"\d+", "#", task.read_text().strip())] += 1
        except OSError:  # the thread ended meanwhile
            continue
    return names


def _fd_kinds(pid: int) -> Counter[str]:
    """The process's open descriptors by what they point at: socket, pipe, anon_inode or file."""
    kinds: Counter[str] = Counter()
    for fd in Path(f"/proc/{pid}/fd").glob("*"):
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        kinds[target.split(":", 1)[0] if target.startswith(("socket:", "pipe:", "anon_inode:")) else "file"] += 1
    return kinds


def _command_line(process: psutil.Process) -> str:
    """The process's command line, empty for one that ended meanwhile."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def driver_jvm() -> psutil.Process | None:
    """This process's child JVM running SparkSubmit (the brokers a soak started are Java children too)."""
    return next((c for c in psutil.Process().children(recursive=True) if SPARK_SUBMIT in _command_line(c)), None)


def task_workers(jvm: psutil.Process | None) -> list[psutil.Process]:
    """The JVM's Python descendants other than the source runners: pyspark's daemon and the task workers it forks."""
    if jvm is None:
        return []
    runners = {p.pid for p in source_workers()}
    found = []
    for process in jvm.children(recursive=True):
        try:
            if process.pid not in runners and "python" in process.name().lower():
                found.append(process)
        except psutil.Error:
            continue
    return found


def _jcmd(pid: int, command: str) -> str:
    done = subprocess.run(["jcmd", str(pid), command], capture_output=True, text=True, timeout=JCMD_TIMEOUT_S,
                          check=False)
    return done.stdout if done.returncode == 0 else ""


class HeapReading(NamedTuple):
    """A JVM's heap in use after a full collection, the heap it has committed, and its metaspace in use, in MB (None
    where jcmd failed)."""

    live_mb: float | None = None
    committed_mb: float | None = None
    metaspace_mb: float | None = None


def jvm_heap(pid: int) -> HeapReading:
    """What ``GC.heap_info`` says after ``GC.run``."""
    try:
        _jcmd(pid, "GC.run")
        info = _jcmd(pid, "GC.heap_info")
    except (OSError, subprocess.SubprocessError):
        return HeapReading()
    heap = re.search(r"heap\s+total (\d+)K, used (\d+)K", info)
    metaspace = re.search(r"Metaspace\s+used (\d+)K", info)
    return HeapReading(None if heap is None else _mb(heap.group(2)), None if heap is None else _mb(heap.group(1)),
                       None if metaspace is None else _mb(metaspace.group(1)))


def _mb(kilobytes: str) -> float:
    return round(int(kilobytes) / 1024, 1)


class Floors:
    """The least of readings taken every ``every_s`` in a thread of its own, by name, until :meth:`take` asks:
    ``reading`` returns the names' values now (None: not read this time). The sampling thread never waits for it."""

    def __init__(self, reading: Callable[[], Mapping[str, float | None]], every_s: float, name: str):
        self._reading, self._every_s = reading, every_s
        self._least: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the readings; floors never started have nothing to end (a soak that failed before its lanes ran)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(JCMD_TIMEOUT_S * 2)

    def read(self, values: Mapping[str, float | None]) -> None:
        """Count readings, taken here or elsewhere (the sample's own)."""
        with self._lock:
            for name, value in values.items():
                if value is not None:
                    self._least[name] = min(value, self._least.get(name, value))

    def take(self) -> dict[str, float]:
        """The least reading of each name since the last take, and start over."""
        with self._lock:
            least, self._least = self._least, {}
        return least

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self.read(self._reading())


def heap_floor() -> Floors:
    """The driver JVM's live heap, read every :data:`HEAP_READ_EVERY_S` (two jcmd calls and a full collection each),
    as ``jvm_heap``."""
    def reading() -> dict[str, float | None]:
        jvm = driver_jvm()
        return {"jvm_heap": None if jvm is None else jvm_heap(jvm.pid).live_mb}

    return Floors(reading, HEAP_READ_EVERY_S, "soak-heap-floor")


def thread_counts(processes: Callable[[], Mapping[str, psutil.Process | None]]) -> Floors:
    """Each of ``processes``' threads (by role) outside the capped pools (soak.long.verdict.CAPPED_POOLS, judged
    against their maximum apart), counted every :data:`THREADS_COUNT_EVERY_S`."""
    def reading() -> dict[str, float | None]:
        return {role: None if process is None else uncapped_threads(process.pid)
                for role, process in processes().items()}

    return Floors(reading, THREADS_COUNT_EVERY_S, "soak-thread-floor")


def release_free_memory() -> bool:
    """Collect, then have Arrow's pool and glibc give back the free pages they keep (glibc's ``malloc_trim(0)``
    trims every arena); False without glibc."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def python_heap() -> tuple[float | None, float | None, int]:
    """The driver Python's traced heap outside the soak's modules and the soak's own, in MB (None if not tracing),
    and its pymalloc blocks in use; after a collection, so garbage in reference cycles does not count (and py4j
    lets go of the JVM objects such garbage held, before the JVM's own collection). The soak's own includes what
    tracing costs (tracemalloc keeps a trace per live block, the soak's numbers and Spark's alike): resident
    memory the connector and Spark would not use without the soak."""
    gc.collect()
    blocks = sys.getallocatedblocks()
    if not tracemalloc.is_tracing():
        return None, None, blocks
    snapshot = tracemalloc.take_snapshot()
    total = sum(stat.size for stat in snapshot.statistics("filename"))
    outside = sum(stat.size for stat in
                  snapshot.filter_traces([tracemalloc.Filter(False, SOAK_FILES)]).statistics("filename"))
    del snapshot
    total += tracemalloc.get_tracemalloc_memory()
    return round(outside / MB, 2), round((total - outside) / MB, 2), blocks
