"""The ``sharegroup broker`` and ``sharegroup kafka`` commands: a local share-group broker in the foreground.

    sharegroup broker --topic orders:4 --lock-ms 30000     # the embedded broker (no JVM)
    sharegroup kafka --topic orders:4                       # Apache Kafka's own broker (make jars)
    sharegroup kafka --secured --allow app:TOPIC:orders:READ  # ... on SASL_SSL with ACLs: prints how to connect

Each prints the bootstrap servers and a ``ready`` line, then serves until Ctrl-C or SIGTERM. The connector's
``sharegroup`` command finds them through the ``sharegroup.commands`` entry points this distribution declares
(``add_broker``, ``add_kafka``), so its spelling is the one the documentation and the demo use, and the
connector's wheel carries none of it.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys

from sharegroup_source.redaction import REDACTED, ScrubbedStream

__all__ = ["add_broker", "add_kafka"]


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


def add_broker(commands: argparse._SubParsersAction) -> None:
    """``sharegroup broker``: the embedded broker."""
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
    broker.set_defaults(run=_serve_broker)


def add_kafka(commands: argparse._SubParsersAction) -> None:
    """``sharegroup kafka``: Apache Kafka's own broker, secured or not."""
    kafka = commands.add_parser("kafka", help="run Apache Kafka's own broker (single-node KRaft, share groups on)",
                                description="Run Apache Kafka's own broker (single-node KRaft, share groups on) "
                                            "from the jars of make jars, until Ctrl-C or SIGTERM.")
    kafka.add_argument("--topic", action="append", type=_topic_spec, default=[], metavar="NAME[:PARTITIONS]",
                       help="create a topic (repeatable)")
    kafka.add_argument("--group", action="append", default=[], metavar="GROUP",
                       help="set share.auto.offset.reset=earliest for this share group (repeatable)")
    _add_secured_options(kafka)
    kafka.set_defaults(run=_serve_kafka)


# -- sharegroup kafka --secured: SASL_SSL, TLS and ACLs, as production runs Kafka ------------------------------
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


def _serve_broker(args: argparse.Namespace) -> int:
    from sharegroup_testing.serve import SERVE_ERRORS, serve_embedded_broker  # the brokers' code: served, not --help

    try:
        return serve_embedded_broker(args.topic, brokers=args.brokers, auto_offset_reset=args.auto_offset_reset,
                                     lock_duration_ms=args.lock_ms, delivery_attempt_limit=args.delivery_limit,
                                     port=args.port)
    except SERVE_ERRORS as error:
        return _failed(error)


def _serve_kafka(args: argparse.Namespace) -> int:
    """Apache Kafka's broker, secured or not. A password given with --user is scrubbed from what the command
    prints, whichever error (one quoting Kafka's or openssl's output) would carry it; the JVM's own output goes
    to its log file, as without --secured."""
    from sharegroup_testing.serve import SERVE_ERRORS, Grant, ServeError, serve_apache_kafka, serve_secured_kafka

    try:
        if not args.secured:
            if args.user or args.allow:
                raise ServeError("--user and --allow need --secured")
            return serve_apache_kafka(args.topic, args.group)
        users = dict(args.user)
        if len(users) < len(args.user):
            raise ServeError("--user: a user is named twice")
    except SERVE_ERRORS as error:
        return _failed(error)
    given = {password for password in users.values() if password}
    grants = [Grant(user, resource, name, operations) for user, resource, name, operations in args.allow]
    with contextlib.redirect_stdout(ScrubbedStream(sys.stdout, given)), \
            contextlib.redirect_stderr(ScrubbedStream(sys.stderr, given)):
        try:
            return serve_secured_kafka(args.topic, args.group, users, grants)
        except SERVE_ERRORS as error:  # printed here, while the scrubbing stream is in place
            return _failed(error)


def _failed(error: BaseException) -> int:
    print(f"sharegroup: error: {error}", file=sys.stderr)
    return 2
