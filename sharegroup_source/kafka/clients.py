"""Configuration every Kafka client of the connector gets: quiet logs, and only its own kind of settings.

librdkafka writes its log to stderr by itself: an unreachable bootstrap server printed about
19 ``FAIL ... Connection refused`` lines a second until the one clear error 30 s later, and every
run printed a ``CONFWARN`` (an admin client given the consumer's ``group.id``) and the share
consumer's "Preview" notice at WARNING. Here the clients' log goes through Python ``logging``
under the ``sharegroup_source.kafka`` logger (librdkafka's ``logger`` setting), complaints about
one broker collapse to one line per broker per 30 s with a count, the preview notice is shown
once at INFO, and admin clients and producers get no consumer-only settings.

Turn client debug logs on with ``kafka.debug`` (librdkafka's debug contexts, for example
``broker,protocol,cgrp``): the logger then passes DEBUG, to stderr unless a handler is
configured. The clients run in Spark's driver-side Python worker, where nobody configures
logging, so the option is the one switch a user can reach.

Java-client settings (``sasl.jaas.config``, JKS stores) are refused with their librdkafka
equivalent named, because the Kafka client here is librdkafka, not the Java client.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

from sharegroup_source.errors import ClusterError, OptionError
from sharegroup_source.kafka.errors import is_refusal

__all__ = ["KAFKA_LOGGER", "REPEAT_INTERVAL_S", "TRANSIENT_BOUND_S", "TRANSIENT_ERRORS", "ClientLog", "admin_config",
           "client_log", "consumer_config", "is_transient", "producer_config", "refuse_java_settings",
           "retry_transient"]

T = TypeVar("T")

KAFKA_LOGGER = "sharegroup_source.kafka"
#: How long further complaints about one broker are counted instead of printed.
REPEAT_INTERVAL_S = 30.0
_PREVIEW = '"Preview"'
#: "FAIL [rdkafka#consumer-1] [thrd:...]: sasl_ssl://host:9092/1: Connect to ..." -> host:9092, and
#: "... [thrd:GroupCoordinator]: GroupCoordinator: host:9092: Connect to ..." -> host:9092 as well
_BROKER = re.compile(r"\]: (?:GroupCoordinator: )?(?:[A-Za-z_]+://)?(?P<broker>[\w.\-]+:\d+)(?:/\w*)?: ")
#: librdkafka settings only consumers read: an admin client or producer given one prints a CONFWARN.
CONSUMER_ONLY = frozenset({
    "group.id", "group.instance.id", "partition.assignment.strategy", "session.timeout.ms",
    "heartbeat.interval.ms", "group.protocol.type", "group.protocol", "group.remote.assignor",
    "coordinator.query.interval.ms", "max.poll.interval.ms", "max.poll.records", "enable.auto.commit",
    "auto.commit.enable", "auto.commit.interval.ms", "enable.auto.offset.store", "queued.min.messages",
    "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.queue.backoff.ms", "fetch.message.max.bytes",
    "max.partition.fetch.bytes", "fetch.max.bytes", "fetch.min.bytes", "fetch.error.backoff.ms",
    "offset.store.method", "isolation.level", "enable.partition.eof", "check.crcs", "auto.offset.reset",
    "offset.store.path", "offset.store.sync.interval.ms", "consume.callback.max.messages",
    "share.acknowledgement.mode"})


@dataclass
class _Quiet:
    since: float
    count: int = 0


class ClientLog:
    """Where librdkafka's log lines go (the clients' ``logger`` setting): a Python logger, less the storms.

    The first complaint (WARNING or worse) about a broker is logged; more about the same broker
    within ``interval_s`` are counted, and the next one after that says how many were held back.
    ``clock`` is the time source (seconds, monotonic).
    """

    def __init__(self, logger: logging.Logger | None = None, interval_s: float = REPEAT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic):
        self._logger = logger or logging.getLogger(KAFKA_LOGGER)
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()  # clients of many threads log here; never called from a signal handler
        self._quiet: dict[str, _Quiet] = {}
        self._preview_shown = False

    def log(self, level: int, msg: str, *args: Any) -> None:
        """librdkafka's call: ``logger.log(level, "%s [%s] %s", facility, client, text)``."""
        text = msg % args if args else msg
        if _PREVIEW in text:
            with self._lock:
                shown, self._preview_shown = self._preview_shown, True
            if not shown:
                self._logger.info("%s", text)
            return
        match = _BROKER.search(text) if level >= logging.WARNING else None
        if match is None:
            self._logger.log(level, "%s", text)
            return
        broker, now = match["broker"], self._clock()
        with self._lock:
            quiet = self._quiet.get(broker)
            if quiet is not None and now - quiet.since < self._interval_s:
                quiet.count += 1
                return
            held_back = quiet.count if quiet is not None else 0
            self._quiet[broker] = _Quiet(now)
        more = f" ({held_back} more about {broker} in the last {self._interval_s:.0f}s)" if held_back else ""
        self._logger.log(level, "%s%s", text, more)


