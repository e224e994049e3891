"""The long soak's pure parts: its bookkeeping of record numbers, the interval table and the verdict.

No Spark and no Kafka: intervals are made by hand, as ``python -m soak.long`` samples them, and the
verdict must call flat what is flat and name what grew. ``python -m soak.long`` itself runs for hours
(``make soak-long``); the short soak in tests/test_soak.py is what ``make test`` runs of it.
"""

from __future__ import annotations

import ctypes
import json
import socket
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from sharegroup_testing.kafka_peers import wait_for
from soak.long.__main__ import JSON_NAME, PNG_NAME, publish
from soak.long.batches import BatchTimes
from soak.long.intervals import (
    BatchFigures,
    Interval,
    LaneFigures,
    ProcessFigures,
    RecordFigures,
    SparkPerStart,
    TableFigures,
    markdown,
)
from soak.long.run import LongSoakPlan
from soak.long.tally import SinkTally, WorkerTally, last_commit, record_figures
from soak.long.verdict import (
    BATCH_P99,
    LEDGER_KEEP_EPOCHS,
    MEMORY,
    MIN_BATCHES,
    ORPHAN_RETENTION,
    LaneOutcome,
    Verdict,
    judge,
)
from soak.numbers import NumberSet
from soak.sink import BatchSink

OK = {lane: LaneOutcome(produced=1000, in_sink=990, elsewhere=10, lost=0, duplicated=0) for lane in ("broker", "delta")}


def interval(index: int, *, minutes_per: float = 10, jvm_rss: float = 800, python_heap: float = 60,
             p99: float = 1500, ledger_rows: int = 500, ledger_bytes: int = 50_000, progress_rows: int = 20,
             runner_pid: int = 42, files: int = 12, dead_bytes: int = 2_000_000, log_files: int = 150) -> Interval:
    """A sample of a healthy run, with the figures the tests vary as keywords."""
    processes = {"driver_jvm": ProcessFigures((10,), jvm_rss, 90, 300),
                 "driver_python": ProcessFigures((11,), 400, 40, 60),
                 "runner_broker": ProcessFigures((40 + index,), 250, 20, 30),  # killed by faults: a new one each time
                 "runner_delta": ProcessFigures((runner_pid,), 260, 20, 30),
                 "task_workers": ProcessFigures((50, 51), 180, 4, 12),
                 "worker": ProcessFigures((60,), 150, 12, 20)}
    batches = BatchFigures(count=400, p50_ms=600, p99_ms=p99, max_ms=p99 + 200)
    records = RecordFigures(produced=index * 60_000, in_sink=index * 60_000 - 300, elsewhere=250, pending=50)
    tables = {
        "broker/state/ledger": TableFigures(index * 100, files, ledger_bytes, ledger_rows, ledger_bytes + dead_bytes),
        "broker/state/progress": TableFigures(index * 100, 3, 9_000, progress_rows, 9_000 + dead_bytes),
        "delta/group/share_state": TableFigures(index * 300, 4, 20_000, 8, 20_000 + dead_bytes, log_files),
    }
    return Interval(index, index * minutes_per * 60, minutes_per * 60, processes, 300, 120, python_heap, 250_000,
                    {lane: LaneFigures(batches, records, 3) for lane in ("broker", "delta")}, tables)


def flat_run(count: int = 6, **last: float) -> list[Interval]:
    """``count`` flat intervals, the last one with ``last``'s figures."""
    return [interval(i) for i in range(1, count)] + [interval(count, **last)]  # type: ignore[arg-type]


def failed_names(verdict: Verdict) -> set[str]:
    return {check.name for check in verdict.failed}


# -- record numbers -------------------------------------------------------------------------------
def test_a_number_set_counts_what_is_missing_from_other_places():
    produced = NumberSet.of(range(10))
    sink, elsewhere = NumberSet.of([0, 1, 2, 5]), NumberSet.of([3, 9])
    assert len(produced) == 10 and 9 in produced and 10 not in produced
    assert produced.count_missing(sink, elsewhere) == 4  # 4, 6, 7, 8
    assert produced.count_missing(sink, elsewhere, below=5) == 1  # 4
    assert sink.count_common(NumberSet.of([2, 5, 7])) == 2
    assert sink.add(2) is True and sink.add(7) is False and len(sink) == 5
    assert sorted(sink) == [0, 1, 2, 5, 7] and sink.copy().to_set() == {0, 1, 2, 5, 7}


