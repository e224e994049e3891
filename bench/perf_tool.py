"""Kafka's own share consumer perf tool (``ShareConsumerPerformance``, the Java client) on the bench's records.

It runs the tool class from ``jvm/target/kafka`` as ``kafka-share-consumer-perf-test`` would,
with its defaults (one thread, implicit acknowledgement: acknowledgements ride on the next
ShareFetch), and parses what it prints. Its own figure (``nMsg.sec``) counts from before the
consumer subscribed, so it includes joining the share group. The steady-state figure, the one
compared with the other consumers, leaves out the first poll like the plain loop does: with a
1 ms ``--reporting-interval`` the tool prints a progress line at every poll that returns records
at least 1 ms after the previous line, so the first line is the first poll and the second line
says how many records came before it (the first poll and any poll in the same millisecond).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from bench.measure import Throughput
from sharegroup_testing.apache_kafka import ApacheKafka
from sharegroup_testing.kafka_peers import KafkaUnderTest

__all__ = ["kafka_perf_tool"]

TOOL = "kafka-share-consumer-perf-test"
_REPORTING_INTERVAL_MS = 1
#: the tool gives up after this long without records (joining a share group takes a few seconds)
_IDLE_TIMEOUT_MS = 10_000
#: start, end, MB, MB/s, records/s, records, ms; progress lines end with "for share consumer N"
_STATS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}), (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}), "
                    r"([\d.]+), ([\d.]+), ([\d.]+), (\d+), (\d+)( for share consumer \d+)?$")


def _at(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S:%f").timestamp()


def kafka_perf_tool(kafka: KafkaUnderTest, topic: str, records: int, timeout_s: float) -> dict[str, Any]:
    """One run of the tool on a fresh share group; raises if it read nothing (its output is in the message)."""
    # An unstarted ApacheKafka only runs a tool class from the jars: the embedded broker and an
    # external cluster (SHAREGROUP_TEST_BOOTSTRAP) have no broker of ours to run it from.
    runner = kafka.apache or ApacheKafka()
    done = runner.run_tool(TOOL, "--bootstrap-server", kafka.bootstrap_servers, "--topic", topic,
                           "--group", kafka.new_group(), "--num-records", str(records),
                           "--show-detailed-stats", "--reporting-interval", str(_REPORTING_INTERVAL_MS),
                           "--timeout", str(_IDLE_TIMEOUT_MS), timeout_s=timeout_s)
    matches = [m for m in map(_STATS.match, done.stdout.splitlines()) if m]
    final = next((m for m in matches if m.group(8) is None), None)
    if done.returncode != 0 or final is None or int(final.group(6)) == 0:
        said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip() and not _STATS.match(line)]
        why = next((line for line in reversed(said) if "WARNING" in line or "Exception" in line),
                   said[-1] if said else "no output")
        raise RuntimeError(f"{TOOL} read no records (exit {done.returncode}): {why.strip()}")
    read, end = int(final.group(6)), _at(final.group(2))
    progress = [m for m in matches if m.group(8) is not None]
    if len(progress) >= 2:  # records after the first poll's burst, from the first poll on
        steady = Throughput(read - int(progress[1].group(6)) + 1, end - _at(progress[0].group(2)),
                            complete=read >= records)
    else:  # every record came in one burst: only the tool's own figure exists
        steady = Throughput(read, int(final.group(7)) / 1000, complete=read >= records)
    return {
        "throughput": steady.as_dict(),
        "tool_records_per_s": round(float(final.group(5))), "tool_elapsed_ms": int(final.group(7)),
        "records_read": read, "acknowledgement": "implicit (the tool's default)",
    }
