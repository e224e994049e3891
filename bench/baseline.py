"""Figure (a): a plain ``confluent_kafka.ShareConsumer`` loop, the ceiling the source is held to.

Explicit acknowledgement and one ``commit_sync`` per poll, like the source, with the same
``max.poll.records``: what remains between this and the source is the source's own work plus
Spark's. The loop touches every value so the records are really read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import ShareConsumer

from bench.measure import Throughput
from sharegroup_testing.kafka_peers import KafkaUnderTest

__all__ = ["plain_share_consumer"]


def plain_share_consumer(kafka: KafkaUnderTest, topic: str, records: int, timeout_s: float,
                         max_poll_records: int = 10_000, group: str | None = None,
                         committed: Callable[[list[int], float], None] | None = None,
                         stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Read ``records`` records of ``topic`` on a fresh share group (or ``group``), or until ``stop()``;
    steady-state figures."""
    consumer = ShareConsumer(kafka.config(**{"group.id": group or kafka.new_group(),
                                             "share.acknowledgement.mode": "explicit",
                                             "max.poll.records": max_poll_records}))
    consumer.subscribe([topic])
    seen: set[tuple[int, int]] = set()
    polls: list[int] = []
    ack_failures = payload_bytes = 0
    steady_from: float | None = None
    steady_records = 0
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < records and time.monotonic() < deadline and not (stop is not None and stop()):
            fresh = 0
            produced: list[int] = []
            for message in consumer.poll(1.0):
                if message.error() is not None:
                    continue
                consumer.acknowledge(message)
                payload_bytes += len(message.value() or b"")
                key = (message.partition(), message.offset())
                fresh += key not in seen
                seen.add(key)
                if committed is not None:
                    produced.append(message.timestamp()[1])
            if not fresh:
                continue
            results = consumer.commit_sync(30)
            ack_failures += sum(error is not None for error in results.values())
            if committed is not None:
                committed(produced, time.time())
            polls.append(fresh)
            if steady_from is None:
                steady_from = time.perf_counter()  # the first poll paid for joining the group
            else:
                steady_records += fresh
        ended = time.perf_counter()
    finally:
        consumer.close()
    seconds = ended - steady_from if steady_from is not None else 0.0
    return {
        "throughput": Throughput(steady_records, seconds, complete=len(seen) >= records).as_dict(),
        "records_seen": len(seen), "polls": len(polls), "max_records_per_poll": max(polls, default=0),
        "ack_failures": ack_failures, "payload_bytes": payload_bytes,
    }
