"""A plain Python worker of a Delta-coordinated share group, in a process of its own, for the tests.

Arguments: the DeltaShareConsumer config as JSON, the topic, and a mode:

- ``share OUT``: subscribes, says ``joined`` and waits for a line on stdin (so the test decides
  when it starts taking records), then polls, ACCEPTs and commits until stdin gives another line
  or ends; what each commit accepted goes to OUT as ``partition value-hex delivery-count`` lines.
  It closes (leaves the group) before it exits.
- ``hold``: polls until it holds records, ACCEPTs them without committing, prints them as JSON
  ``[[partition, offset, value-hex, delivery-count], ...]`` and waits for a line on stdin (the test
  kills or stops it meanwhile); then commits, prints the results as JSON ``{partition: error name
  or null}``, and closes.

Tests start it with :func:`spawn`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from sharegroup_source import DeltaShareConsumer

POLL_TIMEOUT_S = 0.5


def spawn(config: dict[str, Any], topic: str, mode: str, *args: str) -> subprocess.Popen:
    """This script as a child process, talking over its stdin and stdout; its stderr is the test's."""
    return subprocess.Popen([sys.executable, __file__, json.dumps(config), topic, mode, *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])


def share(consumer: DeltaShareConsumer, out_path: str) -> None:
    print("joined", flush=True)
    sys.stdin.readline()
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    with open(out_path, "a") as out:
        while not stop.is_set():
            messages = consumer.poll(POLL_TIMEOUT_S)
            for message in messages:
                consumer.acknowledge(message)
            failed = {(tp.topic, tp.partition) for tp, error in consumer.commit_sync().items() if error is not None}
            out.writelines(f"{m.partition()} {m.value().hex()} {m.delivery_count()}\n" for m in messages
                           if (m.topic(), m.partition()) not in failed)
            out.flush()


def hold(consumer: DeltaShareConsumer) -> None:
    messages = []
    while not messages:
        messages = consumer.poll(POLL_TIMEOUT_S)
    for message in messages:
        consumer.acknowledge(message)
    print(json.dumps([[m.partition(), m.offset(), m.value().hex(), m.delivery_count()] for m in messages]),
          flush=True)
    sys.stdin.readline()
    results = consumer.commit_sync()
    print(json.dumps({tp.partition: None if error is None else error.args[0].name() for tp, error in results.items()}),
          flush=True)


def main() -> None:
    config, topic, mode = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    with DeltaShareConsumer(config) as consumer:
        consumer.subscribe([topic])
        if mode == "share":
            share(consumer, sys.argv[4])
        else:
            hold(consumer)


if __name__ == "__main__":
    main()
