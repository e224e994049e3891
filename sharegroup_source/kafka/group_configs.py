"""A share group's settings (KIP-932's group configs): their names, and describing and altering them on Kafka.

The settings that decide how a share group behaves are the group's, not a member's: how long a
record stays locked (``share.record.lock.duration.ms``), how often it is delivered before it is
archived (``share.delivery.count.limit``), how many records a share-partition holds in flight
(``share.partition.max.record.locks``), where a new group starts (``share.auto.offset.reset``)...
On Kafka they are configs of the GROUP resource, read with DescribeConfigs and changed with
IncrementalAlterConfigs (``kafka-configs --entity-type groups``), which confluent-kafka's
AdminClient sends. The broker checks each value against its own bounds
(``group.share.max.partition.max.record.locks``...) and says why it refuses one: its reason is
passed on, one line per refused setting. A Delta-coordinated group keeps the first four in its
``settings`` table (``state_store.group``), under the same names.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from sharegroup_source.errors import ClusterError, GroupConfigError, OptionError
from sharegroup_source.kafka.errors import refusal
from sharegroup_source.kafka.settings import admin_config

__all__ = ["DELTA_GROUP_CONFIGS", "GROUP_CONFIG_PREFIX", "SHARE_GROUP_CONFIGS", "ConfigChange", "GroupConfig",
           "already_started", "alter_group_configs", "asked_by", "check_config_key", "describe_group_configs",
           "group_config_command", "read_group_configs"]

#: The source options that set the group's configs: ``groupConfig.share.record.lock.duration.ms`` and so on.
GROUP_CONFIG_PREFIX = "groupConfig."
#: A share group's configs, with what each decides (Apache Kafka 4.3's GroupConfig; the last two are 4.4's,
#: KIP-1191's dead-letter queue). Other group configs (``consumer.*``, ``streams.*``) are not a share group's.
SHARE_GROUP_CONFIGS: dict[str, str] = {
    "share.auto.offset.reset": "where the group starts in a partition it never fetched: latest or earliest",
    "share.record.lock.duration.ms": "how long a member holds an acquired record before it goes to another",
    "share.delivery.count.limit": "deliveries of a record before the group archives it",
    "share.partition.max.record.locks": "records a share-partition holds in flight (acquired, not yet settled)",
    "share.isolation.level": "read_uncommitted or read_committed: whether records of open transactions are given",
    "share.renew.acknowledge.enable": "whether members may renew their acquisition locks",
    "share.session.timeout.ms": "how long a silent member stays in the group",
    "share.heartbeat.interval.ms": "how often members heartbeat",
    "share.assignment.interval.ms": "how often the group's assignment is recomputed",
    "share.assignor.offload.enable": "whether the assignor runs off the coordinator's thread",
    "errors.deadletterqueue.topic.name": "Kafka 4.4+: the topic the broker writes archived records to (KIP-1191)",
    "errors.deadletterqueue.copy.record.enable": "Kafka 4.4+: whether dead-letter records carry key and value",
}
#: The configs a Delta-coordinated group has (its ``settings`` table), each a positive integer but the last.
DELTA_GROUP_CONFIGS = ("share.record.lock.duration.ms", "share.delivery.count.limit",
                       "share.partition.max.record.locks", "share.auto.offset.reset")
#: What setting a group's configs needs, said with any authorization error.
NEEDS = "setting a share group's configs needs DESCRIBE_CONFIGS and ALTER_CONFIGS on its GROUP"
#: How long a describe or an alter may take before the cluster counts as unreachable.
TIMEOUT_S = 15.0
_SOURCES = {ConfigSource.GROUP_CONFIG.value: "group", ConfigSource.DEFAULT_CONFIG.value: "default"}


@dataclass(frozen=True)
class GroupConfig:
    """One setting of a group as the cluster has it: ``source`` is ``group`` (set for this group), ``broker`` (the
    broker's static setting, ``group.<key>``) or ``default`` (Kafka's default)."""

    key: str
    value: str
    source: str

    @property
    def is_default(self) -> bool:
        return self.source != "group"


@dataclass(frozen=True)
class ConfigChange:
    """A setting that changes: ``new`` None where it is deleted (back to the broker's default)."""

    key: str
    old: str | None
    new: str | None

    def __str__(self) -> str:
        return f"{self.key}: {_shown(self.old)} -> {'(default)' if self.new is None else _shown(self.new)}"


def check_config_key(key: str, where: str, keys: Iterable[str] = SHARE_GROUP_CONFIGS) -> str:
    """``key`` if it is a share group's config, else an OptionError naming it (``where`` it was given) and the
    closest known one."""
    known = list(keys)
    if key in known:
        return key
    lowered = {name.lower(): name for name in known}
    if key.lower() in lowered:
        return lowered[key.lower()]
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise OptionError(f"{where}: {key!r} is not a share group's config{hint}; they are: {', '.join(known)}")


def group_config_command(group_id: str, key: str, value: object, servers: str = "B") -> str:
    """The ``sharegroup configure`` command that sets ``key`` of ``group_id``."""
    return f"sharegroup configure --group {group_id} --set {key}={value} --bootstrap-servers {servers} --execute"


def describe_group_configs(config: Mapping[str, Any], groups: Sequence[str], timeout_s: float = TIMEOUT_S,
                           needs: str = "") -> dict[str, dict[str, GroupConfig] | ClusterError]:
    """The share-group configs of each of ``groups`` (one DescribeConfigs for all), or why they could not be read:
    an AuthorizationError naming DESCRIBE_CONFIGS on the group, or a ClusterError. A group that does not exist has
    the broker's defaults, as Kafka answers."""
    if not groups:
        return {}
    admin = AdminClient(admin_config(config))
    try:
        futures = admin.describe_configs([ConfigResource(ConfigResource.Type.GROUP, g) for g in groups],
                                         request_timeout=timeout_s)
        by_group = {resource.name: future for resource, future in futures.items()}
        return {g: _described(by_group[g], config, g, timeout_s, needs) for g in groups}
    finally:
        admin.poll(0)


def read_group_configs(config: Mapping[str, Any], group: str, timeout_s: float = TIMEOUT_S) -> dict[str, GroupConfig]:
    """The share-group configs of ``group``; raises what ``describe_group_configs`` would say instead."""
    described = describe_group_configs(config, [group], timeout_s, NEEDS)[group]
    if isinstance(described, ClusterError):
        raise described
    return described


def already_started(group: str, starting: str, fetched: Sequence[tuple[str, int]], target: str, servers: str, *,
                    reset: str | None = None, started_by: str | None = None) -> str:
    """The line a query logs when ``startingOffsets`` meets a group that has fetched already: it changes nothing.
    ``target`` names the group as ``sharegroup reset-offsets`` takes it (``--group G``, or a Delta group's location).

    ``reset``: the group's ``share.auto.offset.reset``, where it started; ``started_by``: who started it (its
    first member, say a worker that joined before the query). A group that started where the option asks is not
    a fault: the line says so (the caller logs it at INFO), and what to do should the records it delivered since
    be wanted again."""
    shown = ", ".join(f"{topic}[{partition}]" for topic, partition in fetched[:5])
    more = f" and {len(fetched) - 5} more" if len(fetched) > 5 else ""
    topics = " ".join(f"--topic {topic}" for topic in sorted({topic for topic, _ in fetched}))
    reset_command = (f"stop the group's members and run sharegroup reset-offsets {target} {topics} --to-{starting} "
                     f"--bootstrap-servers {servers} --execute")
    if reset == starting:
        by = f": {started_by}" if started_by else ""
        return (f"share group {group} has started already{by} ({shown}{more}), at share.auto.offset.reset="
                f"{reset} as startingOffsets={starting} asks: the query goes on from where the group is, and records "
                f"the group delivered before are not delivered again (to read them again, {reset_command})")
    started = f" (its share.auto.offset.reset is {reset}{'; ' + started_by if started_by else ''})" if reset else ""
    return (f"share group {group} already has a position in {shown}{more}{started}: startingOffsets={starting} "
            f"changes nothing, the group goes on from where it is; to move it, {reset_command}")


def asked_by(key: str, starting: str | None) -> str:
    """The source option that asked for a change of ``key``, for the line that says so."""
    return "startingOffsets" if key == "share.auto.offset.reset" and starting else f"{GROUP_CONFIG_PREFIX}{key}"


def _described(future: Future, config: Mapping[str, Any], group: str, timeout_s: float, needs: str,
               ) -> dict[str, GroupConfig] | ClusterError:
    try:
        entries = future.result(timeout=timeout_s)
    except KafkaException as exc:
        return _error(exc, config, group, needs)
    except TimeoutError:
        return ClusterError(f"the configs of share group '{group}' at bootstrap.servers="
                            f"{config.get('bootstrap.servers', '')} were not read within {timeout_s:.0f}s (a share "
                            "group's configs need Apache Kafka 4.2+; the embedded broker has none)")
    return {key: GroupConfig(key, "" if entry.value is None else str(entry.value),
                             _SOURCES.get(_source(entry), "broker"))
            for key, entry in sorted(entries.items()) if key in SHARE_GROUP_CONFIGS}


def _source(entry: ConfigEntry) -> int:
    source = entry.source
    return int(source.value if isinstance(source, ConfigSource) else source)


def alter_group_configs(config: Mapping[str, Any], group: str, set_: Mapping[str, str] | None = None,
                        delete: Iterable[str] = (), *, execute: bool = False, timeout_s: float = TIMEOUT_S,
                        current: Mapping[str, GroupConfig] | None = None) -> list[ConfigChange]:
    """The changes that setting ``set_`` and deleting ``delete`` make to ``group``'s configs, applied with
    ``execute`` (else a dry run), in one IncrementalAlterConfigs.

    Keys that are no share group's config are refused by name before anything is sent. Each change is
    validated by the broker first (``validate_only``), one request per setting, so every value it refuses
    is a line of the GroupConfigError with the broker's reason, and nothing is changed unless all pass.
    A principal without ALTER_CONFIGS (or DESCRIBE_CONFIGS) on the group gets an AuthorizationError.
    ``current``: the group's configs as just described, if the caller has them.
    """
    wanted = {check_config_key(key, f"share group '{group}'"): str(value) for key, value in (set_ or {}).items()}
    removed = [check_config_key(key, f"share group '{group}'") for key in delete]
    both = sorted(set(wanted) & set(removed))
    if both:
        raise OptionError(f"share group '{group}': {', '.join(both)} both set and deleted")
    if current is None:
        current = read_group_configs(config, group, timeout_s)
    changes = [ConfigChange(key, _value(current, key), value) for key, value in wanted.items()
               if _value(current, key) != value]
    changes += [ConfigChange(key, _value(current, key), None) for key in removed
                if key in current and not current[key].is_default]
    if not changes:
        return []
    admin = AdminClient(admin_config(config))
    try:
        checks = {change.key: _send(admin, group, [change], validate_only=True, timeout_s=timeout_s)
                  for change in changes}
        refused = [f"{key}={_shown(next(c.new for c in changes if c.key == key))}: {reason}"
                   for key, future in checks.items() if (reason := _refused(future, config, group, timeout_s))]
        if refused:
            said = f"share group '{group}': Kafka at bootstrap.servers={config.get('bootstrap.servers', '')} refused "
            raise GroupConfigError(said + "; ".join(refused), tuple(said + line for line in refused))
        if execute:
            reason = _refused(_send(admin, group, changes, validate_only=False, timeout_s=timeout_s), config, group,
                              timeout_s)
            if reason:
                raise GroupConfigError(f"share group '{group}': Kafka refused the change: {reason}")
        return changes
    finally:
        admin.poll(0)


def _value(current: Mapping[str, GroupConfig], key: str) -> str | None:
    found = current.get(key)
    return None if found is None else found.value


def _send(admin: AdminClient, group: str, changes: Sequence[ConfigChange], *, validate_only: bool,
          timeout_s: float) -> Future:
    entries = [ConfigEntry(c.key, c.new, incremental_operation=AlterConfigOpType.SET) if c.new is not None
               else ConfigEntry(c.key, None, incremental_operation=AlterConfigOpType.DELETE) for c in changes]
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=entries)
    return next(iter(admin.incremental_alter_configs([resource], validate_only=validate_only,
                                                      request_timeout=timeout_s).values()))


