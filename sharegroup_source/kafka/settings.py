"""Every Kafka client's configuration, in one place: what the connector adds to the user's ``kafka.*``, and
librdkafka's own check of them at ``load()``.

The user's settings reach five kinds of client: the share consumer (a broker-coordinated group's member), the
plain consumer that reads offsets back (replays, and every batch of coordinator=delta), admin clients,
producers, and kafka-python's client of the share-group admin protocol (:func:`kafka_python_config`). Nothing
outside this module writes a librdkafka key (``tests/test_public_names.py`` holds it);
``kafka/java_settings.py`` translates the user's own Java properties into librdkafka's names, the user's
settings rather than the connector's. Each gets the connector's log
(:mod:`sharegroup_source.kafka.client_log`) and only its own kind of settings: an admin client given the
consumer's ``group.id`` printed a ``CONFWARN`` on every run. The option check builds the same clients the
source will build, from the same functions, without brokers: a setting a client would refuse on an executor is
refused on the driver first, naming the ``kafka.`` option; a setting librdkafka does not have is named with the
nearest one it has (:func:`librdkafka_properties`, asked of librdkafka itself).
"""

from __future__ import annotations

import ctypes
import difflib
import functools
import re
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, ShareConsumer, cimpl

from sharegroup_source.errors import OptionError
from sharegroup_source.kafka.client_log import client_log, follow_debug
from sharegroup_source.redaction import REDACTED, is_scrubbed, is_secret

__all__ = ["CONSUMER_ONLY", "MAX_RECORD_LOCKS", "QUERY_CLIENT_ID", "REPLAY_CONSUME_BATCH", "REPLAY_GROUP_ID",
           "RESERVED", "SHARE_GROUP_ISOLATION", "admin_config", "check_kafka_settings", "consumer_config",
           "kafka_python_config", "librdkafka_properties", "producer_config", "replay_consumer_config",
           "replay_settings", "share_consumer_config", "share_settings", "with_bootstrap"]

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
#: Records per subscribed partition one poll asks for: five times Kafka's default in-flight window
#: (``share.partition.max.record.locks``, 2,000), so the group's window, not the client, bounds a poll.
MAX_RECORD_LOCKS = 10_000
#: Never the share group's id: a classic member under that id would clash with it.
REPLAY_GROUP_ID = "sharegroup-replay"
#: What a share group delivers unless its ``share.isolation.level`` says otherwise (Kafka's
#: default). A plain consumer defaults to read_committed instead, and would stop at the last
#: stable offset before records of an open transaction that the group already delivered.
SHARE_GROUP_ISOLATION = "read_uncommitted"
#: The client id a query's share consumers give the broker unless ``kafka.client.id`` names another:
#: ``describe`` shows members with it as KIND ``query`` (librdkafka's own default, ``rdkafka``, says nothing).
QUERY_CLIENT_ID = "sharegroup-source"
#: Records the offset reader takes from the client per call: one Python call per fetch, not per record.
REPLAY_CONSUME_BATCH = 10_000
#: librdkafka settings the connector owns: a user value would break acquisition or acks.
RESERVED = frozenset({"share.acknowledgement.mode", "max.poll.records", "enable.auto.commit"})
#: A share consumer refuses this consumer setting (the group's share.isolation.level decides what
#: it delivers); the replay reader takes it, to read what the group delivered.
_REPLAY_ONLY = frozenset({"isolation.level"})


def share_settings(kafka: Mapping[str, str]) -> dict[str, str]:
    """The user's ``kafka.*`` (prefix removed) a share consumer takes, and every client but the replay reader:
    all but those only the replay reader takes (a share consumer refuses ``isolation.level``)."""
    return {key: value for key, value in kafka.items() if key not in _REPLAY_ONLY}


def replay_settings(kafka: Mapping[str, str]) -> dict[str, str]:
    """The user's ``kafka.*`` the replay reader (and a log end's ListOffsets) takes: it must read what the share
    group delivered, so ``isolation.level`` is read_uncommitted (the group default) unless the user set it."""
    return {**share_settings(kafka), "isolation.level": kafka.get("isolation.level", SHARE_GROUP_ISOLATION)}


