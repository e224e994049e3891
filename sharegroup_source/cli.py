"""sharegroup command line: run a local share-group broker in the foreground, or operate share groups.

    sharegroup broker --topic orders:4 --lock-ms 30000     # the embedded broker (no JVM)
    sharegroup kafka --topic orders:4                       # Apache Kafka's own broker (make jars)
    sharegroup kafka --secured --allow app:TOPIC:orders:READ  # ... on SASL_SSL with ACLs: prints how to connect

Each prints the bootstrap servers and a ``ready`` line, then serves until Ctrl-C or SIGTERM.

    sharegroup describe --all-groups --bootstrap-servers B [--json]
    sharegroup describe [LOCATION ...] [--group G ...] [--bootstrap-servers B] [--json]
    sharegroup reset-offsets (LOCATION | --group G) --to-earliest --bootstrap-servers B [--execute]
    sharegroup delete-offsets (LOCATION | --group G) --topic T [--bootstrap-servers B] [--execute]
    sharegroup delete --group G [--group G ...] --bootstrap-servers B [--execute]
    sharegroup configure --group G [--set KEY=VALUE ...] [--delete KEY ...] --bootstrap-servers B [--execute]
    sharegroup configure LOCATION [--set KEY=VALUE ...] [--delete KEY ...] [--execute]

describe, reset, delete and configure share groups (sharegroup_source.admin); describing never joins
one. A LOCATION is a coordinator=delta group's groupLocation or a broker-mode query's stateLocation;
a group id (--group) is a coordinator=broker group, asked of its Kafka coordinator. Changes are dry
runs unless --execute. configure sets (--set) or deletes (--delete, back to the default) a group's
settings: share.record.lock.duration.ms, share.delivery.count.limit, share.partition.max.record.locks,
share.auto.offset.reset (a delta group has these four), and a broker group's other share.* and
errors.deadletterqueue.* configs, each checked by the broker, whose reason for refusing one is printed;
describe shows them, with SOURCE group (set for the group), broker or default.
Each takes --command-config FILE, Kafka client settings as Kafka's own tools take them (a Java
properties file: security.protocol, sasl.jaas.config, ssl.truststore.location of a PEM file...,
translated to librdkafka's names), where stateStorage.KEY lines and --storage-option KEY=VALUE
give the state store's options for locations on object stores. Secrets are never printed.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TextIO

from sharegroup_source.errors import OptionError
from sharegroup_source.kafka.java_properties import read_properties
from sharegroup_source.kafka.java_settings import translate_java_settings
from sharegroup_source.redaction import REDACTED, is_scrubbed

__all__ = ["ClientSettings", "main", "plain_text", "read_command_config"]


def plain_text(doc: str | None) -> str:
    """A docstring as ``--help`` prints it: reST literal marks and escaped backslashes written plainly,
    so a terminal user reads the commands as they would type them."""
    return inspect.cleandoc(doc or "").replace("``", "").replace("\\\\", "\\")


def _topic_spec(spec: str) -> tuple[str, int]:
    name, _, count = spec.partition(":")
    try:
        partitions = int(count) if count else 1
    except ValueError:
        raise argparse.ArgumentTypeError(f"--topic {spec!r}: partition count must be an integer") from None
    if not name:
        raise argparse.ArgumentTypeError(f"--topic {spec!r}: topic name is empty")
    if partitions < 1:
        raise argparse.ArgumentTypeError(f"--topic {spec!r}: partition count must be at least 1")
    return name, partitions


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sharegroup", description=plain_text(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    broker = commands.add_parser("broker", help="run the embedded share-group broker",
                                 description="Run the embedded share-group broker (librdkafka's mock cluster, "
                                             "no JVM) until Ctrl-C or SIGTERM.")
    broker.add_argument("--topic", action="append", type=_topic_spec, default=[], metavar="NAME[:PARTITIONS]",
                        help="create a topic (repeatable)")
    broker.add_argument("--brokers", type=int, default=1, help="broker nodes (default 1)")
    broker.add_argument("--lock-ms", type=int, default=None, help="acquisition lock duration in ms")
    broker.add_argument("--delivery-limit", type=int, default=None, help="delivery attempts before archiving")
    broker.add_argument("--auto-offset-reset", choices=("earliest", "latest"), default="earliest")
    broker.add_argument("--port", type=int, default=None,
                        help="also accept bootstrap connections on this loopback port")
    kafka = commands.add_parser("kafka", help="run Apache Kafka's own broker (single-node KRaft, share groups on)",
                                description="Run Apache Kafka's own broker (single-node KRaft, share groups on) "
                                            "from the jars of make jars, until Ctrl-C or SIGTERM.")
    kafka.add_argument("--topic", action="append", type=_topic_spec, default=[], metavar="NAME[:PARTITIONS]",
                       help="create a topic (repeatable)")
    kafka.add_argument("--group", action="append", default=[], metavar="GROUP",
                       help="set share.auto.offset.reset=earliest for this share group (repeatable)")
    _add_secured_options(kafka)
    _add_admin_commands(commands)
    return parser


# -- sharegroup kafka --secured: SASL_SSL, TLS and ACLs, as production runs Kafka -------------------------------------
_NAME = re.compile(r"[A-Za-z0-9._-]+")
#: What Kafka's JAAS line and SCRAM's [name=...,password=...] take unquoted.
_PASSWORD = re.compile(r"[^\s\"\\,=\[\]]+")


def _add_secured_options(kafka: argparse.ArgumentParser) -> None:
    kafka.add_argument("--secured", action="store_true",
                       help="a SASL_SSL listener (SCRAM-SHA-512 and PLAIN users), TLS from a CA made at start, and "
                            "ACLs (no ACL: no access); prints the CA file, the users and the admin address")
    kafka.add_argument("--user", action="append", type=_user_spec, default=[], metavar="NAME[=PASSWORD]",
                       help="with --secured: a user (repeatable; default one user, app); a password not given is "
                            "generated and printed, a given one is never printed")
    kafka.add_argument("--allow", action="append", type=_grant_spec, default=[], metavar="USER:RESOURCE:NAME:OP[,OP]",
                       help="with --secured: grant an ACL at start, e.g. app:TOPIC:orders:READ,WRITE or "
                            "app:GROUP:orders-workers:READ (repeatable)")


def _user_spec(spec: str) -> tuple[str, str | None]:
    """NAME or NAME=PASSWORD; errors name the user, never the password."""
    name, has_password, password = spec.partition("=")
    if not _NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(f"--user {name or '(empty)'}: a user name is letters, digits, '.', '_', '-'")
    if has_password and not _PASSWORD.fullmatch(password):
        raise argparse.ArgumentTypeError(f"--user {name}={REDACTED}: a password is not empty and has no spaces, "
                                         "quotes, backslashes, commas, '=' or brackets")
    return name, password if has_password else None


def _grant_spec(spec: str) -> tuple[str, str, str, tuple[str, ...]]:
    user, resource, name, operations = ([*spec.split(":", 3), "", "", ""])[:4]
    if not (user and resource and name and operations):
        raise argparse.ArgumentTypeError(f"--allow {spec!r}: give USER:RESOURCE:NAME:OP[,OP], "
                                         "e.g. app:TOPIC:orders:READ")
    return user, resource.upper(), name, tuple(op.strip().upper() for op in operations.split(","))


#: The commands that operate share groups (sharegroup_source.admin); the others serve a broker.
ADMIN_COMMANDS = ("describe", "reset-offsets", "delete-offsets", "delete", "configure")
_LOCATION_HELP = "a groupLocation (coordinator=delta) or a query's stateLocation (coordinator=broker)"
_SERVERS_HELP = "the Kafka cluster the group reads (log offsets, lag and broker groups are looked up there)"
_GROUP_HELP = "a coordinator=broker share group's id, asked of its Kafka coordinator (repeatable)"
_EXECUTE_HELP = "apply the change (default: a dry run that prints what would change)"


def _add_admin_commands(commands: argparse._SubParsersAction) -> None:
    describe = commands.add_parser("describe", help="describe share groups: offsets, lag, records in flight, members "
                                   "(never joins a group)")
    describe.add_argument("locations", nargs="*", metavar="LOCATION", help=_LOCATION_HELP)
    describe.add_argument("--group", action="append", default=[], metavar="G", help=_GROUP_HELP)
    describe.add_argument("--all-groups", action="store_true", help="every share group of the cluster")
    describe.add_argument("--bootstrap-servers", metavar="B", help=_SERVERS_HELP)
    describe.add_argument("--json", action="store_true", help="print a JSON list, one object per group")
    _add_client_settings(describe)
    reset = commands.add_parser("reset-offsets", help="reset a share group's start offsets (a dry run unless "
                                "--execute); refused while the group has members")
    _add_target(reset)
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", dest="to", action="store_const", const="earliest", help="the log start")
    to.add_argument("--to-latest", dest="to", action="store_const", const="latest", help="the log end")
    to.add_argument("--to-datetime", dest="to", type=_datetime, metavar="ISO8601",
                    help="the first record at or after this time (UTC unless it has an offset)")
    to.add_argument("--to-offset", dest="to", type=int, metavar="N", help="this offset, kept within the log")
    reset.add_argument("--topic", action="append", metavar="T[:P,...]",
                       help="a topic, or some of its partitions (repeatable; default every share-partition)")
    reset.add_argument("--execute", action="store_true", help=_EXECUTE_HELP)
    reset.add_argument("--bootstrap-servers", metavar="B", required=True, help=_SERVERS_HELP)
    _add_client_settings(reset)
    delete_offsets = commands.add_parser("delete-offsets", help="make a share group forget a topic (a dry run "
                                         "unless --execute); refused while the group has members")
    _add_target(delete_offsets)
    delete_offsets.add_argument("--topic", required=True, metavar="T", help="the topic whose state the group forgets")
    delete_offsets.add_argument("--execute", action="store_true", help=_EXECUTE_HELP)
    delete_offsets.add_argument("--bootstrap-servers", metavar="B", help=_SERVERS_HELP + " (for --group)")
    _add_client_settings(delete_offsets)
    delete = commands.add_parser("delete", help="delete coordinator=broker share groups (a dry run unless "
                                 "--execute); refused for a group with members")
    delete.add_argument("--group", action="append", required=True, metavar="G", help=_GROUP_HELP)
    delete.add_argument("--execute", action="store_true", help=_EXECUTE_HELP)
    delete.add_argument("--bootstrap-servers", metavar="B", required=True, help=_SERVERS_HELP)
    _add_client_settings(delete)
    configure = commands.add_parser("configure", help="set or delete a share group's settings (a dry run unless "
                                    "--execute); its members adopt them as they run")
    _add_target(configure)
    configure.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                           help="a setting's new value, e.g. share.record.lock.duration.ms=60000 (repeatable)")
    configure.add_argument("--delete", action="append", default=[], metavar="KEY",
                           help="a setting put back to its default (repeatable)")
    configure.add_argument("--execute", action="store_true", help=_EXECUTE_HELP)
    configure.add_argument("--bootstrap-servers", metavar="B", help=_SERVERS_HELP + " (for --group)")
    _add_client_settings(configure)


def _add_target(command: argparse.ArgumentParser) -> None:
    """The group a change applies to: a delta group's LOCATION, or a broker group's --group."""
    target = command.add_mutually_exclusive_group(required=True)
    target.add_argument("location", nargs="?", metavar="LOCATION", help="a coordinator=delta group's groupLocation")
    target.add_argument("--group", metavar="G", help="a coordinator=broker share group's id")


def _add_client_settings(command: argparse.ArgumentParser) -> None:
    """--command-config and --storage-option: what a group on a secured cluster or an object store needs."""
    command.add_argument("--command-config", metavar="FILE", help=_CONFIG_HELP)
    command.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE", help=_STORAGE_HELP)


def _datetime(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date and time") from None


# -- --command-config and --storage-option: Kafka's tools' client settings, as librdkafka takes them ---------------
_KAFKA_PREFIX = "kafka."
_CONFIG_HELP = ("Kafka client settings in a Java properties file, as Kafka's own tools take them (security.protocol, "
                "sasl.mechanism, sasl.jaas.config, ssl.truststore.location of a PEM file, client.id, ...), "
                "translated to librdkafka's; stateStorage.KEY=VALUE lines are storage options. Values are never "
                "printed")
_STORAGE_HELP = ("a storage option for locations on object stores, as the source's stateStorage.KEY "
                 "(repeatable; wins over the file's; prefer the file for credentials, which a command line shows "
                 "to other users of the machine)")
#: Storage option values that say nothing secret and would garble output if hidden everywhere.
_PLAIN_VALUES = {"true", "false", "none", "null", "etag", "dynamodb"}


@dataclass(frozen=True)
class ClientSettings:
    """What --command-config and --storage-option give an admin command: librdkafka settings and delta-rs
    storage options. Both hold credentials, so neither is ever printed (the repr shows keys only)."""

    kafka: Mapping[str, str] = field(default_factory=dict)
    storage: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"ClientSettings(kafka={sorted(self.kafka)}, storage={sorted(self.storage)}) (values redacted)"

    def secrets(self) -> set[str]:
        """Values that must appear in no output, whatever message carries them: every secret Kafka setting's (bar the
        user and mechanism, which a refused login names),
        and every storage option's (which ones are credentials depends on the store), bar plain words."""
        values = {v for k, v in self.kafka.items() if is_scrubbed(k)} | set(self.storage.values())
        return {v for v in values if len(v) >= 4 and v.lower() not in _PLAIN_VALUES and not v.isdigit()}