def _write_batch(sink: Path, batch: int, numbers: list[int]) -> None:
    """A batch's folder as BatchSink writes it (only the column the tally reads)."""
    (sink / f"batch={batch}").mkdir(parents=True)
    pq.write_table(pa.table({"value": [str(n).encode() for n in numbers]}), sink / f"batch={batch}" / "part-0.parquet")


def test_a_sink_tally_reads_each_committed_batch_once(tmp_path):
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    tally = SinkTally(BatchSink(sink), checkpoint)
    tally.update()  # nothing committed yet
    _write_batch(sink, 0, [0, 1, 2])
    _write_batch(sink, 1, [3, 2])  # 2 a second time
    _write_batch(sink, 2, [4])  # not committed: it may run again
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "commits" / "1").write_text("v1")  # Spark purged commit 0's file: batch 0 is committed too
    tally.update()
    tally.update()
    assert sorted(tally.numbers) == [0, 1, 2, 3] and tally.duplicated == 1 and tally.batches_read == 2


def test_record_figures_count_overdue_records_and_duplicates_of_an_exclusive_group(tmp_path):
    tally = SinkTally(BatchSink(tmp_path / "sink"), tmp_path / "checkpoint")
    tally.numbers, tally.duplicated = NumberSet.of([0, 1, 2, 3, 7]), 1
    worker = NumberSet.of([4, 7])
    figures = record_figures(NumberSet.of(range(10)), 6, tally, worker, NumberSet.of([5]), elsewhere_duplicated=2,
                             exclusive=True)
    # 6, 8 and 9 are in flight; nothing sent before the previous sample (6) is missing: 5 is a member's unanswered
    # ACCEPT; 7 is in the sink and with the worker, which a Delta group must not allow
    assert figures == RecordFigures(produced=10, in_sink=5, elsewhere=2, in_both=1, pending=3, overdue=0,
                                    duplicated=1 + 2 + 1)
    shared = record_figures(NumberSet.of(range(10)), 10, tally, worker, NumberSet())
    assert shared.overdue == 4 and shared.duplicated == 1  # 5, 6, 8, 9; the broker's group gives at least once


def test_a_worker_tally_reads_complete_lines_once(tmp_path):
    out = tmp_path / "worker.txt"
    tally = WorkerTally(out)
    tally.update()  # no file yet
    out.write_text("3\n4\n5")  # 5 is still being written
    tally.update()
    assert sorted(tally.numbers) == [3, 4]
    with out.open("a") as file:
        file.write("\n4\n?6\n?7\n")  # a commit that raised: 6 and 7 may or may not be taken
    tally.update()
    assert sorted(tally.numbers) == [3, 4, 5] and tally.duplicated == 1 and sorted(tally.unknown) == [6, 7]


def test_every_batch_up_to_the_newest_commit_counts_as_committed(tmp_path):
    commits = tmp_path / "commits"
    assert last_commit(tmp_path) == -1
    commits.mkdir()
    for name in ("97", "98", "99", ".99.tmp"):  # Spark keeps only its newest commit files
        (commits / name).write_text("v1")
    assert last_commit(tmp_path) == 99


# -- the plan and the table --------------------------------------------------------------------------
def test_the_plan_ends_an_interval_every_interval_and_at_the_end():
    assert LongSoakPlan(minutes=120, interval_minutes=10).boundaries() == [600.0 * k for k in range(1, 13)]
    assert LongSoakPlan(minutes=12, interval_minutes=5).boundaries() == [300.0, 600.0, 720.0]


