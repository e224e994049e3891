"""A member we did not write: Kafka's own Java share consumer in the query's share group.

The console share consumer from Kafka's tools (``ConsoleShareConsumer``, explicit
acknowledgement, ACCEPT after printing each record) and a running ``format("sharegroup")``
query read the same topic through one share group on Apache Kafka's broker. Every record
must end up in exactly one of them, and Kafka's ``kafka-share-groups`` tool must then see
the query's member gone and nothing left to deliver.
"""

from __future__ import annotations

import collections
import contextlib
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sharegroup_testing.apache_kafka import ApacheKafka
from sharegroup_testing.kafka_peers import wait_for
from tests.streams import StreamSetup

pytestmark = pytest.mark.spark

PARTITIONS = 4
ROUND = 400
MAX_ROUNDS = 20
#: What a JVM ends with after SIGTERM once its shutdown hooks ran (128 + 15).
JVM_SIGTERM_EXIT = 128 + signal.SIGTERM

#: One record as the console share consumer prints it with the formatter properties below
#: (Kafka's tools log to stderr here, so stdout holds records only; a last line still being
#: written has no line end yet and is not matched).
_JAVA_LINE = re.compile(r"^Partition:(\d+)\tOffset:(\d+)\tDelivery:(\d+)\t(record-\d+)\n", re.MULTILINE)
_PROCESSED = re.compile(r"Processed a total of (\d+) messages")
_LOG_ERROR = re.compile(r"^\[[^\]]+\] ERROR .*$", re.MULTILINE)