def read_command_config(path: str | None, storage_options: Sequence[str] = ()) -> ClientSettings:
    """The settings of ``--command-config path`` (librdkafka's names) and ``--storage-option KEY=VALUE`` pairs.

    An unreadable file, a Java-only setting librdkafka cannot take (a JKS store, say) or a value
    librdkafka refuses is an OptionError naming the file and the setting, never its value."""
    from sharegroup_source.locations import STORAGE_PREFIX, storage_options_of

    entries: dict[str, str] = {}
    if path is not None:
        try:
            entries = read_properties(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            raise OptionError(f"--command-config {path}: cannot read it: {getattr(error, 'strerror', None) or error}"
                              ) from None
    storage = storage_options_of(entries)
    for pair in storage_options:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise OptionError("--storage-option takes KEY=VALUE (what was given is not shown: it may be a secret)")
        key = key.strip()
        storage[key[len(STORAGE_PREFIX):] if key.lower().startswith(STORAGE_PREFIX) else key] = value
    kafka = {(k[len(_KAFKA_PREFIX):] if k.lower().startswith(_KAFKA_PREFIX) else k): v
             for k, v in entries.items() if not k.lower().startswith(STORAGE_PREFIX)}
    return ClientSettings(translate_java_settings(kafka, f"--command-config {path}") if kafka else {}, storage)


class _Scrubbed:
    """A text stream that writes everything but the secrets: the last guard of 'never printed', whatever
    message (a store's, a client's) carries a credential."""

    def __init__(self, target: TextIO, secrets: set[str]):
        self._target = target
        self._secrets = sorted(secrets, key=len, reverse=True)  # a secret inside a longer one: the longer first

    def write(self, text: str) -> int:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return self._target.write(text)

    def flush(self) -> None:
        self._target.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self._target, name)