def _refused(future: Future, config: Mapping[str, Any], group: str, timeout_s: float) -> str | None:
    """Why the broker refused a change (its own words), None if it took it; a refused principal raises."""
    try:
        future.result(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if not isinstance(error, KafkaError):
            return str(exc)
        refused = refusal(error, config, "ALTER_CONFIGS", group=group, needs=NEEDS)
        if refused is not None:  # the principal, not the value: the same for every setting
            raise refused from None
        return error.str()
    except TimeoutError:
        raise ClusterError(f"share group '{group}': Kafka at bootstrap.servers={config.get('bootstrap.servers', '')} "
                           f"did not answer the config change within {timeout_s:.0f}s") from None
    return None


def _error(exc: KafkaException, config: Mapping[str, Any], group: str, needs: str) -> ClusterError:
    """Why a DescribeConfigs failed: the principal's refusal, or the cluster's error."""
    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return ClusterError(f"the configs of share group '{group}' could not be read: {exc}")
    refused = refusal(error, config, "DESCRIBE_CONFIGS", group=group, needs=needs)
    if refused is not None:
        return refused
    return ClusterError(f"the configs of share group '{group}' at bootstrap.servers="
                        f"{config.get('bootstrap.servers', '')} could not be read: {error.str()}")


def _shown(value: str | None) -> str:
    return "(none)" if value is None else repr(value) if value == "" else value