def with_bootstrap(config: Mapping[str, Any] | None, servers: str | None) -> dict[str, Any] | None:
    """``config`` with ``bootstrap.servers`` set to ``servers`` where given; None without any bootstrap server."""
    out = dict(config or {})
    if servers:
        out["bootstrap.servers"] = servers
    return out if out.get("bootstrap.servers") else None


def consumer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A consumer's (share or plain) configuration: ``config`` with the connector's log."""
    follow_debug(config)
    return {**config, "logger": client_log()}


def admin_config(config: Mapping[str, Any], *, connect_timeout_s: float | None = None) -> dict[str, Any]:
    """An admin client's configuration: ``config`` without consumer-only settings, with the connector's log.

    An admin client asks for topics by name, and librdkafka (to which it is a producer, whose default is true)
    would have a missing one created (the embedded broker creates it, as does a Kafka broker with
    ``auto.create.topics.enable``, its default): it never asks that. ``connect_timeout_s`` bounds each
    connection's setup (librdkafka's least: 1 s), so an unreachable cluster is said within the caller's bound."""
    out: dict[str, Any] = {**_without_consumer_settings(config), "allow.auto.create.topics": False}
    if connect_timeout_s is not None:
        out["socket.connection.setup.timeout.ms"] = max(1000, int(connect_timeout_s * 1000))
    return out


def producer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A producer's configuration: ``config`` without consumer-only settings, with the connector's log."""
    return _without_consumer_settings(config)


def _without_consumer_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    follow_debug(config)
    return {**{k: v for k, v in config.items() if k not in CONSUMER_ONLY}, "logger": client_log()}


def share_consumer_config(config: Mapping[str, Any], max_poll_records: int) -> dict[str, Any]:
    """The member's librdkafka configuration: the user's, with explicit acknowledgement (one poll
    is one epoch) and the poll size, under the query's client id unless the user named one. Shared with the
    option check at ``load()``."""
    return {"client.id": QUERY_CLIENT_ID, **config, "share.acknowledgement.mode": "explicit",
            "max.poll.records": max_poll_records}


def replay_consumer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The plain consumer's librdkafka configuration for ``config`` (the source's ``kafka.*``).

    Shared with the option check at ``load()``, so a setting this consumer would refuse on an
    executor is refused on the driver first. ``isolation.level`` is the user's if given (a group
    set to read_committed), else what a share group delivers by default.
    """
    return {
        "isolation.level": SHARE_GROUP_ISOLATION,
        # a reader assigns anew for each read, and the new position's first fetch waits for the previous
        # one, a long poll at the log end: each read but the first took 500 ms (the default). A read stops
        # at the log end, so long polls gain nothing here.
        "fetch.wait.max.ms": 10,
        # a read takes tens of thousands of records from one partition; once the client's fetch queue held more
        # than a read asks for at once, its next fetch waited a second (the default): a 100,000-record batch of
        # 2 partitions spent 788 ms in addBatch, 398 ms with 10 (Apache Kafka 4.3.1, 2026-11-24)
        "fetch.queue.backoff.ms": 10,
        # a fetch brings up to this much of each partition, and a read of a partition's range takes every record the
        # fetch brought into Python, also those past the range: with the default (1 MiB) a task reading 6,250
        # records of each of 8 partitions took 10,000 of each, 101 ms against 66 ms with 256 KiB, while one range of
        # 25,000 records read as fast either way (64-67 ms; Apache Kafka 4.3.1, 64 B records, 2026-11-26). A record
        # larger than this is still fetched whole: librdkafka grows the size for it.
        "max.partition.fetch.bytes": 262_144,
        # librdkafka fetches ahead until each partition's queue holds this many records (100,000 by default), far
        # past a read's last offset: its fetch thread parsed records nobody takes. One consume call's worth ahead
        # keeps the reads fed: a task of 8 partitions x 6,250 records took 41-42 ms of process CPU against 54-62,
        # one partition's 50,000 records 36-37 ms against 46-55, as fast or faster (Apache Kafka 4.3.1,
        # 64 B records, 2026-11-26; 5,000 starved the single-partition read: 76-79 ms against 50-51)
        "queued.min.messages": REPLAY_CONSUME_BATCH,
        **config,
        "group.id": REPLAY_GROUP_ID,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    }


