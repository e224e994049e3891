"""Figure (l): the queue's scaling, measured: members with per-record work on ONE partition, and N queries as
the N members of one broker group, on Apache Kafka.

Every member is a process of its own (``bench.member_process`` says what a member does with a record): the
section starts its processes once, a consumer process per member of the largest run and a query process (a
Spark application with its own SparkSession) per query of the largest run, and every series has them join a
group of its own, so no run pays for Python's imports or a JVM's start. Every member works ``work_ms`` per
record, one record after another: ``time.sleep``, a stand-in for I/O-bound work (a lookup, a call to a service)
that leaves the two cores free, so what members reach together is set by how the group spreads the records,
not by the machine.

A series: on a fresh group and topic, the members of its largest run join and wait until the group shows
every one of them (a broker group: with its partitions assigned, which Apache Kafka does at a member's
heartbeat); warm-up records (numbered below 0, no work on them) go through until the group settled them, so
no member's first poll (a DeltaShareConsumer's reader opening its consumer, a query planning its first batch)
is measured. Then one run per member count, the largest first; before each smaller count members leave (a
consumer closes, a query stops; consumers first, so a series' query stays for its one-member run) until the
group shows the members left.

A run: every member pauses (a consumer after the poll under way, a query at its next batch with records);
the run's ``records`` records of 64 B, keyed by their number, are produced, and once every query holds its
first batch the members go and the clock starts: producing, slow in one-record batches, is not measured. The
clock stops when the last record is acknowledged: a consumer's ``commit_sync`` returns once its
acknowledgements landed, so a run of consumers ends at its last commit; a query's acknowledgements follow
Spark's commit in its driver-side worker, out of the bench's sight, so a run with a query ends at the first
describe of the group (``sharegroup_source.admin``, asked every 0.1 s once every record was worked on) that
shows no lag: up to one describe late. records/s = records / that time. Each member reports the numbers it
worked on; the run counts any number worked on twice (a duplicate) or never (missing), kept in the figures and
printed loudly, never raised, and a last describe says whether the group acknowledged every record
(``acknowledged_all``).

The series, 1, 2, 4 and 8 members on one partition, every consumer's ``max.poll.records`` and every query's
``maxRecordsPerTrigger`` ``poll_records`` (100: ``records`` / 100 polls share evenly among 1 to 8 members, and
a Delta group's members pay two ``share_state`` commits a poll, which smaller polls would make the bound):

- ``delta``: a Delta group (``groupLocation``): ``workers``, DeltaShareConsumers; ``workers_and_query``, one
  member a ``format("sharegroup")`` query with ``coordinator=delta``, the others DeltaShareConsumers. Our own
  coordinator cuts the ranges, so the producer's batches do not matter; the records go in its own (large)
  batches.
- ``broker``: a broker share group of confluent-kafka ShareConsumers: ``large_batches``, the records in the
  bench's producer's own batches (linger.ms 5: one or a few for a whole run), which Apache Kafka acquires
  whole; ``small_batches``, one record per producer batch (``batch.num.messages`` 1, linger.ms 0);
  ``small_batches_and_query``, one-record batches, one member a query with ``coordinator=broker``.

N queries: 1, 2 and 3 queries (separate Spark applications, each a process with its own SparkSession) as the
only members of one broker group, on a topic of ``query_partitions`` partitions (6: 1, 2 and 3 queries each get
an equal share of whole partitions, which is how a broker group spreads while its members are no more than its
partitions), each doing the same work per record in its foreachBatch, with the source's default batches:
records/s, how the records split among the queries, and across them every record once in total. No more than
three: each Spark application is a JVM and its Python workers beside Kafka on two cores, whose starts take half
a minute and whose every batch costs Spark's own share of a core; more would measure the cores, not the group.

The N queries' series goes first: its warm-up gives every query process its first, slow batches (a fresh
JVM's: class loading, JIT, Python workers) side by side. Rounds (``rounds``, 1): round r runs every series
before round r+1; the median run of each member count is kept (``bench.measure.median_run``).
"""

from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Producer

