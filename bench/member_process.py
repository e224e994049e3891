"""One member of a share group in a process of its own, for the members figures (``bench.members``).

    python -m bench.member_process consumer|query

A ``consumer`` process hosts one plain member at a time: a ``DeltaShareConsumer`` (a Delta group) or
confluent-kafka's ``ShareConsumer`` in explicit acknowledgement mode (a broker group). A ``query`` process is
a Spark application of its own (``local_spark()``, the bench's ``local[2]`` session, started once) running
one ``format("sharegroup")`` query at a time. The process outlives its members: the bench starts its
processes once and has them join group after group, so no series pays for Python's imports or a JVM's start.

Every member does the same work on every record (but the warm-up's, numbered below 0), one record after
another: ``work_ms`` of ``time.sleep``, a stand-in for I/O-bound work (a lookup, a call to a service) that
leaves the cores free, so a member's rate is set by its work and by what the group hands it, not by the
machine's two cores. A consumer works in its poll loop (poll, work and acknowledge each record,
``commit_sync``); a query in ``foreachBatch`` on its driver, one record after another as well, after which
Spark commits and the source settles the batch (its ``checkpointLocation`` option: at Spark's commit). Work
in a UDF or ``mapInArrow`` would run in Spark's tasks, two at a time on ``local[2]`` where a batch has two
tasks: more than one member's worth of work, which would not compare with a consumer's.

The parent talks to it in JSON lines: commands on stdin, answers and reports on stdout, each line prefixed
with ``REPORT_PREFIX`` (the JVM of a query process writes to the same stdout). Answered once the process is
up: ``{"ready": true}``. Then:

- ``{"op": "join", "kind": "delta" | "broker", "config": {...}, "topic": T, "work_ms": W}`` (consumer) or
  ``{"op": "join", "options": {...}, "checkpoint": PATH, "work_ms": W}`` (query): ``{"joined": true}``;
- ``{"op": "pause"}``: ``{"paused": true}`` once a consumer has finished the poll under way (it then polls no
  more), at once from a query, which then holds its next batch with records and says ``{"holding": n}``;
- ``{"op": "go"}``: the member polls (a query: works its batch) again;
- ``{"op": "leave"}``: the member closes (a query stops): ``{"left": true}``;
- reported while joined: ``{"done": [numbers], "failed": [numbers], "at": T}`` per commit (a consumer: the
  record numbers, their keys, whose acknowledgement succeeded and those whose failed) or per batch (a query:
  what foreachBatch worked on), ``at`` the ``time.monotonic()`` after it (one clock for every process of the
  machine); ``{"error": ...}`` when the member fails.

EOF on stdin: the member leaves, and the process exits.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["REPORT_PREFIX", "main"]

#: Marks the protocol's lines on stdout.
REPORT_PREFIX = "@member "
#: A consumer's poll timeout: how long an idle member waits before it looks at the stop flag again.
_POLL_S = 0.1
_printing = threading.Lock()


def _report(**message: Any) -> None:
    """One protocol line on stdout (the consumer loop and Spark's foreachBatch thread print beside the main one)."""
    with _printing:
        sys.stdout.write(REPORT_PREFIX + json.dumps(message) + "\n")
        sys.stdout.flush()


def _failure(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".strip()[:2000]


class _Consumer:
    """A plain member in a thread of its own, which creates, uses and closes it (neither client is thread-safe)."""

    def __init__(self, command: dict[str, Any]):
        self._command = command
        self._stop = threading.Event()
        self._joined = threading.Event()
        self._pause = threading.Event()
        self._go = threading.Event()
        self._thread = threading.Thread(target=self._run, name="member", daemon=True)
        self._thread.start()
        self._joined.wait()

    def _open(self) -> Any:
        kind, config = self._command["kind"], self._command["config"]
        if kind == "delta":
            from sharegroup_source import DeltaShareConsumer

            return DeltaShareConsumer(config)
        from confluent_kafka import ShareConsumer

        return ShareConsumer({**config, "share.acknowledgement.mode": "explicit"})

    def _run(self) -> None:
        work_s = self._command["work_ms"] / 1000
        try:
            consumer = self._open()
        except Exception as error:  # the join's answer says why
            _report(joined=False, error=_failure(error))
            self._joined.set()
            return
        try:
            consumer.subscribe([self._command["topic"]])
            _report(joined=True)
            self._joined.set()
            while not self._stop.is_set():
                if self._pause.is_set():  # between polls: the member holds nothing
                    self._pause.clear()
                    _report(paused=True)
                    while not (self._go.wait(_POLL_S) or self._stop.is_set()):
                        pass
                    self._go.clear()
                    continue
                records = [m for m in consumer.poll(_POLL_S) if m.error() is None]
                if not records:
                    continue
                for message in records:
                    if int(message.key()) >= 0:
                        time.sleep(work_s)
                    consumer.acknowledge(message)
                lost = {(tp.topic, tp.partition) for tp, error in consumer.commit_sync(30).items() if error is not None}
                _report(done=[int(m.key()) for m in records if (m.topic(), m.partition()) not in lost],
                       failed=[int(m.key()) for m in records if (m.topic(), m.partition()) in lost],
                       at=time.monotonic())
        except Exception as error:  # the parent fails the run with it
            _report(error=_failure(error))
        finally:
            self._joined.set()
            consumer.close()

    def pause(self) -> None:
        """Stop polling after the poll under way, answered ``paused``."""
        self._pause.set()

    def go(self) -> None:
        self._go.set()

    def leave(self) -> None:
        self._stop.set()
        self._thread.join()


class _Query:
    """One format("sharegroup") query of this process's SparkSession, its work in foreachBatch."""

    def __init__(self, spark: Any, command: dict[str, Any]):
        work_s = command["work_ms"] / 1000
        self._leaving = False
        self._paused = False
        self._go = threading.Event()

        def each_batch(frame: Any, _epoch: int) -> None:
            numbers = [int(row[0]) for row in frame.select(frame.key.cast("string")).collect()]
            if self._paused and numbers:  # the run's first batch, acquired: it waits with the paused consumers
                _report(holding=len(numbers))
                self._go.wait()
                self._paused = False
            for number in numbers:
                if number >= 0:
                    time.sleep(work_s)
            _report(done=numbers, failed=[], at=time.monotonic())

        self._query = (spark.readStream.format("sharegroup").options(**command["options"]).load()
                       .writeStream.foreachBatch(each_batch).option("checkpointLocation", command["checkpoint"])
                       .trigger(processingTime="0 seconds").start())
        threading.Thread(target=self._watch, name="query-watch", daemon=True).start()
        _report(joined=True)

    def _watch(self) -> None:
        """A query that fails while it runs is reported at once: the parent would otherwise wait out its timeout."""
        try:
            self._query.awaitTermination()
        except Exception as error:
            if not self._leaving:
                _report(error=_failure(error))

    def pause(self) -> None:
        """Hold the next batch that has records (answered ``holding``) until ``go``; answered ``paused`` now: an
        idle query has no batch under way."""
        self._go.clear()
        self._paused = True
        _report(paused=True)

    def go(self) -> None:
        self._go.set()

    def leave(self) -> None:
        self._leaving = True
        self._go.set()
        self._query.stop()


def main(role: str) -> None:
    """Serve the parent's commands on stdin until it hangs up; see the module's docstring."""
    spark = None
    if role == "query":
        from sharegroup_testing.spark import local_spark

        spark = local_spark()
    else:  # what a member imports, before the parent counts this process ready
        import confluent_kafka  # noqa: F401

        import sharegroup_source  # noqa: F401
    _report(ready=True)
    member: _Consumer | _Query | None = None
    joins: dict[str, Callable[[dict[str, Any]], _Consumer | _Query]] = {
        "consumer": _Consumer, "query": lambda command: _Query(spark, command)}
    try:
        for line in sys.stdin:
            command = json.loads(line)
            try:
                if command["op"] == "join" and member is None:
                    member = joins[role](command)
                elif command["op"] in ("pause", "go") and member is not None:
                    getattr(member, command["op"])()
                elif command["op"] == "leave" and member is not None:
                    member.leave()
                    member = None
                    _report(left=True)
                else:
                    _report(error=f"unexpected command {command['op']!r} (member joined: {member is not None})")
            except Exception as error:  # answered, so the parent need not wait out its timeout; the trace to the log
                traceback.print_exc()
                _report(error=_failure(error))
    finally:
        if member is not None:
            member.leave()
        if spark is not None:
            spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