# -- kafka-python's client of the share-group admin protocol --------------------------------------------------
def kafka_python_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """librdkafka settings (the source's ``kafka.*`` without the prefix, or ``--command-config``'s translated
    ones) as kafka-python's, for the settings a connection needs. A setting kafka-python cannot honour is an
    OptionError naming it, never a silently weaker connection."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in _NOT_FOR_KAFKA_PYTHON or key.startswith(_NOT_FOR_KAFKA_PYTHON_PREFIXES):
            continue
        if key == "ssl.endpoint.identification.algorithm":
            out["ssl_check_hostname"] = str(value).lower() != "none"
        elif key in ("sasl.mechanism", "sasl.mechanisms"):
            out["sasl_mechanism"] = str(value).upper()
        elif key == "security.protocol":
            out["security_protocol"] = str(value).upper()
        elif key in _KAFKA_PYTHON:
            out[_KAFKA_PYTHON[key]] = value
        else:
            raise OptionError(f"setting '{key}' is not supported by the share-group admin client (kafka-python); "
                              f"it takes {', '.join(sorted([*_KAFKA_PYTHON, 'security.protocol', 'sasl.mechanism']))}")
    return out


_KAFKA_PYTHON = {"bootstrap.servers": "bootstrap_servers", "client.id": "client_id",
             "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
             "ssl.ca.location": "ssl_cafile", "ssl.certificate.location": "ssl_certfile",
             "ssl.key.location": "ssl_keyfile", "ssl.key.password": "ssl_password",
             "sasl.kerberos.service.name": "sasl_kerberos_service_name"}
#: librdkafka settings that tune its own client and mean nothing to a short admin conversation.
_NOT_FOR_KAFKA_PYTHON = {
    "debug", "logger", "socket.connection.setup.timeout.ms", "socket.timeout.ms", "request.timeout.ms",
    "enable.ssl.certificate.verification", "api.version.request", "broker.address.family",
    "topic.metadata.refresh.interval.ms", "log_level", "error_cb", "statistics.interval.ms"}
_NOT_FOR_KAFKA_PYTHON_PREFIXES = ("group.", "share.", "enable.auto", "auto.", "fetch.", "max.poll", "session.",
                                  "heartbeat.", "isolation.", "queued.", "partition.", "linger", "acks",
                                  "enable.idempotence")


# -- kafka.* checked by librdkafka itself ---------------------------------------------------------
#: Settings a check client must not act on: with no brokers it connects nowhere, and an OIDC
#: token is not fetched at load() (its method is checked as "default", its other settings as given).
_NO_BROKERS = ("bootstrap.servers", "metadata.broker.list")
#: librdkafka names some settings by their alias: map them back to the user's spelling.
_ALIASES = {"request.required.acks": "acks", "topic.metadata.refresh.interval.ms": "metadata.max.age.ms"}
#: Where librdkafka names the setting, most specific first; the last is any dotted setting name.
_NAMED = (re.compile(r'[Cc]onfiguration property:? "([^"]+)"'), re.compile(r"`([^`]+)`"),
          re.compile(r"expected ([a-z_]+) property"),
          re.compile(r"\b([a-z0-9_]+(?:\.[a-z0-9_]+)+)\b"))
#: Complaints that name no setting, by a phrase of theirs.
_PHRASES = {"SASL mechanism": "sasl.mechanism"}
_QUOTED_VALUE = re.compile(r'Invalid value ".*?" for')
#: librdkafka's words for a setting it does not have.
_NO_SUCH_PROPERTY = "No such configuration property"
#: How alike a setting must be to one of librdkafka's to be suggested (difflib's ratio).
_NEAR = 0.8
#: A row of librdkafka's property table: its name, unless the row is a callback or a pointer (set by the C API).
_PROPERTY_ROW = re.compile(r"^([a-z][a-z0-9_.]*)\s+\|(?!.*see dedicated API)", re.MULTILINE)


def check_kafka_settings(share_config: Mapping[str, str], replay_config: Mapping[str, str],
                         max_poll_records: int | None, *, share_consumer: bool) -> None:
    """Build the clients the source will build (a share consumer only for the broker coordinator, and the
    plain consumer that reads offsets), without brokers, and close them: librdkafka refuses unknown
    settings, bad values and bad combinations (missing certificate files included) at creation.
    An OptionError names the ``kafka.`` option at fault and never prints a secret."""
    user = {**share_config, **replay_config}
    clients: list[tuple[Any, Mapping[str, Any]]] = [(Consumer, replay_consumer_config(replay_config))]
    if share_consumer:
        clients.insert(0, (ShareConsumer, share_consumer_config(share_config, max_poll_records or MAX_RECORD_LOCKS)))
    for client, config in clients:
        try:
            client(_without_side_effects(config)).close()
        except (KafkaException, ValueError, TypeError) as error:
            raise OptionError(_kafka_message(error, user)) from None


def _without_side_effects(config: Mapping[str, Any]) -> dict[str, Any]:
    checked = {"log_level": 0, **config}  # the real clients log their own warnings at start
    for key in _NO_BROKERS:
        checked.pop(key, None)
    if str(checked.get("sasl.oauthbearer.method", "")).lower() == "oidc":
        checked["sasl.oauthbearer.method"] = "default"
    return checked


def _kafka_message(error: Exception, user: Mapping[str, str]) -> str:
    """librdkafka's complaint, naming the ``kafka.`` option and never printing a secret value."""
    text = error.args[0].str() if isinstance(error, KafkaException) else str(error)
    text = _QUOTED_VALUE.sub("Invalid value for", text.strip())
    key = _culprit(text, user)
    if key is not None and _NO_SUCH_PROPERTY in text:
        close = difflib.get_close_matches(key, librdkafka_properties(), n=1, cutoff=_NEAR)
        hint = f"did you mean 'kafka.{close[0]}'?" if close else "librdkafka, the Kafka client, has no such setting"
        return f"unknown Kafka setting 'kafka.{key}' ({hint})"
    if key is None:
        message = f"the kafka.* options are refused by the Kafka client: {text}"
    else:
        shown = "" if is_secret(key) or key not in user or "Invalid value" not in text else f" (got {user[key]!r})"
        message = f"option 'kafka.{key}': {text}{shown}"
    for value in {v for k, v in user.items() if is_scrubbed(k) and len(v) >= 3}:
        message = message.replace(value, REDACTED)  # a secret pasted into the wrong setting, too
    return message


