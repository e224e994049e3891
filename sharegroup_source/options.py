"""The source's options: parsed once, validated at ``load()``, never printed with secrets.

Every failure names the option at fault, because a data engineer reads the message in a
notebook cell far from the code that set it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sharegroup_source.redaction import redact

__all__ = ["OptionError", "SourceOptions"]

COORDINATORS = ("broker", "delta")
_KAFKA_PREFIX = "kafka."
_DOCUMENTED = ("kafka.bootstrap.servers", "kafka.group.id", "subscribe", "stateLocation", "maxRecordsPerTrigger",
               "maxRecordsPerPartition", "includeHeaders", "maxDeliveries", "deadLetterLocation", "failOnDataLoss",
               "coordinator", "pollTimeoutMs", "lockDurationMs", "kafka.*")
_KNOWN = {name.lower() for name in _DOCUMENTED if not name.startswith(_KAFKA_PREFIX)}
_INT32_MAX = 2**31 - 1  # librdkafka's and Spark's integer settings end here
# librdkafka settings the connector owns: a user value would break acquisition or acks.
_RESERVED_KAFKA = {"share.acknowledgement.mode", "max.poll.records", "enable.auto.commit"}


class OptionError(ValueError):
    """An option is missing or has a wrong value; the message names it."""


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    group_id: str
    topics: tuple[str, ...]
    state_location: str
    max_records_per_trigger: int | None = None
    max_records_per_partition: int = 10_000
    include_headers: bool = False
    max_deliveries: int | None = None
    dead_letter_location: str | None = None
    fail_on_data_loss: bool = True
    coordinator: str = "broker"
    poll_timeout_ms: int = 1_000
    lock_duration_ms: int = 30_000
    kafka: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: delta-rs storage options for stateLocation and deadLetterLocation (``stateStorage.*``)
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        # Spark hands Python data sources a case-insensitive map; keep the user's spelling of
        # kafka.* keys (librdkafka is case-sensitive) and compare the rest lowercased.
        lowered = {key.lower(): value for key, value in options.items()}
        kafka = {key[len(_KAFKA_PREFIX):]: str(value) for key, value in options.items()
                 if key.lower().startswith(_KAFKA_PREFIX)}
        for key in kafka:
            if key.lower() in _RESERVED_KAFKA:
                raise OptionError(f"option 'kafka.{key}' is managed by the sharegroup source; remove it")
        unknown = sorted(key for key in options if not key.lower().startswith(_KAFKA_PREFIX)
                         and key.lower() not in _KNOWN)
        if unknown:
            raise OptionError(f"unknown option(s) {', '.join(map(repr, unknown))}; "
                              f"sharegroup options: {', '.join(sorted(_DOCUMENTED))}")

        def required(key: str, value: str | None) -> str:
            if value is None or not str(value).strip():
                raise OptionError(f"option '{key}' is required")
            return str(value).strip()

        bootstrap = required("kafka.bootstrap.servers", lowered.get("kafka.bootstrap.servers"))
        group = required("kafka.group.id", lowered.get("kafka.group.id"))
        topics = tuple(t.strip() for t in required("subscribe", lowered.get("subscribe")).split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
        coordinator = lowered.get("coordinator", "broker").strip().lower()
        if coordinator not in COORDINATORS:
            raise OptionError(f"option 'coordinator' must be one of {COORDINATORS}, got {coordinator!r}")
        if coordinator == "delta":
            raise OptionError("option 'coordinator'='delta' is not available yet; use 'broker' "
                              "(a Kafka 4.2+ cluster with share groups enabled)")
        return cls(
            bootstrap_servers=bootstrap,
            group_id=group,
            topics=topics,
            state_location=required("stateLocation", lowered.get("statelocation")),
            max_records_per_trigger=_positive(lowered, "maxRecordsPerTrigger", None),
            max_records_per_partition=_positive(lowered, "maxRecordsPerPartition", 10_000),
            include_headers=_boolean(lowered, "includeHeaders", False),
            max_deliveries=_positive(lowered, "maxDeliveries", None),
            dead_letter_location=lowered.get("deadletterlocation") or None,
            fail_on_data_loss=_boolean(lowered, "failOnDataLoss", True),
            coordinator=coordinator,
            poll_timeout_ms=_positive(lowered, "pollTimeoutMs", 1_000),
            lock_duration_ms=_positive(lowered, "lockDurationMs", 30_000),
            kafka=kafka,
        )

    @property
    def client_config(self) -> dict[str, str]:
        """librdkafka configuration: every ``kafka.*`` option, prefix removed."""
        return dict(self.kafka)

    @property
    def max_poll_records(self) -> int:
        return self.max_records_per_trigger or 10_000

    def __repr__(self) -> str:
        shown = redact({f"kafka.{k}": v for k, v in self.kafka.items()})
        return (f"SourceOptions(subscribe={','.join(self.topics)}, stateLocation={self.state_location}, "
                f"coordinator={self.coordinator}, kafka={shown})")


def _positive(options: Mapping[str, Any], name: str, default: int | None) -> int | None:
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be a positive integer up to {_INT32_MAX}, got {raw!r}") from None
    if not 0 < value <= _INT32_MAX:
        raise OptionError(f"option '{name}' must be a positive integer up to {_INT32_MAX}, got {raw!r}")
    return value


def _boolean(options: Mapping[str, Any], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {raw!r}")
    return text == "true"
