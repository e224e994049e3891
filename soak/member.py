"""An independent member of the share group: a plain ShareConsumer outside Spark, for a while.

KIP-932 promises at-least-once across members, so records this member ACCEPTs are not lost even
though they never reach the query's sink. What counts is what the broker confirmed: the
acknowledgement-commit callback reports every ACCEPT the broker answered, whichever call sent it
(commit_sync, a later poll, or close), so it is the member's record of what it accepted. An ACCEPT
whose answer was an error or never came (the share-partition's leader killed under it) may still have
been applied: such records are kept apart, as the member's records of unknown outcome.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaException, ShareConsumer, TopicPartition

from soak.producer import record_number

__all__ = ["IndependentMember"]

log = logging.getLogger(__name__)


class IndependentMember(threading.Thread):
    def __init__(self, config: dict[str, Any], topic: str, seconds: float):
        super().__init__(name="soak-independent-member", daemon=True)
        self._config = {**config, "share.acknowledgement.mode": "explicit", "max.poll.records": 50}
        self._topic, self._seconds = topic, seconds
        self._polled: dict[tuple[int, int], int] = {}  # (partition, offset) -> record number
        self._accepted: set[int] = set()
        self._sent: set[int] = set()  # record numbers whose ACCEPT went out, answered or not
        self._lock = threading.Lock()

    @property
    def accepted(self) -> set[int]:
        """Record numbers whose ACCEPT the broker confirmed."""
        with self._lock:
            return set(self._accepted)

    @property
    def unanswered(self) -> set[int]:
        """Record numbers whose ACCEPT went out without the broker confirming it: applied or not, nobody knows."""
        with self._lock:
            return self._sent - self._accepted

    def _on_commit(self, offsets: dict[TopicPartition, set[int]], error: KafkaException | None) -> None:
        if error is not None:
            return
        with self._lock:
            for tp, acked in offsets.items():
                positions = ((tp.partition, offset) for offset in acked)
                self._accepted.update(self._polled[p] for p in positions if p in self._polled)

    def run(self) -> None:
        consumer = ShareConsumer(self._config)
        consumer.set_acknowledgement_commit_callback(self._on_commit)
        consumer.subscribe([self._topic])
        deadline = time.monotonic() + self._seconds
        try:
            while time.monotonic() < deadline:
                try:
                    messages = [m for m in consumer.poll(0.25) if m.error() is None]
                    for message in messages:
                        number = record_number(message.value())
                        self._polled[(message.partition(), message.offset())] = number
                        consumer.acknowledge(message)
                        with self._lock:
                            self._sent.add(number)
                    if messages:
                        consumer.commit_sync(10)
                except KafkaException as error:  # a fault the soak injected; the broker redelivers
                    log.info("independent member: %s", error)
        finally:
            consumer.close()
            self._polled.clear()  # the last acknowledgement callback came with close: keep only what was accepted
