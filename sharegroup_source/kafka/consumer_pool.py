"""Plain consumers kept open across reads, one pool per process (~ Spark's Kafka consumer cache).

A replay, and every batch of the Delta coordinator, reads offset ranges on Spark's executors.
A consumer per task paid its bootstrap, metadata and group-coordinator round trips and a close
on every task: on Apache Kafka about twice a task's whole read. Spark reuses a Python worker
for the tasks of an executor, so a module-level pool lives across tasks, as Spark's own Kafka
source keeps its consumers per executor, keyed by their configuration.

Fewer closes matter twice: on the embedded broker any client connection closing on a node
drops every share session on that node. So a consumer is closed only when it is broken, when
the pool is over its bound, or when the process exits; never per task.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException

from sharegroup_source.kafka.settings import consumer_config

__all__ = ["DEFAULT_CAPACITY", "IDLE_TIMEOUT_S", "ConsumerPool", "consumer_pool"]

#: Idle consumers a process keeps. A Python worker runs one task at a time, so a query needs
#: one; the rest is room for other queries (other clusters or settings) in the same worker.
DEFAULT_CAPACITY = 8
#: A consumer idle this long is closed at the pool's next use (Spark's Kafka consumer cache
#: times out after 5 minutes too): a worker keeps no connections to a cluster its queries left.
IDLE_TIMEOUT_S = 300.0

_Key = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _Idle:
    key: _Key
    consumer: Consumer
    since: float  #: when it was given back (the pool's clock)


def _open(config: Mapping[str, Any]) -> Consumer:
    return Consumer(consumer_config(config))  # logs: sharegroup_source.kafka


class ConsumerPool:
    """Idle consumers by configuration: the least recently returned is closed first beyond ``capacity``,
    and any idle longer than ``idle_timeout_s`` at the pool's next use.

    ``take`` hands a consumer to one borrower at a time (a Consumer must not be read from
    two threads at once); ``give_back`` returns it, or closes it when the borrower saw it fail,
    so the next read starts on a fresh client instead of a broken one. ``factory`` builds a
    consumer from a configuration; ``clock`` is the time source (seconds, monotonic).
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY, idle_timeout_s: float = IDLE_TIMEOUT_S,
                 factory: Callable[[Mapping[str, Any]], Consumer] = _open, clock: Callable[[], float] = time.monotonic):
        if capacity < 1:
            raise ValueError(f"a consumer pool holds at least one consumer, got capacity={capacity}")
        self._capacity = capacity
        self._idle_timeout_s = idle_timeout_s
        self._factory = factory
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: OrderedDict[int, _Idle] = OrderedDict()  # by id(consumer), least recently returned first

    def take(self, config: Mapping[str, Any]) -> Consumer:
        """An idle consumer built from ``config``, or a new one."""
        key = _key(config)
        with self._lock:
            stale = self._expire()
            # the most recently returned: its connections are the warmest, and the others age out
            found = next((ident for ident, idle in reversed(self._idle.items()) if idle.key == key), None)
            taken = self._idle.pop(found).consumer if found is not None else None
        for closing in stale:
            _close(closing)
        return taken if taken is not None else self._factory(config)  # a new client takes milliseconds: unlocked

    def give_back(self, config: Mapping[str, Any], consumer: Consumer, broken: bool = False) -> None:
        """Keep ``consumer`` for the next read of ``config``; close it instead if ``broken``."""
        closing = [consumer] if broken else []
        with self._lock:
            closing += self._expire()
            if not broken:
                self._idle[id(consumer)] = _Idle(_key(config), consumer, self._clock())
                while len(self._idle) > self._capacity:
                    closing.append(self._idle.popitem(last=False)[1].consumer)
        for each in closing:
            _close(each)

    def _expire(self) -> list[Consumer]:
        """Take out the consumers idle past the timeout (the caller holds the lock, and closes them after)."""
        oldest = self._clock() - self._idle_timeout_s
        stale = [ident for ident, idle in self._idle.items() if idle.since < oldest]
        return [self._idle.pop(ident).consumer for ident in stale]

    def idle(self) -> int:
        """How many consumers wait for a borrower."""
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        """Close every idle consumer (borrowed ones are their borrowers' to give back)."""
        with self._lock:
            idle = [each.consumer for each in self._idle.values()]
            self._idle.clear()
        for consumer in idle:
            _close(consumer)

    def _forget(self) -> None:
        """In a forked child: the parent's clients have no threads here, and closing one would hang. Freeing one
        destroys it, which crashed a child that ``subprocess`` forked (a segmentation fault before the exec), so
        they are kept, never to be used: the child runs without them."""
        self._lock = threading.Lock()
        _INHERITED.extend(idle.consumer for idle in self._idle.values())
        self._idle = OrderedDict()


def _key(config: Mapping[str, Any]) -> _Key:
    return tuple(sorted((str(k), str(v)) for k, v in config.items()))


def _close(consumer: Consumer) -> None:
    with contextlib.suppress(KafkaException):  # a broken client may refuse an orderly close; evicting it goes on
        consumer.close()


#: a forked child's references to its parent's clients, which it must neither use nor free
_INHERITED: list[Consumer] = []
_POOL = ConsumerPool()
atexit.register(_POOL.close)
os.register_at_fork(after_in_child=_POOL._forget)


def consumer_pool() -> ConsumerPool:
    """The process's one pool: every reader of the process shares its consumers."""
    return _POOL
