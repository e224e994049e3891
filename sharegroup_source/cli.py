"""sharegroup command line: operate share groups.

    sharegroup describe --all-groups --bootstrap-servers B [--json]
    sharegroup describe [LOCATION ...] [--group G ...] [--bootstrap-servers B] [--json]
    sharegroup reset-offsets (LOCATION | --group G) --to-earliest --bootstrap-servers B [--execute]
    sharegroup delete-offsets (LOCATION | --group G) --topic T [--bootstrap-servers B] [--execute]
    sharegroup delete --group G [--group G ...] --bootstrap-servers B [--execute]
    sharegroup configure --group G [--set KEY=VALUE ...] [--delete KEY ...] --bootstrap-servers B [--execute]
    sharegroup configure LOCATION [--set KEY=VALUE ...] [--delete KEY ...] [--execute]
    sharegroup dead-letters LOCATION [--group G] [--limit N] [--payload] [--json]

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

``sharegroup broker`` and ``sharegroup kafka`` (a local broker in the foreground, for trying the connector) come
with sharegroup-testing, this project's second distribution, through the ``sharegroup.commands`` entry points.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import entry_points
from pathlib import Path

from sharegroup_source.errors import OptionError
from sharegroup_source.kafka.java_properties import read_properties
from sharegroup_source.kafka.java_settings import translate_java_settings
from sharegroup_source.redaction import ScrubbedStream, is_scrubbed

__all__ = ["ClientSettings", "main", "plain_text", "read_command_config"]


def plain_text(doc: str | None) -> str:
    """A docstring as ``--help`` prints it: reST literal marks and escaped backslashes written plainly,
    so a terminal user reads the commands as they would type them."""
    return inspect.cleandoc(doc or "").replace("``", "").replace("\\\\", "\\")


#: Where another distribution adds commands to ``sharegroup``: each entry point is a callable given the subcommands
#: (argparse's ``add_subparsers`` action) that adds its own, each with a ``run`` default called with the parsed
#: arguments. sharegroup-testing adds ``broker`` and ``kafka`` (the local brokers), which the connector does not ship.
COMMANDS_GROUP = "sharegroup.commands"
#: Commands another distribution of this project has: what to install, said when one is asked for without it.
_ELSEWHERE = {"broker": "sharegroup-testing", "kafka": "sharegroup-testing"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sharegroup", description=plain_text(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_admin_commands(commands)
    for entry in entry_points(group=COMMANDS_GROUP):
        entry.load()(commands)
    return parser


#: The commands that operate share groups (sharegroup_source.admin).
ADMIN_COMMANDS = ("describe", "reset-offsets", "delete-offsets", "delete", "configure", "dead-letters")
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
    letters = commands.add_parser("dead-letters", help="list the records a share group rejected: reason, "
                                  "deliveries, time; their payload with --payload")
    letters.add_argument("location", metavar="LOCATION",
                         help=_LOCATION_HELP + ", or the query's deadLetterLocation")
    letters.add_argument("--group", metavar="G", help="only this share group's (queries sharing a deadLetterLocation)")
    letters.add_argument("--limit", type=int, metavar="N", help="only the newest N")
    letters.add_argument("--payload", action="store_true", help="with each record's key and value (headers in --json)")
    letters.add_argument("--json", action="store_true", help="a JSON list (payload bytes in base64)")
    _add_client_settings(letters)


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


def _admin(args: argparse.Namespace) -> int:
    """Run an admin command: 0 when it did all it was asked, 1 otherwise (the reasons on stderr)."""
    # Delta and Kafka clients, loaded only by the commands that use them
    from sharegroup_source.admin import GroupNotEmptyError
    from sharegroup_source.errors import ClusterError, StateStoreError

    handlers = {"describe": _describe, "reset-offsets": _reset_offsets, "delete-offsets": _delete_offsets,
                "delete": _delete, "configure": _configure, "dead-letters": _dead_letters}
    try:
        args.settings = read_command_config(args.command_config, args.storage_option)
    except ValueError as error:
        print(f"sharegroup: error: {error}", file=sys.stderr)
        return 1
    secrets = args.settings.secrets()
    out, err = ScrubbedStream(sys.stdout, secrets), ScrubbedStream(sys.stderr, secrets)
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


def _dead_letters(args: argparse.Namespace) -> int:
    from sharegroup_source.admin import dead_letters_table, read_dead_letters

    letters = read_dead_letters(args.location, group=args.group, payload=args.payload, limit=args.limit,
                                storage_options=dict(args.settings.storage))
    if args.json:
        print(json.dumps([letter.to_dict() for letter in letters], indent=2))
    elif letters:
        print(dead_letters_table(letters))
    else:
        print("no dead letters")
    return 0


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


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    if given and given[0] in _ELSEWHERE and given[0] not in commands.choices:
        print(f"sharegroup: error: 'sharegroup {given[0]}' (a local broker for trying the connector) comes with "
              f"{_ELSEWHERE[given[0]]}, installed by make demo and make test; in a checkout: "
              f"pip install ./{_ELSEWHERE[given[0]]}", file=sys.stderr)
        return 2
    args = parser.parse_args(given)
    run: Callable[[argparse.Namespace], int] = getattr(args, "run", _admin)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