def _admin(args: argparse.Namespace) -> int:
    """Run an admin command: 0 when it did all it was asked, 1 otherwise (the reasons on stderr)."""
    # Delta and Kafka clients, loaded only by the commands that use them
    from sharegroup_source.admin import GroupNotEmptyError
    from sharegroup_source.errors import ClusterError, StateStoreError

    handlers = {"describe": _describe, "reset-offsets": _reset_offsets, "delete-offsets": _delete_offsets,
                "delete": _delete, "configure": _configure}
    try:
        args.settings = read_command_config(args.command_config, args.storage_option)
    except ValueError as error:
        print(f"sharegroup: error: {error}", file=sys.stderr)
        return 1
    secrets = args.settings.secrets()
    out, err = _Scrubbed(sys.stdout, secrets), _Scrubbed(sys.stderr, secrets)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            return handlers[args.command](args)
        except (GroupNotEmptyError, ClusterError, StateStoreError, ValueError) as error:
            print(f"sharegroup: error: {error}", file=sys.stderr)
            return 1


def _describe(args: argparse.Namespace) -> int:
    """Every group described is printed; each that failed gets one line on stderr and the exit status 1."""
    from sharegroup_source.admin import describe_groups, describe_table

    if not (args.locations or args.group or args.all_groups):
        raise ValueError("describe what? name LOCATIONs, --group G, or --all-groups")
    descriptions = describe_groups(args.locations, groups=args.group, all_groups=args.all_groups,
                                   bootstrap_servers=args.bootstrap_servers, kafka_config=args.settings.kafka,
                                   storage_options=dict(args.settings.storage))
    if args.json:
        print(json.dumps([d.to_dict() for d in descriptions], indent=2))
    else:
        print(describe_table(descriptions))
    failed = [d for d in descriptions if d.error is not None]
    for d in failed:
        where = " ".join(part for part in (d.location, f"(group {d.group_id})" if d.group_id else None) if part)
        print(f"sharegroup: error: {where or 'cluster'}: {d.error}", file=sys.stderr)
    return 1 if failed else 0