class JavaMember:
    """``kafka-console-share-consumer`` printing partition, offset, delivery count and value."""

    def __init__(self, apache: ApacheKafka, setup: StreamSetup, client_id: str, folder: Path):
        self.stdout_path = folder / "java-member.out"
        self.stderr_path = folder / "java-member.err"
        args = ["--bootstrap-server", setup.kafka.bootstrap_servers, "--topic", setup.topic, "--group", setup.group,
                "--command-property", f"client.id={client_id}"]
        for prop in ("print.partition=true", "print.offset=true", "print.delivery=true", "print.value=true"):
            args += ["--formatter-property", prop]
        # files, not pipes: nobody reads a pipe while the test waits, and a full one would block the JVM
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process: subprocess.Popen = apache.spawn_tool("kafka-console-share-consumer", args,
                                                               stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def records(self) -> list[tuple[int, bytes]]:
        """(partition, value) of every record printed so far, duplicates kept."""
        return [(p, v) for p, _, _, v in self.printed_lines()]

    def printed_lines(self) -> list[tuple[int, int, int, bytes]]:
        """(partition, offset, delivery count, value) of every record line printed so far."""
        return [(int(p), int(o), int(d), v.encode()) for p, o, d, v in _JAVA_LINE.findall(self.stdout())]

    def tail(self, chars: int = 3000) -> str:
        return f"--- stdout (end) ---\n{self.stdout()[-chars:]}\n--- stderr (end) ---\n{self.stderr()[-chars:]}"

    def terminate(self, timeout_s: float = 60.0) -> int:
        """SIGTERM: the tool's shutdown hook wakes the consumer up and waits until it is closed.

        Closing commits the acknowledgements of everything printed since the last poll, so a
        printed record is not redelivered to the query afterwards.
        """
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


def _share_groups(apache: ApacheKafka, setup: StreamSetup, *args: str) -> str:
    """``kafka-share-groups --describe --group G <args>``: its own printout, without warnings."""
    done = apache.run_tool("kafka-share-groups", "--bootstrap-server", setup.kafka.bootstrap_servers,
                           "--describe", "--group", setup.group, *args)
    # its table goes to stdout, a verdict such as "has no active members" to stderr, with any warnings
    own = [line for line in (done.stdout + "\n" + done.stderr).splitlines()
           if line.startswith(("GROUP ", f"{setup.group} ")) or f"'{setup.group}'" in line]
    report = "\n".join(own) if own else f"(nothing of its own)\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return f"$ kafka-share-groups --describe --group {setup.group} {' '.join(args)}  (exit {done.returncode})\n{report}"


def _table(report: str, group: str) -> list[dict[str, str]]:
    """The rows of a share-groups table by column name (a trailing empty column is absent)."""
    headers = [line.split() for line in report.splitlines() if line.startswith("GROUP ")]
    rows = [line.split() for line in report.splitlines() if line.startswith(f"{group} ")]
    return [dict(zip(headers[0], row, strict=False)) for row in rows] if headers else []


def _describe_until(describe: Callable[[], str], done: Callable[[str], bool], timeout_s: float, what: str) -> str:
    """Run a describe until ``done`` holds of its output (or time is up); the last output."""
    outputs: list[str] = []

    def check() -> bool:
        outputs.append(describe())
        return done(outputs[-1])

    with contextlib.suppress(AssertionError):  # the caller asserts on the last output, and shows it
        wait_for(check, timeout_s, what, interval_s=0.5)
    print(outputs[-1])
    return outputs[-1]


@pytest.mark.timing
def test_query_and_kafkas_console_share_consumer_share_the_group(spark, kafka, tmp_path):
    apache = kafka.require_apache("runs Kafka's own console share consumer and kafka-share-groups")
    setup = StreamSetup(kafka, kafka.new_topic(PARTITIONS), kafka.new_group(), tmp_path)
    spark_client, java_client = f"spark-{setup.group}", f"java-{setup.group}"
    produced: set[tuple[int, bytes]] = set()

    def in_sink() -> set[tuple[int, bytes]]:
        return {(p, v) for p, v, _ in setup.sink_rows(spark)}

    query = setup.file_sink(spark, available_now=False, maxRecordsPerTrigger=200,
                            **{"kafka.client.id": spark_client})
    java = None
    try:
        wait_for(lambda: query.lastProgress is not None, 90, "the query's first trigger")
        java = JavaMember(apache, setup, java_client, tmp_path)
        # Whoever is in the group gets a round; a member learns of the other one, and gives up
        # partitions to it, only at its next heartbeat (5 s), so produce until both had some.
        for _ in range(MAX_ROUNDS):
            produced.update(kafka.produce_numbered(setup.topic, ROUND, PARTITIONS, first=len(produced)))
            wait_for(lambda: in_sink() | set(java.records()) >= produced, 120,
                     "every record in the sink or printed by the Java member", interval_s=0.5)
            if in_sink() and java.records():
                break
        assert java.process.poll() is None, f"the Java member exited while consuming\n{java.tail()}"
        running = _describe_until(lambda: _share_groups(apache, setup, "--members"),
                                  lambda out: {spark_client, java_client} <= {
                                      r.get("CLIENT-ID") for r in _table(out, setup.group)},
                                  60, "both members listed")
        assert {spark_client, java_client} <= {r.get("CLIENT-ID") for r in _table(running, setup.group)}, running

        # a stop releases what the query still holds, and the Java member would get it too
        wait_for(setup.every_epoch_settled, 60, "the query's last epoch acknowledged", interval_s=0.5)
        query.stop()
        assert query.exception() is None
        setup.wait_until_member_left()

        assert java.process.poll() is None, f"the Java member crashed\n{java.tail()}"
        exit_code = java.terminate()
    finally:
        query.stop()
        if java is not None:
            java.kill()

    java_rows = java.records()
    java_lines = java.printed_lines()
    processed = [int(n) for n in _PROCESSED.findall(java.stderr())]
    print(f"Java member: exit {exit_code}, {len(java_rows)} records printed, stderr says {processed}; first lines:")
    print("\n".join(f"Partition:{p}\tOffset:{o}\tDelivery:{d}\t{v.decode()}" for p, o, d, v in java_lines[:5]))
    assert exit_code == JVM_SIGTERM_EXIT, f"the Java member ended with exit {exit_code}\n{java.tail()}"
    assert processed == [len(java_rows)], f"the Java member's own count differs from its output\n{java.tail()}"
    assert not _LOG_ERROR.findall(java.stderr()), f"the Java member logged errors: {_LOG_ERROR.findall(java.stderr())}"
    # produce_numbered puts record i on partition i % PARTITIONS
    assert all(int(v.decode().split("-")[1]) % PARTITIONS == p for p, v in java_rows), "a partition disagrees"

    sink_rows = [(p, v) for p, v, _ in setup.sink_rows(spark)]
    at_spark, at_java = set(sink_rows), set(java_rows)
    twice_in_sink = [r for r, n in collections.Counter(sink_rows).items() if n > 1]
    twice_at_java = [r for r, n in collections.Counter(java_rows).items() if n > 1]
    in_both = sorted(at_spark & at_java)
    missing = sorted(produced - at_spark - at_java)
    print(f"{len(produced)} records produced: {len(at_spark)} in the Spark sink, {len(at_java)} at the Java member")
    assert at_spark and at_java, f"both members must have taken part ({len(at_spark)} / {len(at_java)})"
    assert not twice_in_sink, f"{len(twice_in_sink)} records twice in the sink, e.g. {twice_in_sink[:3]}"
    assert not twice_at_java, f"{len(twice_at_java)} records twice at the Java member, e.g. {twice_at_java[:3]}"
    assert not in_both, f"{len(in_both)} records reached both members, e.g. {in_both[:3]}"
    assert not missing, f"{len(missing)} records reached neither member, e.g. {missing[:3]}"
    assert at_spark | at_java == produced

    # What Kafka says about the group once both members are gone
    members = _describe_until(lambda: _share_groups(apache, setup, "--members"),
                              lambda out: "has no active members" in out, 60, "no member left in the group")
    assert spark_client not in members, f"the query's member is still in the group:\n{members}"
    assert "has no active members" in members, f"the group still has members:\n{members}"

    log_end = collections.Counter(p for p, _ in produced)

    def nothing_left(out: str) -> bool:
        rows = {int(r["PARTITION"]): r for r in _table(out, setup.group) if r.get("TOPIC") == setup.topic}
        return sorted(rows) == list(range(PARTITIONS)) and all(r["LAG"] == "0" for r in rows.values())

    offsets = _describe_until(lambda: _share_groups(apache, setup, "--offsets"), nothing_left, 60,
                              "LAG 0 on every partition")
    assert nothing_left(offsets), f"records are left to deliver (log end offsets {dict(log_end)}):\n{offsets}"
    rows = _table(offsets, setup.group)
    assert all(int(r["START-OFFSET"]) <= log_end[int(r["PARTITION"])] for r in rows), offsets