_CLIENT_LOG = ClientLog()


def client_log() -> ClientLog:
    """The process's one ClientLog, so the storm of every client about one broker collapses together."""
    return _CLIENT_LOG


def consumer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A consumer's (share or plain) configuration: ``config`` with the connector's log."""
    _follow_debug(config)
    return {**config, "logger": client_log()}


def admin_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """An admin client's configuration: ``config`` without consumer-only settings, with the connector's log."""
    _follow_debug(config)
    return {**{k: v for k, v in config.items() if k not in CONSUMER_ONLY}, "logger": client_log()}


def _follow_debug(config: Mapping[str, Any]) -> None:
    """``debug`` set: let the client's debug lines through, to stderr if logging is not configured."""
    if not str(config.get("debug", "")).strip():
        return
    logger = logging.getLogger(KAFKA_LOGGER)
    logger.setLevel(logging.DEBUG)
    if not logger.hasHandlers():  # Python's last-resort handler shows warnings only
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


def producer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A producer's configuration: the same rules as an admin client's."""
    return admin_config(config)


#: Java client settings, and what librdkafka takes instead.
_JAVA_ONLY = {
    "sasl.jaas.config": "librdkafka takes credentials as settings: kafka.sasl.username and kafka.sasl.password "
                        "(kafka.sasl.mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), or for OAUTHBEARER "
                        "kafka.sasl.oauthbearer.method=oidc with kafka.sasl.oauthbearer.client.id, "
                        "kafka.sasl.oauthbearer.client.secret and kafka.sasl.oauthbearer.token.endpoint.url",
    "ssl.truststore.location": "librdkafka reads CA certificates from a PEM file: kafka.ssl.ca.location "
                               "(keytool -exportcert -rfc turns a JKS entry into PEM)",
    "ssl.truststore.password": "a PEM CA file (kafka.ssl.ca.location) needs no password",
    "ssl.truststore.type": "librdkafka reads CA certificates from a PEM file: kafka.ssl.ca.location",
    "ssl.keystore.type": "librdkafka reads a PKCS#12 keystore (kafka.ssl.keystore.location and "
                         "kafka.ssl.keystore.password) or PEM files (kafka.ssl.certificate.location, "
                         "kafka.ssl.key.location, kafka.ssl.key.password)",
    "sasl.login.callback.handler.class": "for OAUTHBEARER use kafka.sasl.oauthbearer.method=oidc with "
                                         "kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret "
                                         "and kafka.sasl.oauthbearer.token.endpoint.url",
    "sasl.client.callback.handler.class": "librdkafka has no callback classes; see kafka.sasl.oauthbearer.*",
    "key.deserializer": "the source returns key and value as binary columns: cast or parse them in Spark",
    "value.deserializer": "the source returns key and value as binary columns: cast or parse them in Spark",
}
_JKS_KEYSTORE = "a JKS keystore: " + _JAVA_ONLY["ssl.keystore.type"]


def refuse_java_settings(kafka: Mapping[str, str]) -> None:
    """OptionError for the first Java-client setting among ``kafka`` (prefix removed), naming what
    librdkafka takes instead. Values are never printed: most of these carry secrets."""
    for key, value in kafka.items():
        lowered = key.lower()
        instead = _JAVA_ONLY.get(lowered)
        if instead is None and lowered == "ssl.keystore.location" and str(value).lower().endswith(".jks"):
            instead = _JKS_KEYSTORE
        if instead is not None:
            raise OptionError(f"option 'kafka.{key}' is a Java Kafka client setting; the source's Kafka client "
                              f"is librdkafka, which does not read it: {instead}")


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
