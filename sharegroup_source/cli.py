"""``sharegroup`` command line: run a local share-group broker in the foreground.

    sharegroup broker --topic orders:4 --lock-ms 30000     # the embedded broker (no JVM)
    sharegroup kafka --topic orders:4                       # Apache Kafka's own broker (make jars)

Each prints the bootstrap servers and a ``ready`` line, then serves until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from collections.abc import Sequence

from sharegroup_source.broker import BrokerError, EmbeddedBroker
from sharegroup_source.testing.apache_kafka import ApacheKafka, BrokerStartError, create_topic, set_group_configs
from sharegroup_source.testing.jars import JarsMissing

__all__ = ["main"]


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
    parser = argparse.ArgumentParser(prog="sharegroup", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    broker = commands.add_parser("broker", help="run the embedded share-group broker")
    broker.add_argument("--topic", action="append", type=_topic_spec, default=[], metavar="NAME[:PARTITIONS]",
                        help="create a topic (repeatable)")
    broker.add_argument("--brokers", type=int, default=1, help="broker nodes (default 1)")
    broker.add_argument("--lock-ms", type=int, default=None, help="acquisition lock duration in ms")
    broker.add_argument("--delivery-limit", type=int, default=None, help="delivery attempts before archiving")
    broker.add_argument("--auto-offset-reset", choices=("earliest", "latest"), default="earliest")
    broker.add_argument("--port", type=int, default=None,
                        help="also accept bootstrap connections on this loopback port")
    kafka = commands.add_parser("kafka", help="run Apache Kafka's own broker (single-node KRaft, share groups on)")
    kafka.add_argument("--topic", action="append", type=_topic_spec, default=[], metavar="NAME[:PARTITIONS]",
                       help="create a topic (repeatable)")
    kafka.add_argument("--group", action="append", default=[], metavar="GROUP",
                       help="set share.auto.offset.reset=earliest for this share group (repeatable)")
    return parser


def _bind(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as error:
        listener.close()
        raise BrokerError(f"--port {port}: {error.strerror.lower()} (is another broker running?)") from None
    listener.listen(16)
    return listener


def _forward(listener: socket.socket, target: tuple[str, int]) -> None:
    """Pipe each bootstrap connection to broker 1; metadata then points clients at the real ports."""

    def pipe(source: socket.socket, sink: socket.socket) -> None:
        with source, sink:
            while chunk := source.recv(65536):
                sink.sendall(chunk)

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
                upstream = socket.create_connection(target)
            except OSError:
                return
            threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()

    threading.Thread(target=serve, name="bootstrap-forward", daemon=True).start()


def _run_broker(args: argparse.Namespace) -> int:
    listener = _bind(args.port) if args.port is not None else None
    stop = _stop_on_signal()
    with EmbeddedBroker(args.brokers, auto_offset_reset=args.auto_offset_reset,
                        lock_duration_ms=args.lock_ms, delivery_attempt_limit=args.delivery_limit) as broker:
        for name, partitions in args.topic:
            broker.create_topic(name, partitions)
        servers = broker.bootstrap_servers
        if listener is not None:
            host, _, port = servers.split(",")[0].rpartition(":")
            _forward(listener, (host, int(port)))
            servers = f"127.0.0.1:{args.port},{servers}"
        topics = " ".join(f"{name}:{count}" for name, count in broker.topics.items()) or "(none)"
        print(f"bootstrap.servers={servers}", flush=True)
        print(f"ready: {args.brokers} broker(s), topics {topics}; Ctrl-C or SIGTERM stops", flush=True)
        stop.wait()
    if listener is not None:
        listener.close()
    print("stopped", flush=True)
    return 0


def _stop_on_signal() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def _run_kafka(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    stop = _stop_on_signal()
    with ApacheKafka() as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log.connection.close": False})
        for name, partitions in args.topic:
            create_topic(admin, name, partitions)
        for group in args.group:
            set_group_configs(admin, group, {"share.auto.offset.reset": "earliest"})
        topics = " ".join(f"{name}:{count}" for name, count in args.topic) or "(none)"
        print(f"bootstrap.servers={kafka.bootstrap_servers}", flush=True)
        print(f"ready: Apache Kafka, topics {topics}; log {kafka.log_path}; Ctrl-C or SIGTERM stops", flush=True)
        stop.wait()
    print("stopped", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run_kafka(args) if args.command == "kafka" else _run_broker(args)
    except (BrokerError, BrokerStartError, JarsMissing) as error:
        print(f"sharegroup: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