from bench.cluster import record_value
from bench.measure import Throughput, median_run
from bench.member_process import REPORT_PREFIX
from sharegroup_source.admin import GroupDescription, describe_groups
from sharegroup_testing.kafka_peers import KafkaUnderTest

__all__ = ["MEMBER_SERIES", "MemberSizes", "measure_members"]

#: The members-with-work series: coordinator -> name -> what it is, in the order every output lists them.
MEMBER_SERIES = {
    "delta": {"workers": "DeltaShareConsumers",
              "workers_and_query": "DeltaShareConsumers + 1 query (delta)"},
    "broker": {"large_batches": "ShareConsumers, large producer batches",
               "small_batches": "ShareConsumers, 1-record producer batches",
               "small_batches_and_query": "ShareConsumers + 1 query (broker), 1-record batches"},
}
#: Series on one-record producer batches, and series with a query among the members.
_SMALL_BATCHES = {"small_batches", "small_batches_and_query"}
_WITH_QUERY = {"workers_and_query", "small_batches_and_query"}
VALUE_BYTES = 64
#: How often the bench describes a group while it waits for its members, and for a query's acknowledgements.
_DESCRIBE_EVERY_S = 0.1
#: How long members may take to join and be assigned, to start (a query process: its SparkSession), to leave.
_JOIN_S, _START_S, _LEAVE_S = 90.0, 240.0, 120.0
_REPO = Path(__file__).resolve().parents[1]
#: A series' warm-up records, in polls (or batches) of max.poll.records per member of its largest run.
_WARM_UP_POLLS = 2


@dataclass(frozen=True)
class MemberSizes:
    """How big (l) is: records and member counts of both figures, and each member's work per record."""

    #: time.sleep per record, in every member
    work_ms: float
    #: records on the one partition; every consumer's max.poll.records and the query's maxRecordsPerTrigger
    records: int
    poll_records: int
    member_counts: tuple[int, ...]
    #: N queries: their topic's partitions, its records, the query counts
    query_partitions: int
    query_records: int
    query_counts: tuple[int, ...]
    rounds: int = 1
    #: longest a run may take from the members' go to its last record acknowledged, and a warm-up
    timeout_s: float = 120.0

    @classmethod
    def full(cls) -> MemberSizes:
        return cls(work_ms=5, records=1_600, poll_records=100, member_counts=(1, 2, 4, 8), query_partitions=6,
                   query_records=1_200, query_counts=(1, 2, 3))

    @classmethod
    def quick(cls) -> MemberSizes:
        return cls(work_ms=5, records=400, poll_records=50, member_counts=(1, 4), query_partitions=6,
                   query_records=300, query_counts=(1, 2), timeout_s=60.0)


# -- the member processes -------------------------------------------------------------------------------------
class _Process:
    """One ``bench.member_process`` child: commands to its stdin, its answers and reports read in a thread."""

    def __init__(self, role: str, log_path: Path):
        self.role, self.log_path = role, log_path
        self._log = log_path.open("w")
        # a child of a process whose Spark runs must start a JVM of its own, not join the parent's
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
        self._popen = subprocess.Popen([sys.executable, "-m", "bench.member_process", role], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=self._log, text=True, cwd=_REPO, env=env)
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reports: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.error: str | None = None
        threading.Thread(target=self._read, name=f"member-{self._popen.pid}", daemon=True).start()

    def _read(self) -> None:
        stdout: IO[str] = self._popen.stdout  # type: ignore[assignment]
        for line in stdout:
            if not line.startswith(REPORT_PREFIX):
                continue
            message = json.loads(line[len(REPORT_PREFIX):])
            if "done" in message:
                with self._lock:
                    self._reports.append(message)
                continue
            if "error" in message and "joined" not in message:
                self.error = message["error"]
            self._answers.put(message)
        self.error = self.error or f"the member process exited ({self._popen.wait()}); its log: {self.log_path}"
        self._answers.put({"error": self.error})

    @property
    def alive(self) -> bool:
        return self._popen.poll() is None and self.error is None

    def send(self, **command: Any) -> None:
        """A command; answers still queued are dropped first (left by a run that failed: every run waits for the
        answers it asked for before its next command)."""
        while not self._answers.empty():
            self._answers.get_nowait()
        stdin: IO[str] = self._popen.stdin  # type: ignore[assignment]
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()

    def answer(self, key: str, timeout_s: float) -> Any:
        """The next answer, which must carry ``key``; a member's failure or silence is raised."""
        try:
            message = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"a {self.role} member did not answer {key!r} within {timeout_s:.0f} s; its log: "
                               f"{self.log_path}") from None
        if key not in message or message.get("error"):
            raise RuntimeError(f"a {self.role} member failed: {message.get('error', message)}; its log: "
                               f"{self.log_path}")
        return message[key]

    def take(self) -> list[dict[str, Any]]:
        """The reports (one per commit or batch) since the last take."""
        with self._lock:
            reports, self._reports = self._reports, []
        return reports

    def hang_up(self) -> None:
        """EOF on stdin: the child leaves its group, stops its Spark if it has one, and exits."""
        with suppress(OSError):  # the child is gone already
            self._popen.stdin.close()  # type: ignore[union-attr]

    def close(self) -> None:
        """Hang up, and wait for the child to exit; killed if it does not within a minute."""
        try:
            self.hang_up()
            self._popen.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()
        finally:
            self._log.close()


