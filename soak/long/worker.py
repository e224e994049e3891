"""The delta lane's worker: a DeltaShareConsumer in a process of its own, as an application runs one.

    python -m soak.long.worker CONFIG_JSON TOPIC OUT

Joins the Delta group in CONFIG_JSON (``group.location`` and the group's settings), ACCEPTs every
record it gets and commits after each poll; the numbers of the records a commit settled are
appended to OUT, one a line, flushed per commit, so the soak reads what the worker took while it
runs (soak.long.tally.WorkerTally). A record whose partition the commit reports failed is not
written: the group hands it out again. SIGTERM ends the loop after the current poll and closes the
consumer (it leaves the group); an exception ends the process with its traceback on stderr, and the
soak starts another.

A commit that raises leaves its acknowledgements staged, and closing the consumer (as the ``with``
block does on the way out) settles them: the records may be ACCEPTed after all, and never come
back. Their numbers are written with a ``?`` before them, taken with an unknown outcome, which the
soak's accounting treats as it treats an independent member's unanswered ACCEPTs.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import IO

from sharegroup_source import DeltaShareConsumer
from sharegroup_source.coordinators.delta.consumer import DeltaMessage
from soak.producer import record_number

__all__ = ["POLL_S", "UNKNOWN_MARK", "main", "take"]

#: A poll's wait for records: also how long a SIGTERM waits for the loop to notice it.
POLL_S = 0.5
#: Before the number of a record whose commit raised: taken, or not, nobody knows.
UNKNOWN_MARK = "?"


def take(consumer: DeltaShareConsumer, out: IO[str], stop: threading.Event) -> None:
    """Poll, ACCEPT, commit until ``stop``; write the numbers each commit settled."""
    while not stop.is_set():
        messages = consumer.poll(POLL_S)
        if not messages:
            continue
        for message in messages:
            consumer.acknowledge(message)
        try:
            results = consumer.commit_sync()
        except Exception:
            _write(out, messages, UNKNOWN_MARK)
            raise
        refused = {(tp.topic, tp.partition) for tp, error in results.items() if error is not None}
        _write(out, [m for m in messages if (m.topic(), m.partition()) not in refused])


def _write(out: IO[str], messages: list[DeltaMessage], mark: str = "") -> None:
    out.write("".join(f"{mark}{record_number(m.value() or b'')}\n" for m in messages))
    out.flush()


def main(argv: list[str]) -> int:
    config, topic, out_path = json.loads(argv[0]), argv[1], argv[2]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with DeltaShareConsumer(config) as consumer, open(out_path, "a", encoding="utf-8") as out:
        consumer.subscribe([topic])
        take(consumer, out, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
