"""``make soak``: a bounded soak of format("sharegroup") under random faults.

    python -m soak [--kafka embedded|cluster] [--minutes 10] [--seed 932] [--keep DIR]

``--kafka embedded`` (the default) uses a three-node embedded broker (so a node going down takes
only part of the cluster), or the cluster named by SHAREGROUP_TEST_BOOTSTRAP, where the faults that
need the embedded broker are left out. ``--kafka cluster`` starts three Apache Kafka brokers from
the jars of ``make jars`` (replication factor 3, min ISR 2) and adds broker kills (kill -9) and
restarts to the faults. Prints the table of faults and records; exits 1 if anything was lost or
duplicated, or the query failed in a way no fault caused.
"""

from __future__ import annotations

import argparse
import sys

from soak.environment import add_session_arguments, soak_session
from soak.run import SoakSettings, run_soak

#: share of the run spent injecting faults; the rest is left for the drain
FAULT_SHARE = 0.8


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__.splitlines()[0])
    add_session_arguments(parser, kafka="embedded")
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the soak runs, drain included")
    args = parser.parse_args(argv)
    seconds = args.minutes * 60
    settings = SoakSettings(fault_seconds=seconds * FAULT_SHARE, drain_timeout_s=seconds * (1 - FAULT_SHARE),
                            seed=args.seed)
    heading = f"soak for {args.minutes:g} min on {{}}, seed {args.seed}"
    with soak_session(args, "sharegroup-soak-", heading.format) as (spark, kafka, work):
        report = run_soak(spark, kafka, work, settings)
    print(report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