class _Pool:
    """The section's member processes, ``consumers`` of them and ``queries``, started at once; a process that
    failed is replaced before the next run asks for it."""

    def __init__(self, consumers: int, queries: int, logs: Path):
        self._logs = logs
        self._numbers = count()
        self._by_role: dict[str, list[_Process]] = {"consumer": [], "query": []}
        try:
            for role, n in (("consumer", consumers), ("query", queries)):
                self._by_role[role] = [self._spawn(role) for _ in range(n)]
            for process in self.all():
                process.answer("ready", _START_S)
        except BaseException:
            self.close()
            raise

    def _spawn(self, role: str) -> _Process:
        return _Process(role, self._logs / f"{role}-{next(self._numbers)}.log")

    def all(self) -> list[_Process]:
        return [process for processes in self._by_role.values() for process in processes]

    def take(self, role: str, n: int) -> list[_Process]:
        """``n`` live processes of ``role``, the failed ones replaced."""
        processes = self._by_role[role]
        for index in range(n):
            if not processes[index].alive:
                processes[index].close()
                processes[index] = self._spawn(role)
                processes[index].answer("ready", _START_S)
        return processes[:n]

    def close(self) -> None:
        """Every process at once: a query process's Spark takes seconds to stop."""
        for process in self.all():
            process.hang_up()
        for process in self.all():
            process.close()


# -- a series and its runs -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Group:
    """A series' fresh group and topic; ``work`` holds its Delta group and its queries' state and checkpoints."""

    kafka: KafkaUnderTest
    coordinator: str
    id: str
    topic: str
    partitions: int
    work: Path

    @property
    def location(self) -> str:
        return str(self.work / "group")

    def consumer(self, sizes: MemberSizes) -> dict[str, Any]:
        config: dict[str, Any] = {"bootstrap.servers": self.kafka.bootstrap_servers, "group.id": self.id,
                                  "max.poll.records": sizes.poll_records}
        if self.coordinator == "delta":
            config.update({"group.location": self.location, "share.auto.offset.reset": "earliest"})
        return {"op": "join", "kind": self.coordinator, "config": config, "topic": self.topic,
                "work_ms": sizes.work_ms}

    def query(self, number: int, sizes: MemberSizes, trigger: int | None) -> dict[str, Any]:
        """A query's join: its own state and checkpoint (the source's ``checkpointLocation`` option too, so it
        settles at Spark's commit), batches of ``trigger`` records (None: the source's default)."""
        where = self.work / f"query-{number}"
        options = {"kafka.bootstrap.servers": self.kafka.bootstrap_servers, "kafka.group.id": self.id,
                   "subscribe": self.topic, "stateLocation": str(where / "state"),
                   "checkpointLocation": str(where / "checkpoint"),
                   **({"maxRecordsPerTrigger": str(trigger)} if trigger else {})}
        if self.coordinator == "delta":
            options.update({"coordinator": "delta", "groupLocation": self.location,
                            "share.auto.offset.reset": "earliest"})
        return {"op": "join", "options": options, "checkpoint": str(where / "checkpoint"), "work_ms": sizes.work_ms}

    def describe(self) -> GroupDescription:
        servers = self.kafka.bootstrap_servers
        if self.coordinator == "delta":
            return describe_groups([self.location], bootstrap_servers=servers)[0]
        return describe_groups(groups=[self.id], bootstrap_servers=servers)[0]

    def ready(self, description: GroupDescription, members: int) -> bool:
        """Every member in the group; a broker group's with partitions assigned, each partition to one member
        while there are no more members than partitions."""
        if description.error or len(description.members) != members:
            return False
        if self.coordinator == "delta":
            return True
        assigned = [set(member.assignment) for member in description.members]
        every = set().union(*assigned)
        return (all(assigned) and len(every) == self.partitions
                and (members > self.partitions or sum(map(len, assigned)) == self.partitions))

    def settled(self, description: GroupDescription) -> bool:
        """Every record of every partition acknowledged."""
        return (not description.error and len(description.partitions) == self.partitions
                and all(p.lag == 0 for p in description.partitions))


