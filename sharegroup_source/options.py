"""The source's options: parsed once, validated at ``load()``, never printed with secrets.

Every failure names the option at fault, because a data engineer reads the message in a
notebook cell far from the code that set it. Which options exist, their defaults and their lines on the options
page are ``sharegroup_source/option_names.py``'s.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from sharegroup_source.errors import OptionError
from sharegroup_source.kafka.group_configs import (
    DELTA_GROUP_CONFIGS,
    GROUP_CONFIG_PREFIX,
    SHARE_GROUP_CONFIGS,
    check_config_key,
)
from sharegroup_source.kafka.java_settings import refuse_java_settings
from sharegroup_source.kafka.settings import (
    RESERVED,
    check_kafka_settings,
    replay_settings,
    share_settings,
)
from sharegroup_source.locations import resolve_location, storage_options_of
from sharegroup_source.option_names import (
    COORDINATORS,
    DEFAULT_LOCK_DURATION_MS,
    DEFAULT_MAX_BYTES_PER_PARTITION,
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    DEFAULT_POLL_TIMEOUT_MS,
    DOCUMENTED,
    KAFKA_PREFIX,
    LEGACY_GROUP_SETTINGS,
    POLL_TIMEOUT_MAX_MS,
    STARTING_OFFSETS,
    refuse_unknown,
)
from sharegroup_source.redaction import redact, redact_location

__all__ = ["SourceOptions", "StateOptions"]

#: The Delta group's settings that are positive integers (the fourth, share.auto.offset.reset, is a word).
_INTEGER_SETTINGS = DELTA_GROUP_CONFIGS[:3]
#: Options the Delta coordinator has no use for, and what to use instead.
_NOT_WITH_DELTA = {
    "lockdurationms": "the group's lock duration is the option groupConfig.share.record.lock.duration.ms",
    "maxbytespertrigger": "executors read the records, so the driver does not see their size; "
                          "use maxRecordsPerTrigger",
}
_INT32_MAX = 2**31 - 1  # librdkafka's and Spark's integer settings end here
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class StateOptions:
    """Where a source keeps its state: all that ``acknowledge(..., options=...)`` needs of the
    source's options, parsed by the same rules (the other options may be there too)."""

    group_id: str
    state_location: str
    #: delta-rs storage options for stateLocation and deadLetterLocation (``stateStorage.*``)
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> StateOptions:
        lowered = {str(key).lower(): value for key, value in options.items()}
        return cls(group_id=_group_id(lowered), state_location=_location(lowered, "stateLocation"),
                   storage_options=storage_options_of(options))


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    group_id: str
    topics: tuple[str, ...]
    state_location: str
    max_records_per_trigger: int | None = None
    #: records per Spark task. Each task costs Spark's Python data source path tens of milliseconds of its
    #: own, so a default batch (what the windows hold: 32,000 records on 16 partitions) rides in one task, and a
    #: task of offsets reads the ranges of several Kafka partitions in turn
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
    #: key, value and header bytes per micro-batch (Spark's maxBytesPerTrigger), unbounded by default
    max_bytes_per_trigger: int | None = None
    #: bytes a Spark task carries of its records (compressed): Spark warns of every task above 1000 KiB and
    #: caps one at spark.rpc.message.maxSize (128 MiB by default); a record larger than this gets a task alone
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    include_headers: bool = False
    max_deliveries: int | None = None
    dead_letter_location: str | None = None
    fail_on_data_loss: bool = True
    coordinator: str = "broker"
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    lock_duration_ms: int = DEFAULT_LOCK_DURATION_MS
    #: the query's own checkpoint: acknowledgements follow its commit log, not the next trigger
    checkpoint_location: str | None = None
    #: coordinator=delta: the group's Delta state, shared by every member of the group
    group_location: str | None = None
    #: the share group's configs the query sets at start where the group's differ (``groupConfig.*``, values as
    #: Kafka takes them); with coordinator=delta the Delta group's settings (DELTA_GROUP_CONFIGS)
    group_configs: Mapping[str, str] = field(default_factory=dict)
    #: ``startingOffsets``: where a group that never fetched starts (None: as the group is configured)
    starting_offsets: str | None = None
    kafka: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: delta-rs storage options for stateLocation and deadLetterLocation (``stateStorage.*``)
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        # Spark hands Python data sources a case-insensitive map; keep the user's spelling of
        # kafka.* keys (librdkafka is case-sensitive) and compare the rest lowercased.
        lowered = {key.lower(): value for key, value in options.items()}
        kafka = _prefixed(options, KAFKA_PREFIX)
        for key in kafka:
            if key.lower() in RESERVED:
                raise OptionError(f"option 'kafka.{key}' is managed by the sharegroup source; remove it")
        refuse_java_settings(kafka)  # before librdkafka, whose complaint names no option
        refuse_unknown(options)

        bootstrap = _required(lowered, "kafka.bootstrap.servers")
        state = StateOptions.parse(options)
        topics = tuple(t.strip() for t in _required(lowered, "subscribe").split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
        coordinator = lowered.get("coordinator", "broker").strip().lower()
        if coordinator not in COORDINATORS:
            raise OptionError(f"option 'coordinator' must be one of {COORDINATORS}, got {coordinator!r}")
        group_location = _coordinator_options(coordinator, lowered, kafka)
        group_configs = _group_configs(options, coordinator)
        starting_offsets = _starting_offsets(lowered, group_configs)
        parsed = cls(
            bootstrap_servers=bootstrap,
            group_id=state.group_id,
            topics=topics,
            state_location=state.state_location,
            max_records_per_trigger=_positive(lowered, "maxRecordsPerTrigger", None),
            max_records_per_partition=_positive(lowered, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION),
            max_bytes_per_trigger=_positive(lowered, "maxBytesPerTrigger", None, maximum=_INT64_MAX),
            max_bytes_per_partition=_positive(lowered, "maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION),
            include_headers=_boolean(lowered, "includeHeaders", False),
            max_deliveries=_positive(lowered, "maxDeliveries", None),
            dead_letter_location=_optional_delta_location(lowered, "deadLetterLocation"),
            fail_on_data_loss=_boolean(lowered, "failOnDataLoss", True),
            coordinator=coordinator,
            poll_timeout_ms=_positive(lowered, "pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS, maximum=POLL_TIMEOUT_MAX_MS),
            lock_duration_ms=_positive(lowered, "lockDurationMs", DEFAULT_LOCK_DURATION_MS),
            checkpoint_location=_optional_location(lowered, "checkpointLocation"),
            group_location=group_location,
            group_configs=group_configs,
            starting_offsets=starting_offsets,
            kafka=kafka,
            storage_options=state.storage_options,
        )
        # load() parses: a kafka.* value the clients would refuse fails there, not at start()
        check_kafka_settings(parsed.client_config, parsed.replay_config, parsed.max_poll_records,
                             share_consumer=coordinator == "broker")
        return parsed

    @property
    def client_config(self) -> dict[str, str]:
        """The user's ``kafka.*`` for the share consumer and every client but the replay reader (settings.py)."""
        return share_settings(self.kafka)

    @property
    def replay_config(self) -> dict[str, str]:
        """The user's ``kafka.*`` for the replay reader: the group's isolation unless the user set one (settings.py)."""
        return replay_settings(self.kafka)

    @property
    def locations(self) -> dict[str, str]:
        """The Delta locations the source uses, by option name: each is checked before the driver joins the group."""
        named = {"stateLocation": self.state_location, "deadLetterLocation": self.dead_letter_location,
                 "groupLocation": self.group_location}
        return {option: location for option, location in named.items() if location is not None}

    @property
    def group_location_shown(self) -> str | None:
        """``groupLocation`` as errors and logs may print it."""
        return None if self.group_location is None else redact_location(self.group_location)

    @property
    def state_location_shown(self) -> str:
        """``stateLocation`` as errors and logs may print it (no credentials, no query string)."""
        return redact_location(self.state_location)

    @property
    def dead_letter_location_shown(self) -> str | None:
        """``deadLetterLocation`` as errors and logs may print it."""
        return None if self.dead_letter_location is None else redact_location(self.dead_letter_location)

    @property
    def max_poll_records(self) -> int | None:
        """What one acquisition asks for: ``maxRecordsPerTrigger``, or None for what the share-partitions'
        in-flight windows allow (the broker coordinator sizes its poll by the subscribed partitions)."""
        return self.max_records_per_trigger

    def __repr__(self) -> str:
        shown = redact({f"kafka.{k}": v for k, v in self.kafka.items()})
        dead_letters = f"deadLetterLocation={self.dead_letter_location_shown}, " if self.dead_letter_location else ""
        storage = f"stateStorage={sorted(self.storage_options)} (values redacted), " if self.storage_options else ""
        group = f"groupLocation={self.group_location_shown}, " if self.group_location else ""
        return (f"SourceOptions(subscribe={','.join(self.topics)}, stateLocation={self.state_location_shown}, "
                f"{dead_letters}{storage}coordinator={self.coordinator}, {group}kafka={shown})")


def _coordinator_options(coordinator: str, options: Mapping[str, Any], kafka: Mapping[str, str]) -> str | None:
    """``groupLocation``: the Delta coordinator's, refused with the broker's."""
    if coordinator == "broker":
        if options.get("grouplocation") is not None:
            raise OptionError("option 'groupLocation' belongs to coordinator=delta: with coordinator=broker the share "
                              "group lives on the Kafka broker")
        return None
    for name, instead in _NOT_WITH_DELTA.items():
        if options.get(name) is not None:
            shown = next(o for o in DOCUMENTED if o.lower() == name)
            raise OptionError(f"option '{shown}' does not apply with coordinator=delta: {instead}")
    if any(key.lower() == "auto.offset.reset" for key in kafka):
        raise OptionError("option 'kafka.auto.offset.reset' does not apply with coordinator=delta: where a new "
                          "share group starts is the option startingOffsets (latest or earliest)")
    location = _optional_delta_location(options, "groupLocation")
    if location is None:
        raise OptionError("option 'groupLocation' is required with option 'coordinator'='delta': the path or URI "
                          "of the share group's Delta state, the same for every member of the group")
    return location


def _group_configs(options: Mapping[str, Any], coordinator: str) -> dict[str, str]:
    """The ``groupConfig.<key>`` options, by key: a share group's configs, which Kafka checks against its bounds when
    the query sets them; a Delta group has four, checked here. The Delta settings' old spelling (no prefix) is
    taken with coordinator=delta. A blank value is unset (``sharegroup configure --delete`` unsets a config)."""
    configs: dict[str, str] = {}
    for name, value in options.items():
        lowered = name.lower()
        # named with the prefix as documented: Spark hands a Python data source its options lower-cased
        if lowered in LEGACY_GROUP_SETTINGS:
            if coordinator == "broker":
                raise OptionError(f"option '{lowered}' is now spelt '{GROUP_CONFIG_PREFIX}{lowered}': the share "
                                  "group's configs are set with the groupConfig.* options")
            key = shown = lowered
        elif lowered.startswith(GROUP_CONFIG_PREFIX.lower()):
            given = name[len(GROUP_CONFIG_PREFIX):]
            keys = DELTA_GROUP_CONFIGS if coordinator == "delta" else SHARE_GROUP_CONFIGS
            if coordinator == "delta" and given.lower() in SHARE_GROUP_CONFIGS and given.lower() not in keys:
                raise OptionError(f"option '{GROUP_CONFIG_PREFIX}{given.lower()}' does not apply with "
                                  f"coordinator=delta: a Delta group's settings are {', '.join(DELTA_GROUP_CONFIGS)}")
            key = check_config_key(given, f"option '{GROUP_CONFIG_PREFIX}{given}'", keys)
            shown = f"{GROUP_CONFIG_PREFIX}{key}"
        else:
            continue
        if not str(value).strip():  # blank means unset, as for every option
            continue
        text = _group_config_value(shown, key, value, coordinator)
        if configs.get(key, text) != text:
            raise OptionError(f"option '{shown}' sets {key} a second time, to another value")
        configs[key] = text
    return configs


def _group_config_value(name: str, key: str, value: Any, coordinator: str) -> str:
    """A config's value as Kafka takes it; the Delta group's (and the start, for either) checked here."""
    text = str(value).strip()
    if key == "share.auto.offset.reset" and coordinator == "delta":
        text = text.lower()
        if text not in STARTING_OFFSETS:
            raise OptionError(f"option '{name}' must be latest or earliest, got {value!r}")
    elif key in _INTEGER_SETTINGS:
        text = str(_positive({key: value}, key, 0, label=name))
    return text


def _starting_offsets(options: Mapping[str, Any], configs: Mapping[str, str]) -> str | None:
    """``startingOffsets``: earliest or latest (Spark's Kafka source's values), for a group that never fetched."""
    raw = options.get("startingoffsets")
    if raw is None or str(raw).strip() == "":
        return None
    text = str(raw).strip().lower()
    if text not in STARTING_OFFSETS:
        raise OptionError(f"option 'startingOffsets' must be earliest or latest, got {raw!r} (a share group keeps "
                          "one start for all its partitions; per-partition offsets are `sharegroup reset-offsets`)")
    if "share.auto.offset.reset" in configs:
        raise OptionError("options 'startingOffsets' and 'groupConfig.share.auto.offset.reset' both set where the "
                          "group starts: keep one (startingOffsets changes only a group that never fetched)")
    return text


def _prefixed(options: Mapping[str, Any], prefix: str) -> dict[str, str]:
    """Options under ``prefix`` (any case), prefix removed and the rest kept as written:
    librdkafka's keys are case-sensitive."""
    return {key[len(prefix):]: str(value) for key, value in options.items() if key.lower().startswith(prefix)}


def _required(options: Mapping[str, Any], name: str) -> str:
    """The option's value, trimmed; an OptionError if it is missing or blank, naming an option given under a near
    spelling (``kafka.bootstrap.server``): a misspelt required option reads as a missing one otherwise."""
    value = options.get(name.lower())
    if value is None or not str(value).strip():
        near = difflib.get_close_matches(name.lower(), [key.lower() for key in options], n=1, cutoff=0.85)
        seen = f" (given: '{near[0]}', a misspelling of it?)" if value is None and near else ""
        raise OptionError(f"option '{name}' is required{seen}")
    return str(value).strip()


def _group_id(options: Mapping[str, Any]) -> str:
    """The share group's id, exactly as written: the client joins the group under the raw
    value, so trimming it here would ledger one group and consume from another."""
    group = _required(options, "kafka.group.id")
    raw = str(options["kafka.group.id"])
    if raw != group:
        raise OptionError(f"option 'kafka.group.id' must not start or end with whitespace, got {raw!r}")
    if "\x00" in group:  # librdkafka reads C strings: it would join the group named by the part before it
        raise OptionError(f"option 'kafka.group.id' must not contain a NUL character, got {raw!r}")
    return group


def _optional_location(options: Mapping[str, Any], name: str) -> str | None:
    """A location that may be left out; empty means unset, but a blank one is a mistake
    (a path of spaces would be created relative to the working directory)."""
    raw = options.get(name.lower())
    if raw is None or str(raw) == "":
        return None
    if not str(raw).strip():
        raise OptionError(f"option '{name}' is blank: give a path or URI, or leave it out")
    return str(raw)


def _location(options: Mapping[str, Any], name: str) -> str:
    """A required location of Delta tables, as the state store opens it (see ``locations``)."""
    return resolve_location(name, _required(options, name))


def _optional_delta_location(options: Mapping[str, Any], name: str) -> str | None:
    """An optional location of Delta tables, as the state store opens it (see ``locations``)."""
    value = _optional_location(options, name)
    return None if value is None else resolve_location(name, value)


@overload
def _positive(options: Mapping[str, Any], name: str, default: int, maximum: int = ..., label: str = ...) -> int: ...
@overload
def _positive(options: Mapping[str, Any], name: str, default: None, maximum: int = ...,
              label: str = ...) -> int | None: ...
def _positive(options: Mapping[str, Any], name: str, default: int | None, maximum: int = _INT32_MAX,
              label: str = "") -> int | None:
    """A positive integer option (``label``: the option as the user wrote it, if not ``name``)."""
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    refused = f"option '{label or name}' must be a positive integer up to {maximum}, got {raw!r}"
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(refused) from None
    if not 0 < value <= maximum:
        raise OptionError(refused)
    return value


def _boolean(options: Mapping[str, Any], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {raw!r}")
    return text == "true"