def test_intervals_go_to_json_and_back_and_make_three_markdown_tables():
    run = flat_run(3)
    again = [Interval.from_dict(json.loads(json.dumps(i.to_dict()))) for i in run]
    assert again == run
    text = markdown(run)
    tables = [block for block in text.split("\n\n") if block.startswith("|")]
    assert len(tables) == 3
    for table in tables:
        lines = table.splitlines()
        assert len(lines) == 2 + len(run) and len({line.count("|") for line in lines}) == 1, table
    assert "| 30 | 800 / - | 300 / - / 120 |" in text and "(500)" in text  # the last JVM row; the broker ledger's rows


# -- the verdict ---------------------------------------------------------------------------------------
def test_a_flat_run_passes():
    verdict = judge(flat_run(), OK)
    assert verdict.ok, verdict.text()
    assert {"driver JVM RSS", "broker lane batch time p99", "broker/state/ledger bytes per row",
            "delta/group/share_state rows", "delta lane lost"} <= {c.name for c in verdict.checks if c.ok}


def test_memory_growth_beyond_its_tolerance_fails_and_noise_does_not():
    noise = MEMORY["driver JVM RSS"].limit(800) - 1
    assert judge(flat_run(jvm_rss=noise), OK).ok
    verdict = judge(flat_run(jvm_rss=800 * 1.5, python_heap=60 + 20), OK)
    assert failed_names(verdict) == {"driver JVM RSS", "driver Python heap"}, verdict.text()
    assert "FAILED" in verdict.text()


def test_driver_python_rss_is_judged_net_of_the_soaks_own_bookkeeping():
    def python_rss(run: list[Interval], index: int, rss: float, soak_mb: float) -> None:
        sample = run[index]
        run[index] = replace(sample, python_soak_mb=soak_mb, processes={
            **sample.processes, "driver_python": replace(sample.processes["driver_python"], rss_mb=rss)})

    grown = MEMORY["driver Python RSS"].limit(400) - 400 + 20  # beyond the tolerance by 20 MB
    run = flat_run()
    python_rss(run, 1, 400, soak_mb=0)
    python_rss(run, -1, 400 + grown, soak_mb=20)  # the 20 MB over are the soak's own
    assert judge(run, OK).ok, judge(run, OK).text()
    python_rss(run, -1, 400 + grown, soak_mb=0)
    assert failed_names(judge(run, OK)) == {"driver Python RSS net of the soak's own"}


def test_a_thread_or_descriptor_growth_names_what_grew():
    intervals = flat_run()
    second, last = intervals[1], intervals[-1]
    grown = {"driver_python": ProcessFigures((11,), 400, 40 + 150, 60 + 150, {"python": 20, "rdk:broker#": 170},
                                             {"file": 10, "socket": 200}),
             "driver_jvm": last.processes["driver_jvm"]}
    intervals[1] = replace(second, processes={**second.processes, "driver_python": ProcessFigures(
        (11,), 400, 40, 60, {"python": 20, "rdk:broker#": 20}, {"file": 10, "socket": 50})})
    intervals[-1] = replace(last, processes={**last.processes, **grown})
    verdict = judge(intervals, OK)
    checks = {c.name: c for c in verdict.failed}
    assert set(checks) == {"driver Python threads", "driver Python descriptors"}, verdict.text()
    assert checks["driver Python threads"].detail.endswith("grew: rdk:broker# +150")
    assert checks["driver Python descriptors"].detail.endswith("grew: socket +150")


def test_the_sampler_names_a_process_threads_and_descriptors():
    from soak.long.processes import figures_of

    before = figures_of([psutil.Process()])
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        with socket.socket():
            during = figures_of([psutil.Process()])
    finally:
        stop.set()
        thread.join()
    assert sum(during.thread_names.values()) == during.threads == before.threads + 1, during.thread_names
    assert during.fd_kinds.get("socket", 0) == before.fd_kinds.get("socket", 0) + 1, (before.fd_kinds, during.fd_kinds)
    assert abs(sum(during.fd_kinds.values()) - during.fds) <= 1  # each count sees its own scan's directory