def _wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Ask ``check`` every _DESCRIBE_EVERY_S until it holds; the monotonic time of the asking that held."""
    deadline = time.monotonic() + timeout_s
    while True:
        asked = time.monotonic()
        if check():
            return asked
        if asked > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(max(0.0, asked + _DESCRIBE_EVERY_S - time.monotonic()))


def _produce(producer: Producer, topic: str, partitions: int, numbers: range) -> float:
    """Records of ``numbers`` round-robin over the partitions, keyed by their number; the seconds until the last
    was delivered. The caller's producer decides the batches."""
    failures: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    began = time.monotonic()
    for number in numbers:
        producer.produce(topic, key=str(number).encode(), value=record_value(number, VALUE_BYTES),
                         partition=number % partitions, on_delivery=delivered)
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining or failures:
        raise RuntimeError(f"producing failed: {remaining} undelivered, {failures[:3]}")
    return time.monotonic() - began


@dataclass
class _Member:
    """One member of a series: its process, its role and what it reported in the run under way."""

    process: _Process
    role: str
    reports: list[dict[str, Any]]

    def numbers(self) -> list[int]:
        return [n for r in self.reports for n in (*r["done"], *r["failed"])]


@dataclass(frozen=True)
class _Series:
    """A series of runs on one group: ``counts`` members, ``queries`` of them queries at the largest count (the
    others consumers, who leave first), over ``records`` records a run from ``producer``; queries in batches of
    ``trigger`` records (None: the source's default)."""

    name: str
    group: _Group
    producer: Producer
    records: int
    counts: tuple[int, ...]
    queries: int
    trigger: int | None


def _series(series: _Series, pool: _Pool, sizes: MemberSizes, runs: dict[int, dict[str, Any]],
            say: Callable[[str], None]) -> dict[str, float]:
    """The series' runs into ``runs``, by member count, largest first: its members join once, at the largest
    count, and warm up; before each smaller count members leave (consumers first, a query last). Returns what
    the series' set-up took."""
    group, top = series.group, max(series.counts)
    phases: dict[str, float] = {}
    with _joined(group, pool, sizes, top - series.queries, series.queries, series.trigger, phases) as members:
        # warm-up records first, numbered below 0 (no work on them), until the group settled them all: no member's
        # first poll (a DeltaShareConsumer opens its reader's consumer, a query plans its first batch) is measured
        warming = time.monotonic()
        _produce(series.producer, group.topic, group.partitions, range(-_WARM_UP_POLLS * top * sizes.poll_records, 0))
        _wait_for(lambda: group.settled(group.describe()), sizes.timeout_s, "the warm-up records acknowledged")
        phases["warm_up_s"] = time.monotonic() - warming
        for index, n in enumerate(sorted(series.counts, reverse=True)):
            leaving = time.monotonic()
            _leave(members, n)
            _wait_for(lambda: group.ready(group.describe(), len(members)), _JOIN_S, f"{n} members in group {group.id}")
            reassigned_s = time.monotonic() - leaving
            run = _measure(series, members, range(index * series.records, (index + 1) * series.records),
                           sizes.timeout_s)
            run["phases_s"]["leave_and_reassign_s"] = round(reassigned_s, 2)
            runs[n] = run
            say(f"{series.name}, {n} member(s): {run['throughput']['records_per_s']:,} records/s "
                f"({run['seconds']} s), records each member worked on: {run['split']}")
            if run["duplicates"] or run["missing"] or not run["acknowledged_all"]:
                say(f"!!! {series.name}, {n} member(s): EXACTLY ONCE BROKEN: {run['duplicates']} duplicate(s) "
                    f"{run['duplicate_examples']}, {run['missing']} missing {run['missing_examples']}, every record "
                    f"acknowledged: {run['acknowledged_all']}")
    return {name: round(seconds, 2) for name, seconds in phases.items()}


