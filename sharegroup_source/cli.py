"""sharegroup command line: run a local share-group broker in the foreground.

    sharegroup broker --topic orders:4 --lock-ms 30000     # the embedded broker (no JVM)
    sharegroup kafka --topic orders:4                       # Apache Kafka's own broker (make jars)

Each prints the bootstrap servers and a ``ready`` line, then serves until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Sequence

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
    return parser


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
    return _serve(_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