def _reset_offsets(args: argparse.Namespace) -> int:
    from sharegroup_source.admin import reset_offsets, reset_table

    plan = reset_offsets(args.location, group=args.group, to=args.to, topics=args.topic, execute=args.execute,
                         bootstrap_servers=args.bootstrap_servers, kafka_config=args.settings.kafka,
                         storage_options=dict(args.settings.storage))
    print(reset_table(plan))
    return 0


def _delete_offsets(args: argparse.Namespace) -> int:
    from sharegroup_source.admin import delete_offsets

    removed = delete_offsets(args.location, args.topic, group=args.group, execute=args.execute,
                             bootstrap_servers=args.bootstrap_servers, kafka_config=args.settings.kafka,
                             storage_options=dict(args.settings.storage))
    done = "deleted" if args.execute else "would be deleted (dry run: add --execute)"
    print("\n".join(f"{args.topic}  {partition}  {done}" for partition in removed))
    return 0


def _delete(args: argparse.Namespace) -> int:
    """One line per group; the exit status 1 when any could not be (or would not be) deleted."""
    from sharegroup_source.admin import delete_groups

    outcomes = delete_groups(args.group, execute=args.execute, bootstrap_servers=args.bootstrap_servers,
                             kafka_config=args.settings.kafka)
    done = "deleted" if args.execute else "would be deleted (dry run: add --execute)"
    for group, error in outcomes.items():
        if error is None:
            print(f"{group}  {done}")
        else:
            print(f"sharegroup: error: group {group}: {error}", file=sys.stderr)
    return 1 if any(error is not None for error in outcomes.values()) else 0