@contextmanager
def _joined(group: _Group, pool: _Pool, sizes: MemberSizes, consumers: int, queries: int, trigger: int | None,
            phases: dict[str, float]) -> Iterator[list[_Member]]:
    """``consumers`` consumer members and ``queries`` query members in ``group``, every one in it; those still in
    the list leave at the end, whatever happened. ``phases`` gets the seconds joining, being in the group (a
    broker group: assigned) and leaving took."""
    began = time.monotonic()
    workers, queried = pool.take("consumer", consumers), pool.take("query", queries)
    members = [_Member(p, "worker", []) for p in workers] + [_Member(p, "query", []) for p in queried]
    for process in workers:
        process.send(**group.consumer(sizes))
    for number, process in enumerate(queried):
        process.send(**group.query(number, sizes, trigger))
    try:
        for member in members:
            member.process.answer("joined", _JOIN_S)
        phases["join_s"] = time.monotonic() - began
        _wait_for(lambda: group.ready(group.describe(), len(members)), _JOIN_S,
                  f"{len(members)} members in {group.coordinator} group {group.id}")
        phases["in_group_s"] = time.monotonic() - began - phases["join_s"]
        yield members
    finally:
        leaving = time.monotonic()
        _leave(members, 0)
        phases["leave_s"] = time.monotonic() - leaving


def _leave(members: list[_Member], n: int) -> None:
    """Members leave (a consumer closes, a query stops) until ``n`` are left: the last consumer first, the last
    query once no consumer is left; removed from ``members``."""
    leaving: list[_Member] = []
    while len(members) > n:
        workers = [i for i, m in enumerate(members) if m.role == "worker"]
        leaving.append(members.pop(workers[-1] if workers else len(members) - 1))
    live = [member for member in leaving if member.process.alive]
    for member in live:
        member.process.send(op="leave")
    for member in live:
        member.process.answer("left", _LEAVE_S)


def _measure(series: _Series, members: list[_Member], numbers: range, timeout_s: float) -> dict[str, Any]:
    """One run of the series' members over the records ``numbers``: produced, worked on, acknowledged."""
    group = series.group
    for member in members:
        member.process.send(op="pause")
    for member in members:
        member.process.answer("paused", _JOIN_S)
        member.process.take()  # the warm-up's and earlier runs' reports
        member.reports = []
    produce_s = _produce(series.producer, group.topic, group.partitions, numbers)
    for member in members:
        if member.role == "query":
            member.process.answer("holding", timeout_s)
    began = time.monotonic()
    for member in members:
        member.process.send(op="go")
    deadline = began + timeout_s
    acknowledged: set[int] = set()
    while len(acknowledged) < len(numbers) and time.monotonic() < deadline:
        for member in members:
            if member.process.error:
                raise RuntimeError(f"a {member.role} member failed: {member.process.error}; its log: "
                                   f"{member.process.log_path}")
            fresh = member.process.take()
            member.reports += fresh
            acknowledged.update(n for r in fresh for n in r["done"])
        time.sleep(0.01)
    ended = max((r["at"] for m in members for r in m.reports), default=time.monotonic())
    queried = any(m.role == "query" for m in members)
    if queried and len(acknowledged) >= len(numbers):
        ended = max(ended, _wait_for(lambda: group.settled(group.describe()), max(deadline - time.monotonic(), 1),
                                     "every record acknowledged"))
    figures = _figures(members, numbers, began, ended, group.settled(group.describe()), queried)
    figures.update(produce_s=round(produce_s, 3), phases_s={"run_s": round(ended - began, 2)})
    return figures