def _culprit(text: str, user: Mapping[str, str]) -> str | None:
    """The setting librdkafka names, in the user's spelling when the user set it."""
    for pattern in _NAMED:
        match = pattern.search(text)
        if match:
            return _as_written(_ALIASES.get(match[1], match[1]), user)
    return next((_as_written(name, user) for phrase, name in _PHRASES.items() if phrase in text), None)


def _as_written(name: str, user: Mapping[str, str]) -> str:
    return next((key for key in user if key.lower() == name.lower()), name)


@functools.cache
def librdkafka_properties() -> tuple[str, ...]:
    """The configuration properties of the librdkafka confluent-kafka runs, as librdkafka lists them itself: its
    property table (``rd_kafka_conf_properties_show``, the source of its CONFIGURATION.md) written to memory through
    ctypes, since confluent-kafka has no call that lists them, and a list of our own would drift from the library.
    Empty where the C library cannot be asked so (a C library without ``open_memstream``): a setting librdkafka
    does not have is then named without a suggestion."""
    try:
        library, libc = ctypes.CDLL(cimpl.__file__), ctypes.CDLL(None)
        libc.open_memstream.restype = ctypes.c_void_p
        libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
        libc.fclose.argtypes = [ctypes.c_void_p]
        libc.free.argtypes = [ctypes.c_void_p]
        library.rd_kafka_conf_properties_show.argtypes = [ctypes.c_void_p]
    except (OSError, AttributeError):
        return ()
    buffer, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = libc.open_memstream(ctypes.byref(buffer), ctypes.byref(size))
    if not stream:
        return ()
    library.rd_kafka_conf_properties_show(stream)
    libc.fclose(stream)
    try:
        table = ctypes.string_at(buffer, size.value).decode("utf-8", "replace")
    finally:
        libc.free(ctypes.cast(buffer, ctypes.c_void_p))
    return tuple(dict.fromkeys(_PROPERTY_ROW.findall(table)))
