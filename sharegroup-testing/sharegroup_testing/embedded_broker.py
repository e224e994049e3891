"""Embedded share-group broker: librdkafka's mock cluster, driven through ctypes.

The mock cluster ships inside the confluent-kafka wheel and speaks the real Kafka
protocol over TCP (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge included), so
tests, the demo and the CLI get a local queue without a JVM broker. This module
imports nothing of the connector: the connector never needs it at run time.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Iterable
from typing import Any

import confluent_kafka

__all__ = ["API_KEYS", "BrokerError", "EmbeddedBroker"]

#: Kafka protocol API keys accepted by :meth:`EmbeddedBroker.fail_next`.
API_KEYS: dict[str, int] = {
    "Produce": 0,
    "Fetch": 1,
    "ListOffsets": 2,
    "Metadata": 3,
    "FindCoordinator": 10,
    "ShareGroupHeartbeat": 76,
    "ShareGroupDescribe": 77,
    "ShareFetch": 78,
    "ShareAcknowledge": 79,
}

_REQUIRED_SYMBOLS = (
    "rd_kafka_mock_cluster_new",
    "rd_kafka_mock_cluster_destroy",
    "rd_kafka_mock_cluster_bootstraps",
    "rd_kafka_mock_topic_create",
    "rd_kafka_mock_push_request_errors_array",
    "rd_kafka_mock_clear_request_errors",
    "rd_kafka_mock_broker_set_down",
    "rd_kafka_mock_broker_set_up",
    "rd_kafka_mock_partition_set_leader",
    "rd_kafka_mock_sharegroup_set_auto_offset_reset",
    "rd_kafka_mock_sharegroup_set_record_lock_duration",
    "rd_kafka_mock_sharegroup_set_max_delivery_attempts",
    "rd_kafka_mock_sharegroup_set_max_record_locks",
    "rd_kafka_mock_sharegroup_set_session_timeout",
)
_MIN_CONFLUENT_KAFKA = "2.16"
_OFFSET_RESET = {"latest": 0, "earliest": 1}


class BrokerError(RuntimeError):
    """The embedded broker could not be started or configured."""


def _load_librdkafka() -> ctypes.CDLL:
    """Load the librdkafka that confluent-kafka itself uses, so the mock symbols match."""
    package_dir = os.path.dirname(confluent_kafka.__file__)
    candidates = sorted(glob.glob(os.path.join(package_dir + ".libs", "librdkafka*.so*")))
    candidates += sorted(glob.glob(os.path.join(package_dir, ".dylibs", "librdkafka*.dylib")))
    if not candidates:
        raise BrokerError(
            f"no librdkafka found next to confluent-kafka {confluent_kafka.version()[0]}; "
            f"install the confluent-kafka>={_MIN_CONFLUENT_KAFKA} wheel (not a source build)"
        )
    lib = ctypes.CDLL(candidates[0])
    missing = [name for name in _REQUIRED_SYMBOLS if not hasattr(lib, name)]
    if missing:
        raise BrokerError(
            f"librdkafka {confluent_kafka.libversion()[0]} lacks the share-group mock "
            f"({', '.join(missing[:3])}...): confluent-kafka>={_MIN_CONFLUENT_KAFKA} is required"
        )
    _declare(lib)
    return lib


def _declare(lib: ctypes.CDLL) -> None:
    p, i, i16, i32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int16, ctypes.c_int32
    lib.rd_kafka_conf_new.restype = p
    lib.rd_kafka_conf_set.argtypes = [p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = p
    lib.rd_kafka_new.argtypes = [i, p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_destroy.argtypes = [p]
    lib.rd_kafka_mock_cluster_new.restype = p
    lib.rd_kafka_mock_cluster_new.argtypes = [p, i]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [p]
    lib.rd_kafka_mock_topic_create.restype = i
    lib.rd_kafka_mock_topic_create.argtypes = [p, ctypes.c_char_p, i, i]
    lib.rd_kafka_mock_push_request_errors_array.argtypes = [p, i16, ctypes.c_size_t, ctypes.POINTER(i)]
    lib.rd_kafka_mock_clear_request_errors.argtypes = [p, i16]
    lib.rd_kafka_mock_broker_set_down.restype = i
    lib.rd_kafka_mock_broker_set_down.argtypes = [p, i32]
    lib.rd_kafka_mock_broker_set_up.restype = i
    lib.rd_kafka_mock_broker_set_up.argtypes = [p, i32]
    lib.rd_kafka_mock_partition_set_leader.restype = i
    lib.rd_kafka_mock_partition_set_leader.argtypes = [p, ctypes.c_char_p, i32, i32]
    for name in _REQUIRED_SYMBOLS:
        if name.startswith("rd_kafka_mock_sharegroup_set_"):
            getattr(lib, name).argtypes = [p, i]
    lib.rd_kafka_err2str.restype = ctypes.c_char_p
    lib.rd_kafka_err2str.argtypes = [i]


def _error_code(error: int | str) -> int:
    """Accept a Kafka error as a code or as its confluent_kafka.KafkaError name."""
    if isinstance(error, int):
        return error
    code = getattr(confluent_kafka.KafkaError, error.upper(), None)
    if not isinstance(code, int):
        raise ValueError(f"unknown Kafka error name {error!r}")
    return code


class EmbeddedBroker:
    """A local Kafka cluster with share groups, for tests, the demo and the CLI.

    Usage::

        with EmbeddedBroker(lock_duration_ms=5000) as broker:
            broker.create_topic("orders", partitions=3)
            consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, ...})

    Share-group settings apply to every share group on the cluster.
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        auto_offset_reset: str = "earliest",
        lock_duration_ms: int | None = None,
        delivery_attempt_limit: int | None = None,
        record_lock_limit: int | None = None,
        session_timeout_ms: int | None = None,
    ) -> None:
        if brokers < 1:
            raise BrokerError(f"broker count must be at least 1, got {brokers}")
        if auto_offset_reset not in _OFFSET_RESET:
            raise BrokerError(f"auto_offset_reset must be 'earliest' or 'latest', got {auto_offset_reset!r}")
        self._lib = _load_librdkafka()
        self._brokers = brokers
        self._settings = {
            "auto_offset_reset": _OFFSET_RESET[auto_offset_reset],
            "record_lock_duration": lock_duration_ms,
            "max_delivery_attempts": delivery_attempt_limit,
            "max_record_locks": record_lock_limit,
            "session_timeout": session_timeout_ms,
        }
        self._rk: int | None = None
        self._cluster: int | None = None
        self._topics: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> EmbeddedBroker:
        if self._cluster is not None:
            return self
        lib = self._lib
        conf = lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        # The handle only hosts the cluster's threads; keep its own logging quiet.
        lib.rd_kafka_conf_set(conf, b"log_level", b"0", errstr, len(errstr))
        self._rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))
        if not self._rk:
            raise BrokerError(f"cannot create the embedded broker's handle: {errstr.value.decode()}")
        self._cluster = lib.rd_kafka_mock_cluster_new(self._rk, self._brokers)
        if not self._cluster:
            self._destroy_handle()
            raise BrokerError("cannot create the embedded broker: no loopback port could be bound")
        for name, value in self._settings.items():
            if value is not None:
                getattr(lib, f"rd_kafka_mock_sharegroup_set_{name}")(self._cluster, int(value))
        return self

    def close(self) -> None:
        if self._cluster is not None:
            self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
            self._cluster = None
        self._destroy_handle()

    def _destroy_handle(self) -> None:
        if self._rk is not None:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = self.bootstrap_servers if self._cluster else "stopped"
        return f"EmbeddedBroker(brokers={self._brokers}, {state})"

    # -- properties ------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        return self._lib.rd_kafka_mock_cluster_bootstraps(self._running()).decode()

    @property
    def broker_ids(self) -> list[int]:
        return list(range(1, self._brokers + 1))

    @property
    def topics(self) -> dict[str, int]:
        """Topics created through this object, with their partition counts."""
        return dict(self._topics)

    def _running(self) -> int:
        if self._cluster is None:
            raise BrokerError("the embedded broker is not running: use it as a context manager or call start()")
        return self._cluster

    # -- topics ----------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1) -> None:
        if not name:
            raise BrokerError("topic name must not be empty")
        if partitions < 1:
            raise BrokerError(f"topic {name!r}: partition count must be at least 1, got {partitions}")
        err = self._lib.rd_kafka_mock_topic_create(
            self._running(), name.encode(), partitions, min(self._brokers, 3)
        )
        if err:
            raise BrokerError(f"cannot create topic {name!r}: {self._err2str(err)}")
        self._topics[name] = partitions

    # -- share-group settings --------------------------------------------------------
    def set_lock_duration(self, ms: int) -> None:
        self._set("record_lock_duration", ms)

    def set_delivery_attempt_limit(self, attempts: int) -> None:
        self._set("max_delivery_attempts", attempts)

    def set_record_lock_limit(self, records: int) -> None:
        self._set("max_record_locks", records)

    def set_session_timeout(self, ms: int) -> None:
        self._set("session_timeout", ms)

    def set_auto_offset_reset(self, reset: str) -> None:
        """Cluster-wide here (Apache Kafka sets ``share.auto.offset.reset`` per group)."""
        if reset not in _OFFSET_RESET:
            raise BrokerError(f"auto_offset_reset must be 'earliest' or 'latest', got {reset!r}")
        self._set("auto_offset_reset", _OFFSET_RESET[reset])

    def _set(self, name: str, value: int) -> None:
        self._settings[name] = value
        getattr(self._lib, f"rd_kafka_mock_sharegroup_set_{name}")(self._running(), int(value))

    # -- fault injection ---------------------------------------------------------------
    def fail_next(self, api: str | int, errors: Iterable[int | str]) -> None:
        """Fail the next requests of ``api`` (a name from API_KEYS or a key), one error each.

        Errors are Kafka error codes or KafkaError names such as
        ``"SHARE_SESSION_NOT_FOUND"``; ``"_TRANSPORT"`` disconnects the client instead.
        """
        key = self._api_key(api)
        codes = [_error_code(e) for e in errors]
        array = (ctypes.c_int * len(codes))(*codes)
        self._lib.rd_kafka_mock_push_request_errors_array(self._running(), key, len(codes), array)

    def clear_failures(self, api: str | int) -> None:
        """Drop injected errors of ``api`` that no request has consumed yet."""
        self._lib.rd_kafka_mock_clear_request_errors(self._running(), self._api_key(api))

    def _api_key(self, api: str | int) -> int:
        key = api if isinstance(api, int) else API_KEYS.get(api)
        if key is None:
            raise ValueError(f"unknown Kafka API {api!r}; known: {', '.join(API_KEYS)}")
        return key

    def set_down(self, broker_id: int = -1) -> None:
        """Disconnect a broker node (-1: all) and refuse new connections to it."""
        self._check(self._lib.rd_kafka_mock_broker_set_down(self._running(), broker_id), broker_id)

    def set_up(self, broker_id: int = -1) -> None:
        self._check(self._lib.rd_kafka_mock_broker_set_up(self._running(), broker_id), broker_id)

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Make ``broker_id`` the partition's leader; -1 leaves it without one, as during an election."""
        self._check(self._lib.rd_kafka_mock_partition_set_leader(self._running(), topic.encode(), partition,
                                                                  broker_id), broker_id)

    def _check(self, err: int, broker_id: int) -> None:
        if err:
            raise BrokerError(f"broker {broker_id}: {self._err2str(err)}")

    def _err2str(self, err: int) -> str:
        return self._lib.rd_kafka_err2str(err).decode()