def _figures(members: list[_Member], numbers: range, began: float, ended: float, settled: bool,
             queried: bool) -> dict[str, Any]:
    """A run's figures: records/s, the split among members, and what broke exactly once."""
    worked = Counter(n for member in members for n in member.numbers())
    duplicates = sorted(n for n, times in worked.items() if times > 1)
    missing = sorted(set(numbers) - set(worked))
    polls = [len(r["done"]) + len(r["failed"]) for m in members for r in m.reports]
    return {
        "throughput": Throughput(len(numbers) - len(missing), ended - began, complete=not missing).as_dict(),
        "members": len(members), "split": [len(m.numbers()) for m in members], "roles": [m.role for m in members],
        "duplicates": sum(worked[n] - 1 for n in duplicates), "duplicate_examples": duplicates[:10],
        "missing": len(missing), "missing_examples": missing[:10],
        "failed_acks": sum(len(r["failed"]) for m in members for r in m.reports),
        "acknowledged_all": settled, "ended_by": "group described settled" if queried else "last commit",
        "seconds": round(ended - began, 3),
        # each member's commits (a query's: batches) as (seconds from the first record produced, records)
        "timeline": [[(round(r["at"] - began, 3), len(r["done"]) + len(r["failed"])) for r in m.reports]
                     for m in members],
        "records_per_poll": {"p50": statistics.median(polls) if polls else 0, "max": max(polls, default=0),
                             "polls": len(polls)},
    }


# -- the section ----------------------------------------------------------------------------------------------
def _small_batch_producer(kafka: KafkaUnderTest) -> Producer:
    """One record per producer batch (batch.num.messages 1, no linger), 100 requests in flight so the producing
    keeps ahead of 8 members on two busy cores (an idempotent producer allows 5: 650-2,300 records/s measured
    beside other load, where 8 members take 700), and no retries, so a record is written once or the run fails."""
    return Producer(kafka.config(**{"linger.ms": 0, "batch.num.messages": 1, "enable.idempotence": False,
                                    "max.in.flight.requests.per.connection": 100, "retries": 0,
                                    "log.connection.close": False}))


def measure_members(kafka: KafkaUnderTest, sizes: MemberSizes, scratch: Path,
                    say: Callable[[str], None]) -> dict[str, Any]:
    """(l): both figures, on one pool of member processes; see the module's docstring."""
    scratch.mkdir(parents=True, exist_ok=True)
    groups = count()
    small = _small_batch_producer(kafka)

    def group(coordinator: str, partitions: int) -> _Group:
        work = scratch / f"group-{next(groups)}"
        topic = kafka.new_topic(partitions, prefix=f"bench-members-p{partitions}")
        return _Group(kafka, coordinator, kafka.new_group() if coordinator == "broker" else f"bench-{work.name}",
                      topic, partitions, work)

    def series(key: str) -> _Series:
        if key == "queries":
            return _Series("(l) N queries in one broker group", group("broker", sizes.query_partitions),
                           kafka.producer, sizes.query_records, sizes.query_counts, max(sizes.query_counts), None)
        coordinator, name = key.split("/")
        return _Series(f"(l) {coordinator}: {MEMBER_SERIES[coordinator][name]}", group(coordinator, 1),
                       small if name in _SMALL_BATCHES else kafka.producer, sizes.records, sizes.member_counts,
                       int(name in _WITH_QUERY), sizes.poll_records)

    # the N queries first: all the query processes' first (slow) batches in one warm-up, side by side
    keys = ["queries", *(f"{coordinator}/{name}" for coordinator, by_name in MEMBER_SERIES.items() for name in by_name)]
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {key: {} for key in keys}
    setups: dict[str, list[dict[str, float]]] = {key: [] for key in keys}
    errors: dict[str, str] = {}
    say(f"(l) starting {max(sizes.member_counts)} consumer and {max(sizes.query_counts)} query member processes")
    try:
        pool = _Pool(max(sizes.member_counts), max(sizes.query_counts), scratch)
    except Exception as error:  # the bench's other figures are kept
        say(f"(l) failed: the member processes did not start: {error}")
        return {"skipped": f"the member processes did not start: {type(error).__name__}: {str(error)[:300]}"}
    try:
        say("(l) member processes up")
        for _ in range(sizes.rounds):
            for key in keys:
                if key in errors:
                    continue
                measured: dict[int, dict[str, Any]] = {}
                try:
                    setups[key].append(_series(series(key), pool, sizes, measured, say))
                except Exception as error:  # reported in the figures; the other series go on
                    errors[key] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}"
                    say(f"(l) {key}: failed: {errors[key][:200]}")
                for n, run in measured.items():
                    runs[key].setdefault(n, []).append(run)
    finally:
        pool.close()
        small.flush(10)
    return _summary({key: {n: median_run(by_n[n]) if n in by_n else {"error": errors.get(key, "not measured")}
                           for n in (sizes.query_counts if key == "queries" else sizes.member_counts)}
                     for key, by_n in runs.items()}, setups, sizes)


