"""``make soak-long``: hours of both coordinators under the cluster's faults, sampled per interval, judged flat or not.

    python -m soak.long [--kafka cluster|embedded] [--minutes 120] [--interval-minutes 10]
                        [--out-dir bench/results] [--seed 932] [--rate 100] [--keep DIR]
    python -m soak.long --report bench/results/soak-long.json   (judge, draw and print a run's JSON again)

``--kafka cluster`` (the default) starts three Apache Kafka brokers from ``make jars`` and kills and
restarts them among the broker lane's faults; ``--kafka embedded`` is the three-node embedded broker,
for a quick try (its own faults instead of kills). Writes soak-long.json and soak-long.png to
``--out-dir``, prints the interval tables in markdown (for docs/benchmarks.md), each lane's soak
table, and the verdict; exits 1 if the verdict failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

import psutil

from soak.environment import add_session_arguments, soak_session
from soak.long.intervals import Interval, SparkPerStart, markdown
from soak.long.plot import plot
from soak.long.processes import DRIVER_JVM_OPTIONS, start_tracing
from soak.long.run import LongSoakPlan, run_long_soak
from soak.long.verdict import LaneOutcome, judge

__all__ = ["JSON_NAME", "PNG_NAME", "main", "publish"]

JSON_NAME = "soak-long.json"
PNG_NAME = "soak-long.png"


def publish(figures: dict[str, Any], out_dir: Path) -> bool:
    """Judge a run's figures, write its JSON (the verdict in it) and plot, print its tables; whether it was flat."""
    intervals = [Interval.from_dict(i) for i in figures["intervals"]]
    outcomes = {lane: LaneOutcome(**{**outcome, "failures": tuple(outcome["failures"])})
                for lane, outcome in figures["outcomes"].items()}
    verdict = judge(intervals, outcomes, SparkPerStart.from_dict(figures.get("spark_per_start")))
    figures["verdict"] = {"ok": verdict.ok, "checks": [vars(check) for check in verdict.checks]}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / JSON_NAME).write_text(json.dumps(figures, indent=1) + "\n")
    run = figures["run"]
    title = (f"long soak, {run['date']}: {run['minutes']:g} min on {run['kafka']}, {run['records_per_s']} records/s "
             f"per lane, {figures['machine']['cpus']} cores")
    plot(intervals, verdict, title, out_dir / PNG_NAME)
    print(f"\n{title}\n\n{markdown(intervals)}\n")
    for lane, outcome in outcomes.items():
        print(f"{lane} lane: {outcome.produced:,} produced, {outcome.in_sink:,} in the sink, {outcome.elsewhere:,} "
              f"with another member ({outcome.unanswered:,} more ACCEPTed unanswered), {outcome.lost:,} lost, "
              f"{outcome.duplicated:,} duplicated; query starts {outcome.query_starts}, faults {outcome.faults}")
    print(f"\n{verdict.text()}\n\nwrote {out_dir / JSON_NAME} and {out_dir / PNG_NAME}")
    return verdict.ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m soak.long", description=__doc__.splitlines()[0])
    add_session_arguments(parser, kafka="cluster")
    parser.add_argument("--minutes", type=float, default=120.0, help="how long the lanes run, drains not included")
    parser.add_argument("--interval-minutes", type=float, default=10.0, help="how often the figures are sampled")
    parser.add_argument("--out-dir", type=Path, default=Path("bench/results"), help="where the JSON and PNG go")
    parser.add_argument("--rate", type=int, default=LongSoakPlan.records_per_s, help="records/s per lane")
    parser.add_argument("--report", type=Path, help="judge, draw and print this run's JSON again; runs nothing")
    args = parser.parse_args(argv)
    if args.report is not None:
        return 0 if publish(json.loads(args.report.read_text()), args.out_dir) else 1
    start_tracing()  # before Spark and Kafka: what they allocate in this process is the driver Python's heap
    plan = LongSoakPlan(args.minutes, args.interval_minutes, args.seed, args.rate)
    started = datetime.datetime.now(datetime.UTC)
    heading = (f"long soak for {args.minutes:g} min (a sample every {args.interval_minutes:g} min) on {{}}, seed "
               f"{args.seed}, {args.rate} records/s per lane")
    with soak_session(args, "sharegroup-soak-long-", heading.format, DRIVER_JVM_OPTIONS) as (spark, kafka, work):
        result = run_long_soak(spark, kafka, work, plan)
    for lane, report in result.reports.items():
        print(f"\n{lane} lane\n{report.table()}")
    figures = {"run": {"date": started.strftime("%Y-%m-%dT%H%MZ"), "kafka": args.kafka, "minutes": args.minutes,
                       "interval_minutes": args.interval_minutes, "seed": args.seed, "records_per_s": args.rate},
               "machine": {"cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30)},
               **result.to_json()}
    return 0 if publish(figures, args.out_dir) else 1


if __name__ == "__main__":
    sys.exit(main())