def _configure(args: argparse.Namespace) -> int:
    """The changes as a table; each setting Kafka refused is a line of its own on stderr (exit status 1)."""
    from sharegroup_source.admin import config_table, configure_group
    from sharegroup_source.errors import GroupConfigError

    try:
        plan = configure_group(args.location, group=args.group, set=_by_key(args.set), delete=args.delete,
                               execute=args.execute, bootstrap_servers=args.bootstrap_servers,
                               kafka_config=args.settings.kafka, storage_options=dict(args.settings.storage))
    except GroupConfigError as error:
        for line in error.refused:
            print(f"sharegroup: error: {line}", file=sys.stderr)
        return 1
    print(config_table(plan))
    return 0


def _by_key(pairs: Sequence[str]) -> dict[str, str]:
    """--set KEY=VALUE arguments by key; a key given twice is refused rather than one of its values dropped."""
    settings: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise OptionError(f"--set {pair!r}: give KEY=VALUE, e.g. share.record.lock.duration.ms=60000")
        if key.strip() in settings:
            raise OptionError(f"--set {key.strip()} is given twice")
        settings[key.strip()] = value
    return settings


def _serve(args: argparse.Namespace) -> int:
    # test tooling, loaded only by the commands that serve a broker
    from sharegroup_source.testing.serve import SERVE_ERRORS, serve_embedded_broker

    try:
        if args.command == "kafka":
            return _serve_kafka(args)
        return serve_embedded_broker(args.topic, brokers=args.brokers, auto_offset_reset=args.auto_offset_reset,
                                     lock_duration_ms=args.lock_ms, delivery_attempt_limit=args.delivery_limit,
                                     port=args.port)
    except SERVE_ERRORS as error:
        print(f"sharegroup: error: {error}", file=sys.stderr)
        return 2


def _serve_kafka(args: argparse.Namespace) -> int:
    """Apache Kafka's broker, secured or not. A password given with --user is scrubbed from what the command
    prints, whichever error (one quoting Kafka's or openssl's output) would carry it; the JVM's own output goes
    to its log file, as without --secured."""
    from sharegroup_source.testing.serve import (
        SERVE_ERRORS,
        Grant,
        ServeError,
        serve_apache_kafka,
        serve_secured_kafka,
    )

    if not args.secured:
        if args.user or args.allow:
            raise ServeError("--user and --allow need --secured")
        return serve_apache_kafka(args.topic, args.group)
    users = dict(args.user)
    if len(users) < len(args.user):
        raise ServeError("--user: a user is named twice")
    given = {password for password in users.values() if password}
    grants = [Grant(user, resource, name, operations) for user, resource, name, operations in args.allow]
    with contextlib.redirect_stdout(_Scrubbed(sys.stdout, given)), contextlib.redirect_stderr(_Scrubbed(sys.stderr,
                                                                                                           given)):
        try:
            return serve_secured_kafka(args.topic, args.group, users, grants)
        except SERVE_ERRORS as error:  # printed here, while the scrubbing stream is in place
            print(f"sharegroup: error: {error}", file=sys.stderr)
            return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return _admin(args) if args.command in ADMIN_COMMANDS else _serve(args)


if __name__ == "__main__":
    sys.exit(main())