def _summary(measured: dict[str, dict[int, dict[str, Any]]], setups: dict[str, list[dict[str, float]]],
             sizes: MemberSizes) -> dict[str, Any]:
    """The JSON of (l): records/s by series and member count, speed-ups over one member, the N queries' runs."""
    def rates(key: str) -> dict[str, int | None]:
        return {str(n): run["throughput"]["records_per_s"] if "throughput" in run else None
                for n, run in sorted(measured[key].items())}

    def every_run() -> Iterator[tuple[str, dict[str, Any]]]:
        yield from ((f"{key}@{n}", run) for key, by_n in measured.items() for n, run in by_n.items())

    figures: dict[str, Any] = {
        "work_ms": sizes.work_ms, "work": "time.sleep per record, one record after another in every member",
        "records": sizes.records, "value_bytes": VALUE_BYTES, "partitions": 1, "max_poll_records": sizes.poll_records,
        "rounds": sizes.rounds}
    for coordinator, by_name in MEMBER_SERIES.items():
        figures[coordinator] = {name: rates(f"{coordinator}/{name}") for name in by_name}
    figures["speedup"] = {coordinator: {name: _speedups(figures[coordinator][name]) for name in by_name}
                          for coordinator, by_name in MEMBER_SERIES.items()}
    figures["runs"] = {coordinator: {name: {str(n): run for n, run in sorted(measured[f"{coordinator}/{name}"].items())}
                                     for name in by_name} for coordinator, by_name in MEMBER_SERIES.items()}
    figures["queries"] = {str(n): _query_figures(run) for n, run in sorted(measured["queries"].items())}
    figures["queries_run"] = {"partitions": sizes.query_partitions, "records": sizes.query_records,
                              "coordinator": "broker", "options": "the source's defaults, checkpointLocation",
                              "speedup": _speedups({n: q.get("records_per_s") for n, q in figures["queries"].items()})}
    figures["setup_s"] = setups
    figures["errors"] = {key: run["error"] for key, run in every_run() if "error" in run}
    figures["exactly_once"] = {
        "duplicates": sum(run.get("duplicates", 0) for _, run in every_run()),
        "missing": sum(run.get("missing", 0) for _, run in every_run()),
        "unacknowledged_runs": [key for key, run in every_run() if run.get("acknowledged_all") is False]}
    return figures


def _speedups(rates: dict[str, int | None]) -> dict[str, float | None]:
    """Each rate over the first (one member's)."""
    first = next(iter(rates.values()), None)
    return {n: round(r / first, 2) if r is not None and first else None for n, r in rates.items()}


def _query_figures(run: dict[str, Any]) -> dict[str, Any]:
    """The N queries' run as the issue asks for it: records/s, the split, duplicates and missing; the run beside."""
    if "throughput" not in run:
        return {"records_per_s": None, "error": run.get("error")}
    return {"records_per_s": run["throughput"]["records_per_s"], "split": run["split"],
            "duplicates": run["duplicates"], "missing": run["missing"], "acknowledged_all": run["acknowledged_all"],
            "run": run}