def test_the_driver_s_free_memory_is_given_back_before_its_rss_is_sampled():
    """Threads that allocate and free leave pages in glibc's arenas (each thread its own); what is live stays."""
    from soak.long.processes import figures_of, release_free_memory

    kept: list[object] = []

    def allocate() -> None:
        buffers = [ctypes.create_string_buffer(600) for _ in range(25_000)]  # above pymalloc's 512 B: glibc's malloc
        kept.extend(buffers[::50])  # a few live ones pin their pages

    release_free_memory()
    before = figures_of([psutil.Process()]).rss_mb
    threads = [threading.Thread(target=allocate) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = figures_of([psutil.Process()]).rss_mb
    assert held - before > 40, f"the threads' buffers did not show in the RSS: {before} -> {held} MB"
    assert release_free_memory()
    after = figures_of([psutil.Process()]).rss_mb
    assert after - before < (held - before) / 2, f"{before} -> {held} -> {after} MB: the free pages stayed"
    assert len(kept) == 4 * 500


def with_driver_python_threads(run: list[Interval], grown: int, starts: int) -> list[Interval]:
    """``run`` whose driver Python gained ``grown`` "python" threads and whose broker lane gained ``starts`` query
    starts between the second interval and the last."""
    last = run[-1]
    python = last.process("driver_python")
    lanes = {**last.lanes, "broker": replace(last.lane("broker"), query_starts=run[1].lane("broker").query_starts
                                                                             + starts)}
    run[-1] = replace(last, lanes=lanes, processes={**last.processes, "driver_python": replace(
        python, threads=python.threads + grown, thread_names={"python": 20 + grown})})
    run[1] = replace(run[1], processes={**run[1].processes, "driver_python": replace(
        run[1].process("driver_python"), thread_names={"python": 20})})
    return run


def test_spark_per_start_threads_are_allowed_per_query_start_and_nothing_more():
    spark = SparkPerStart(threads={"driver_python": {"python": 1}, "driver_jvm": {"Idle Worker Mon": 1}},
                          fds={"driver_python": {"socket": 1}}, starts=4)
    restarted = with_driver_python_threads(flat_run(), grown=200, starts=200)
    assert failed_names(judge(restarted, OK)) == {"driver Python threads"}  # no allowance measured: fails
    verdict = judge(restarted, OK, spark)
    assert verdict.ok, verdict.text()
    check = next(c for c in verdict.checks if c.name == "driver Python threads")
    assert "Spark's 1 a query start x 200 starts" in check.detail
    leaking = judge(with_driver_python_threads(flat_run(), grown=200 + 60, starts=200), OK, spark)
    assert failed_names(leaking) == {"driver Python threads"}
    assert next(iter(leaking.failed)).detail.endswith("grew: python +260")


def with_heap(run: list[Interval], live: list[float], floor: list[float] | None) -> list[Interval]:
    return [replace(i, jvm_heap_live_mb=live[n], jvm_heap_floor_mb=None if floor is None else floor[n])
            for n, i in enumerate(run)]


def test_the_jvm_heap_is_judged_by_its_floor_and_allowed_spark_s_sessions_per_query_start():
    """A reading swings with the batches in flight (the second interval of 2026-11-29's fourth 2-hour run was its
    least): the floor is judged, and each query start may leave what Spark's probe measured (a cloned session)."""
    swinging = [128, 101, 129, 116, 145, 171]
    assert failed_names(judge(with_heap(flat_run(), swinging, None), OK)) == {"driver JVM heap live"}
    assert judge(with_heap(flat_run(), swinging, [98, 97, 99, 98, 100, 101]), OK).ok
    restarted = with_heap(with_driver_python_threads(flat_run(), grown=0, starts=200), swinging,
                          [98, 97, 99, 98, 100, 98 + 48 + 55])
    assert failed_names(judge(restarted, OK)) == {"driver JVM heap floor"}
    verdict = judge(restarted, OK, SparkPerStart(jvm_heap_mb=0.3))
    assert verdict.ok, verdict.text()
    assert "Spark's 0.3 a query start x 200 starts" in next(c.detail for c in verdict.checks
                                                          if c.name == "driver JVM heap floor")
    leaking = with_heap(restarted, swinging, [98, 97, 99, 98, 100, 98 + 48 + 60 + 30])
    assert failed_names(judge(leaking, OK, SparkPerStart(jvm_heap_mb=0.3))) == {"driver JVM heap floor"}


def test_floors_keep_each_name_s_least_reading_of_an_interval_and_stop_unstarted():
    from soak.long.processes import Floors

    floors = Floors(dict, 60, "test-floors")
    for reading in (140.0, None, 101.5, 171.0):  # None: jcmd could not read it
        floors.read({"heap": reading})
    assert floors.take() == {"heap": 101.5}
    assert floors.take() == {}  # the next interval starts over
    floors.stop()  # a soak that failed before its lanes started must not fail again here
    readings: list[dict[str, float | None]] = [{"heap": 90.0, "worker": 223}, {"heap": None, "worker": 33}]
    counting = Floors(lambda: readings.pop() if readings else {}, 0.01, "test-floors")
    counting.start()
    wait_for(lambda: not readings, 10, "the thread to take both readings")
    counting.stop()
    assert counting.take() == {"heap": 90.0, "worker": 33}


def test_threads_are_judged_by_their_floor_and_a_leak_raises_it():
    """librdkafka's clients come and go, so one count swings: the least count of an interval outside the capped
    pools is judged, and a leaked thread stays in it. delta-rs's tokio pool (32 to 223 threads in the worker at one
    sample or another of 2026-11-29's fifth 2-hour run) is judged against tokio's maximum."""
    def with_worker(run: list[Interval], counts: list[int], floors: list[int] | None,
                    tokio: int = 223) -> list[Interval]:
        names = [{"rdk:broker#": n - 20, "python": 20, "tokio-rt-worker": tokio} for n in counts]
        return [replace(i, processes={**i.processes, "worker": replace(
                    i.process("worker"), threads=counts[n] + tokio, thread_names=names[n])},
                        thread_floors={} if floors is None else {**i.thread_floors, "worker": floors[n]})
                for n, i in enumerate(run)]

    swinging = [33, 32, 200, 90, 223, 156]
    assert failed_names(judge(with_worker(flat_run(), swinging, None), OK)) == {"DeltaShareConsumer worker threads"}
    verdict = judge(with_worker(flat_run(), swinging, [14, 12, 13, 12, 14, 13]), OK)
    assert verdict.ok, verdict.text()
    assert {"DeltaShareConsumer worker threads floor", "DeltaShareConsumer worker tokio-rt-worker threads"} <= {
        c.name for c in verdict.checks if c.ok}
    leaking = with_worker(flat_run(), swinging, [14, 12, 30, 50, 70, 90])
    assert failed_names(judge(leaking, OK)) == {"DeltaShareConsumer worker threads floor"}
    runaway = with_worker(flat_run(), swinging, [14, 12, 13, 12, 14, 13], tokio=600)
    assert failed_names(judge(runaway, OK)) == {"DeltaShareConsumer worker tokio-rt-worker threads"}


def test_the_jvm_rss_is_judged_outside_its_committed_heap():
    """The heap is judged by its live floor; G1 committing more of it stepped the RSS 113 MB in one interval of
    2026-11-29's fifth 2-hour run. What the JVM holds outside the heap (code cache, stacks, metaspace) is judged."""
    def with_jvm(run: list[Interval], rss: list[float], committed: list[float] | None) -> list[Interval]:
        return [replace(i, processes={**i.processes, "driver_jvm": replace(i.process("driver_jvm"), rss_mb=rss[n])},
                        jvm_heap_committed_mb=None if committed is None else committed[n])
                for n, i in enumerate(run)]

    stepped = [770, 771, 786, 899, 894, 894]
    assert failed_names(judge(with_jvm(flat_run(), stepped, None), OK)) == {"driver JVM RSS"}
    verdict = judge(with_jvm(flat_run(), stepped, [500, 500, 515, 628, 623, 623]), OK)
    assert verdict.ok, verdict.text()
    check = next(c for c in verdict.checks if c.name == "driver JVM RSS outside the heap")
    assert check.detail.startswith("271.0 -> 271.0 MB"), check.detail
    native = with_jvm(flat_run(), [1300, 1300, 1330, 1360, 1370, 1400], [1024] * 6)
    assert failed_names(judge(native, OK)) == {"driver JVM RSS outside the heap"}


def test_spark_s_per_start_heap_is_told_from_what_its_batches_add():
    from soak.long.spark_baseline import _heap_per_start

    # 8 starts of 12 batches in all, 0.25 MB a start and 0.1 MB a batch; one start of 30 batches
    assert _heap_per_start(8 * 0.25 + 12 * 0.1, 8, 12, 0.25 + 30 * 0.1, 30) == 0.25
    assert _heap_per_start(0.5, 8, 12, 4.0, 30) == 0.0  # the batches' share is all of it: nothing per start


def test_spark_s_capped_pools_are_judged_against_their_maximum_not_as_growth():
    """The block manager's pools hold dozens of threads at one sample and few at another (2026-11-29's third 2-hour
    run: +57 and +52): not a leak while below Spark's maximum of 100 each, which is what they are judged against."""
    run = flat_run()

    def jvm_with(interval: Interval, pools: int) -> Interval:
        jvm = interval.process("driver_jvm")
        names = {"block-manager-a": pools, "block-manager-s": pools}
        return replace(interval, processes={**interval.processes, "driver_jvm": replace(
            jvm, threads=jvm.threads + 2 * pools, thread_names=names)})

    run[1], run[-1] = jvm_with(run[1], 2), jvm_with(run[-1], 60)
    verdict = judge(run, OK)
    assert verdict.ok, verdict.text()
    pool = next(c for c in verdict.checks if c.name == "driver JVM block-manager-a threads")
    assert pool.ok and pool.detail == "60 (Spark's pool keeps at most 100)"
    run[-1] = jvm_with(run[1], 101)
    assert failed_names(judge(run, OK)) == {"driver JVM block-manager-a threads", "driver JVM block-manager-s threads"}


def test_a_process_replaced_between_the_intervals_is_not_judged():
    verdict = judge(flat_run(runner_pid=43), OK)
    delta = next(c for c in verdict.checks if c.name == "source runner, delta lane RSS")
    assert delta.ok is None and "[42] -> [43]" in delta.detail
    broker = next(c for c in verdict.checks if c.name == "source runner, broker lane RSS")
    assert broker.ok is None  # a new runner after every driver_killed fault
    assert verdict.ok


def test_batch_time_growth_fails_and_too_few_batches_is_not_judged():
    verdict = judge(flat_run(p99=BATCH_P99.limit(1500) + 1), OK)
    assert failed_names(verdict) == {"broker lane batch time p99", "delta lane batch time p99"}
    few = flat_run()
    for k in (1, 2):  # the first half after the first interval
        few[k] = replace(few[k], lanes={lane: replace(figures, batches=BatchFigures(MIN_BATCHES - 1, 500, 900))
                                        for lane, figures in few[k].lanes.items()})
    checks = {c.name: c for c in judge(few, OK).checks}
    assert checks["broker lane batch time"].ok is None
    assert checks["broker lane batch time"].detail.startswith(f"{MIN_BATCHES - 1}, {MIN_BATCHES - 1}, 400 batches")


def test_a_slow_recovery_in_the_first_half_sets_the_batch_time_baseline():
    run = flat_run(8, p99=20_000)
    run[2] = interval(3, p99=20_000)  # a fault's recovery as slow as the last interval's, early in the run
    assert judge(run, OK).ok, judge(run, OK).text()
    assert "largest of the first half 20,000, last 20,000 ms" in next(
        c.detail for c in judge(run, OK).checks if c.name == "broker lane batch time p99")
    late = flat_run(8, p99=20_000)
    late[-2] = interval(7, p99=20_000)  # in the second half only: that is growth
    assert failed_names(judge(late, OK)) == {"broker lane batch time p99", "delta lane batch time p99"}


def test_each_run_s_first_batch_is_kept_apart_from_the_steady_batches(tmp_path: Path):
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": "query-1"}))
    times = BatchTimes({"broker": checkpoint})

    def progress(run: str, ms: float, rows: int = 10) -> SimpleNamespace:
        return SimpleNamespace(progress=SimpleNamespace(id="query-1", runId=run, numInputRows=rows,
                                                        durationMs={"triggerExecution": ms}))

    for event in [progress("run-1", 30_000), progress("run-1", 500), progress("run-1", 700, rows=0),
                  progress("run-1", 600), progress("run-2", 25_000), progress("run-2", 400)]:
        times.onQueryProgress(event)  # type: ignore[arg-type]
    figures = times.take()["broker"]
    assert (figures.count, figures.max_ms, figures.first_of_run, figures.first_of_run_max_ms) == (3, 600, 2, 30_000)
    times.onQueryProgress(progress("run-2", 800))  # type: ignore[arg-type]  # run-2's first was taken before
    later = times.take()["broker"]
    assert (later.count, later.first_of_run) == (1, 0)


def test_state_that_keeps_growing_fails_even_where_each_step_is_small():
    # 100 more rows an interval: within any margin of the interval before (1,200 against 1,100), not of the first
    # half's largest (600)
    run = [interval(i, progress_rows=100 * i) for i in range(1, 13)]
    assert failed_names(judge(run, OK)) == {"broker/state/progress rows"}
    sawtooth = [interval(i, files=150 if i % 2 else 5) for i in range(1, 13)]  # maintenance compacts between samples
    assert judge(sawtooth, OK).ok
    uncompacted = [interval(i, files=150 * i) for i in range(1, 13)]
    assert failed_names(judge(uncompacted, OK)) == {"broker/state/ledger files"}


def test_a_log_that_is_never_cleaned_up_fails():
    cleaned = [interval(i, log_files=400 if i % 2 else 60) for i in range(1, 13)]  # cleaned up between samples
    assert judge(cleaned, OK).ok
    kept = [interval(i, log_files=1_500 * i) for i in range(1, 13)]  # every commit kept, as in the soak of 2026-11-29
    assert failed_names(judge(kept, OK)) == {"delta/group/share_state log files"}



def test_the_dead_letters_grow_by_design_but_their_data_files_are_judged():
    """User data keeps every rejected record, 30 days of log and a week of replaced files: only compaction bounds
    anything, the number of data files."""
    run = [interval(i) for i in range(1, 13)]
    for i, sample in enumerate(run, 1):
        sample.tables["broker/state/dead_letters"] = TableFigures(i * 10, 2, 500_000 * i, 1_000 * i, 1_500_000 * i,
                                                                  log_files=1_500 * i)
    verdict = judge(run, OK)
    assert verdict.ok, verdict.text()
    checks = {c.name: c for c in verdict.checks if c.name.startswith("broker/state/dead_letters")}
    assert checks["broker/state/dead_letters rows, bytes and log"].ok is None
    assert checks["broker/state/dead_letters files"].ok
    run[-1].tables["broker/state/dead_letters"] = TableFigures(1_200, 2_000, 60_000, 120, 600_000, log_files=18_000)
    assert failed_names(judge(run, OK)) == {"broker/state/dead_letters files"}


def test_the_ledger_grows_until_its_retention_but_its_rows_must_not_grow_fatter():
    growing = [interval(i, ledger_rows=500 * i, ledger_bytes=50_000 * i) for i in range(1, 7)]
    assert judge(growing, OK).ok
    fatter = [interval(i, ledger_rows=500 * i, ledger_bytes=50_000 * i * (10 if i == 6 else 1)) for i in range(1, 7)]
    assert failed_names(judge(fatter, OK)) == {"broker/state/ledger bytes per row"}
    beyond = flat_run(ledger_rows=2 * LEDGER_KEEP_EPOCHS, ledger_bytes=100 * 2 * LEDGER_KEEP_EPOCHS)
    assert "broker/state/ledger rows" in failed_names(judge(beyond, OK))


def test_bytes_on_disk_are_judged_only_after_the_orphan_retention():
    short = {c.name: c for c in judge(flat_run(dead_bytes=50_000_000), OK).checks}
    assert short["broker/state/progress bytes on disk beyond the snapshot"].ok is None
    minutes = ORPHAN_RETENTION.total_seconds() / 60 / 2  # five intervals end after the retention
    long = [interval(i, minutes_per=minutes) for i in range(1, 6)] + [
        interval(6, minutes_per=minutes, dead_bytes=50_000_000)]
    assert {"broker/state/progress bytes on disk beyond the snapshot",
            "broker/state/ledger bytes on disk beyond the snapshot per row"} <= failed_names(judge(long, OK))


def test_the_ledger_s_dead_copies_grow_with_its_rows_and_are_judged_per_row():
    """A ledger rewrite that loses its race leaves a copy of the whole ledger until the orphan retention: as the
    ledger grows to its retention, so do the copies, as in 2026-11-29's fourth 2-hour run; more copies a row fail."""
    def ledger(i: int, copies: int) -> TableFigures:
        return TableFigures(i * 100, 12, 50_000 * i, 500 * i, (1 + copies) * 50_000 * i)

    growing = [interval(i, minutes_per=ORPHAN_RETENTION.total_seconds() / 60 / 2) for i in range(1, 7)]
    for i, sample in enumerate(growing, 1):
        sample.tables["broker/state/ledger"] = ledger(i, copies=20)
    verdict = judge(growing, OK)
    assert verdict.ok, verdict.text()
    growing[-1].tables["broker/state/ledger"] = ledger(6, copies=40)
    assert failed_names(judge(growing, OK)) == {"broker/state/ledger bytes on disk beyond the snapshot per row"}


def test_a_lost_or_duplicated_record_or_an_unexplained_failure_fails():
    outcomes = {"broker": replace(OK["broker"], lost=2),
                "delta": replace(OK["delta"], duplicated=1, failures=("worker exit 1: KafkaException",))}
    assert failed_names(judge(flat_run(), outcomes)) == {
        "broker lane lost", "delta lane duplicated", "delta lane failures no fault caused"}
    assert failed_names(judge(flat_run(), {"broker": OK["broker"]})) == {"delta lane"}


def test_too_few_intervals_are_not_judged_for_growth_but_records_still_are():
    verdict = judge(flat_run(2), OK)
    assert [c.ok for c in verdict.checks if c.name == "growth"] == [None] and verdict.ok
    assert not judge(flat_run(2), {**OK, "broker": replace(OK["broker"], lost=1)}).ok


def test_a_published_run_can_be_judged_again(tmp_path: Path, capsys):
    figures = {"run": {"date": "2026-11-28T1130Z", "kafka": "cluster", "minutes": 60, "interval_minutes": 10,
                       "seed": 932, "records_per_s": 100}, "machine": {"cpus": 2, "memory_gb": 24},
               "intervals": [i.to_dict() for i in flat_run()],
               "outcomes": {lane: {**vars(outcome), "failures": []} for lane, outcome in OK.items()}}
    assert publish(json.loads(json.dumps(figures)), tmp_path)
    written = json.loads((tmp_path / JSON_NAME).read_text())
    assert written["verdict"]["ok"] and (tmp_path / PNG_NAME).stat().st_size > 10_000
    assert "verdict: flat" in capsys.readouterr().out


def test_spark_s_descriptors_per_start_are_the_median_of_each_start_s_own_growth():
    """One start whose sample caught a socket closing late (2026-11-30: the floor of the total read 1 socket a start
    where every start of the lanes left 2) moves the median of five starts not at all."""
    from soak.long.spark_baseline import _median_growth
    sockets = [100, 102, 104, 106, 108, 107]  # the fifth start's sample: an earlier start's socket closed at last
    counts = [{"socket": n, "anon_inode": 50 + 2 * k, "pipe": 8} for k, n in enumerate(sockets)]
    assert (sockets[-1] - sockets[0]) // 5 == 1
    assert _median_growth(counts) == {"anon_inode": 2, "socket": 2}  # a kind that did not grow is allowed nothing
    assert _median_growth([{"socket": 3}, {"socket": 9}, {"socket": 3}, {}]) == {}  # one start's burst is no cost
