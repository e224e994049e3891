"""sharegroup command line: run a local share-group broker in the foreground, or operate share groups.

    sharegroup broker --topic orders:4 --lock-ms 30000     # the embedded broker (no JVM)
    sharegroup kafka --topic orders:4                       # Apache Kafka's own broker (make jars)

Each prints the bootstrap servers and a ``ready`` line, then serves until Ctrl-C or SIGTERM.

    sharegroup describe LOCATION [LOCATION ...] [--bootstrap-servers B] [--json]
    sharegroup reset-offsets LOCATION --to-earliest --bootstrap-servers B [--execute]
    sharegroup delete-offsets LOCATION --topic T

describe, reset and delete share groups (sharegroup_source.admin); describing never joins one.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from collections.abc import Sequence
from datetime import datetime

__all__ = ["main", "plain_text"]


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
    _add_admin_commands(commands)
    return parser


#: The commands that operate share groups (sharegroup_source.admin); the others serve a broker.
ADMIN_COMMANDS = ("describe", "reset-offsets", "delete-offsets")
_LOCATION_HELP = "a groupLocation (coordinator=delta) or a query's stateLocation (coordinator=broker)"
_SERVERS_HELP = "the Kafka cluster the group reads (log offsets and lag are looked up there)"


def _add_admin_commands(commands: argparse._SubParsersAction) -> None:
    describe = commands.add_parser("describe", help="describe share groups: offsets, lag, records in flight, members "
                                   "(never joins a group)")
    describe.add_argument("locations", nargs="+", metavar="LOCATION", help=_LOCATION_HELP)
    describe.add_argument("--bootstrap-servers", metavar="B", help=_SERVERS_HELP)
    describe.add_argument("--json", action="store_true", help="print a JSON list, one object per group")
    reset = commands.add_parser("reset-offsets", help="reset a coordinator=delta group's share-partitions (a dry "
                                "run unless --execute); refused while a member holds records or was seen lately")
    reset.add_argument("location", metavar="LOCATION", help="the group's groupLocation")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", dest="to", action="store_const", const="earliest", help="the log start")
    to.add_argument("--to-latest", dest="to", action="store_const", const="latest", help="the log end")
    to.add_argument("--to-datetime", dest="to", type=_datetime, metavar="ISO8601",
                    help="the first record at or after this time (UTC unless it has an offset)")
    to.add_argument("--to-offset", dest="to", type=int, metavar="N", help="this offset, kept within the log")
    reset.add_argument("--topic", action="append", metavar="T[:P,...]",
                       help="a topic, or some of its partitions (repeatable; default every share-partition)")
    reset.add_argument("--execute", action="store_true", help="commit the reset (default: print the plan only)")
    reset.add_argument("--bootstrap-servers", metavar="B", required=True, help=_SERVERS_HELP)
    delete = commands.add_parser("delete-offsets", help="remove a topic's share-partitions from a coordinator=delta "
                                 "group; refused while a member holds records or was seen lately")
    delete.add_argument("location", metavar="LOCATION", help="the group's groupLocation")
    delete.add_argument("--topic", required=True, metavar="T", help="the topic whose state the group forgets")


def _datetime(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date and time") from None


def _admin(args: argparse.Namespace) -> int:
    """Run an admin command: 0 when it did all it was asked, 1 otherwise (the reasons on stderr)."""
    # Delta and Kafka clients, loaded only by the commands that use them
    from sharegroup_source.admin import GroupNotEmptyError
    from sharegroup_source.errors import ClusterError, StateStoreError

    handlers = {"describe": _describe, "reset-offsets": _reset_offsets, "delete-offsets": _delete_offsets}
    try:
        return handlers[args.command](args)
    except (GroupNotEmptyError, ClusterError, StateStoreError, ValueError) as error:
        print(f"sharegroup: error: {error}", file=sys.stderr)
        return 1


def _describe(args: argparse.Namespace) -> int:
    """Every group described is printed; each that failed gets one line on stderr and the exit status 1."""
    from sharegroup_source.admin import describe_groups, describe_table

    descriptions = describe_groups(args.locations, bootstrap_servers=args.bootstrap_servers)
    if args.json:
        print(json.dumps([d.to_dict() for d in descriptions], indent=2))
    else:
        print(describe_table(descriptions))
    failed = [d for d in descriptions if d.error is not None]
    for d in failed:
        group = f" (group {d.group_id})" if d.group_id else ""
        print(f"sharegroup: error: {d.location}{group}: {d.error}", file=sys.stderr)
    return 1 if failed else 0


def _reset_offsets(args: argparse.Namespace) -> int:
    from sharegroup_source.admin import reset_offsets, reset_table

    plan = reset_offsets(args.location, to=args.to, topics=args.topic, execute=args.execute,
                         bootstrap_servers=args.bootstrap_servers)
    print(reset_table(plan))
    return 0


def _delete_offsets(args: argparse.Namespace) -> int:
    from sharegroup_source.admin import delete_offsets

    removed = delete_offsets(args.location, args.topic)
    print("\n".join(f"{args.topic}  {partition}  deleted" for partition in removed))
    return 0


def _serve(args: argparse.Namespace) -> int:
    # test tooling, loaded only by the commands that serve a broker
    from sharegroup_source.testing.serve import SERVE_ERRORS, serve_apache_kafka, serve_embedded_broker

    try:
        if args.command == "kafka":
            return serve_apache_kafka(args.topic, args.group)
        return serve_embedded_broker(args.topic, brokers=args.brokers, auto_offset_reset=args.auto_offset_reset,
                                     lock_duration_ms=args.lock_ms, delivery_attempt_limit=args.delivery_limit,
                                     port=args.port)
    except SERVE_ERRORS as error:
        print(f"sharegroup: error: {error}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return _admin(args) if args.command in ADMIN_COMMANDS else _serve(args)


if __name__ == "__main__":
    sys.exit(main())
