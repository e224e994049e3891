"""The soak's producer: numbered records at a steady rate, for as long as the soak injects faults.

Only records whose delivery the broker confirmed count as produced. The producer is idempotent,
so retries across a broker node going down never write a number twice into the log. What was
delivered is kept at a byte per record (a NumberSet), so hours of producing cost the soak's Python
megabytes, not the hundreds a set of ints would take.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from soak.numbers import NumberSet

__all__ = ["NumberedProducer", "record_number"]


def record_number(value: bytes) -> int:
    return int(value.decode())


class NumberedProducer(threading.Thread):
    """Writes records ``0, 1, 2, ...`` round-robin over the topic's partitions, ``rate`` per second."""

    def __init__(self, config: dict[str, Any], topic: str, partitions: int, rate: int):
        super().__init__(name="soak-producer", daemon=True)
        self._producer = Producer({**config, "enable.idempotence": True, "linger.ms": 5})
        self._topic, self._partitions, self._rate = topic, partitions, rate
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._delivered = NumberSet()
        self._sent = 0
        self.failed = 0  # records whose delivery failed for good; they are not counted as produced

    @property
    def delivered(self) -> set[int]:
        with self._lock:
            return self._delivered.to_set()

    @property
    def sent(self) -> int:
        """Records handed to the client so far: every number below it was sent (delivered, failed or in flight)."""
        return self._sent

    def delivered_numbers(self) -> NumberSet:
        """What was delivered, as it is now (a copy)."""
        with self._lock:
            return self._delivered.copy()

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        with self._lock:
            if error is None:
                self._delivered.add(record_number(message.value()))
            else:
                self.failed += 1

    def run(self) -> None:
        tick = 0.1
        per_tick = max(1, round(self._rate * tick))
        next_tick = time.monotonic()
        while not self._stop_event.is_set():
            for _ in range(per_tick):
                number = str(self._sent).encode()
                self._producer.produce(self._topic, value=number, key=number, partition=self._sent % self._partitions,
                                       on_delivery=self._on_delivery)
                self._sent += 1
            self._producer.poll(0)
            next_tick += tick
            self._stop_event.wait(max(0.0, next_tick - time.monotonic()))

    def finish(self, timeout_s: float = 120.0) -> None:
        """Stop producing and wait until every record sent so far is delivered or has failed."""
        self._stop_event.set()
        self.join()
        self._producer.flush(timeout_s)
