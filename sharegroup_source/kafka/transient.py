"""Which Kafka errors are a cluster in motion, and asking again for them within a bound.

A broker killed or restarted, a leader elected, a coordinator moving: for some seconds requests
fail with errors that go away by themselves. Each call that meets one asks again, for up to
``TRANSIENT_BOUND_S``, so the query waits out an election instead of failing; past the bound, or
for any other error, it fails with one error that names ``bootstrap.servers``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.client_log import KAFKA_LOGGER
from sharegroup_source.kafka.errors import is_refusal

__all__ = ["TRANSIENT_BOUND_S", "TRANSIENT_ERRORS", "is_transient", "retry_transient"]

T = TypeVar("T")

#: Errors of a cluster in motion, not of a wrong request: a leader moving (an election bumps the leader
#: epoch, so a request that met the old epoch is answered FENCED_LEADER_EPOCH, which librdkafka does not
#: mark retriable), a node down or restarting, a request cut off with its connection, too few replicas in
#: sync for a moment. Spark's Kafka source retries these too.
TRANSIENT_ERRORS = frozenset({
    KafkaError._UNKNOWN_PARTITION, KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
    KafkaError._DESTROY_BROKER, KafkaError._WAIT_COORD, KafkaError._NODE_UPDATE, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT, KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NETWORK_EXCEPTION, KafkaError.BROKER_NOT_AVAILABLE, KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.KAFKA_STORAGE_ERROR, KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
})
#: How long a call keeps retrying transient errors: a killed broker is fenced and its leaderships move
#: within its session timeout (9 s by default) plus an election; a minute covers that several times over,
#: and a cluster down longer than that gets one clear error instead of a hang.
TRANSIENT_BOUND_S = 60.0


def is_transient(error: KafkaError) -> bool:
    """Whether ``error`` may go away by asking again: never a fatal one, nor a refusal (a missing ACL is marked
    retriable, yet stays missing until an administrator grants it)."""
    return not error.fatal() and not is_refusal(error) and (error.retriable() or error.code() in TRANSIENT_ERRORS)


def retry_transient(call: Callable[[], T], what: str, servers: str, bound_s: float = TRANSIENT_BOUND_S,
                    before_retry: Callable[[], None] | None = None, clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep,
                    explain: Callable[[KafkaError], Exception | None] | None = None) -> T:
    """``call()``, asked again while it fails with a transient Kafka error, for up to ``bound_s``.

    ``before_retry`` runs before each new attempt: a client that keeps a stale leader epoch must be
    replaced, not asked again (librdkafka's admin client answered FENCED_LEADER_EPOCH for a whole
    minute after a leader was killed, without refreshing its metadata).

    Any other Kafka error becomes ``explain(error)`` when that says what it is (a refusal, see
    :mod:`sharegroup_source.kafka.errors`), else, like a transient one that outlasts the bound, one
    ClusterError: ``cannot <what> at bootstrap.servers=<servers>: ...``.
    """
    deadline = clock() + bound_s
    pause_s, failures = 0.1, 0
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0]
            if not isinstance(error, KafkaError):
                raise
            if not is_transient(error):
                explained = explain(error) if explain is not None else None
                raise explained or ClusterError(f"cannot {what} at bootstrap.servers={servers}: {error.str()}") \
                    from None
            failures += 1
            if clock() + pause_s > deadline:
                raise ClusterError(f"cannot {what} at bootstrap.servers={servers}: still failing after "
                                   f"{bound_s:.0f}s ({failures} attempts): {error.str()}") from None
            if failures == 1:
                logging.getLogger(KAFKA_LOGGER).info("%s: %s; asking again for up to %.0f s", what, error.str(),
                                                     bound_s)
            sleep(pause_s)
            pause_s = min(pause_s * 2, 2.0)
            if before_retry is not None:
                before_retry()
