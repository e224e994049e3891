"""A local share-group broker served in the foreground, for ``sharegroup broker`` and ``sharegroup kafka``.

Each prints the bootstrap servers and a ``ready`` line, then serves until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Sequence

from confluent_kafka.admin import AdminClient

from sharegroup_source.testing.apache_kafka import ApacheKafka, BrokerStartError, create_topic, set_group_configs
from sharegroup_source.testing.embedded_broker import BrokerError, EmbeddedBroker
from sharegroup_source.testing.jars import JarsMissing

__all__ = ["SERVE_ERRORS", "serve_apache_kafka", "serve_embedded_broker"]

#: What stops a broker from being served: the command prints it in one line, without a traceback.
SERVE_ERRORS = (BrokerError, BrokerStartError, JarsMissing)


def _bind(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as error:
        listener.close()
        reason = (error.strerror or str(error)).lower()
        raise BrokerError(f"--port {port}: {reason} (is another broker running?)") from None
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


def _stop_on_signal() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def serve_embedded_broker(topics: Sequence[tuple[str, int]], *, brokers: int = 1, auto_offset_reset: str = "earliest",
                          lock_duration_ms: int | None = None, delivery_attempt_limit: int | None = None,
                          port: int | None = None) -> int:
    """The embedded broker with ``topics`` (name, partitions); ``port`` also takes bootstrap connections."""
    listener = _bind(port) if port is not None else None
    stop = _stop_on_signal()
    with EmbeddedBroker(brokers, auto_offset_reset=auto_offset_reset, lock_duration_ms=lock_duration_ms,
                        delivery_attempt_limit=delivery_attempt_limit) as broker:
        for name, partitions in topics:
            broker.create_topic(name, partitions)
        servers = broker.bootstrap_servers
        if listener is not None:
            host, _, first_port = servers.split(",")[0].rpartition(":")
            _forward(listener, (host, int(first_port)))
            servers = f"127.0.0.1:{port},{servers}"
        served = " ".join(f"{name}:{count}" for name, count in broker.topics.items()) or "(none)"
        print(f"bootstrap.servers={servers}", flush=True)
        print(f"ready: {brokers} broker(s), topics {served}; Ctrl-C or SIGTERM stops", flush=True)
        stop.wait()
    if listener is not None:
        listener.close()
    print("stopped", flush=True)
    return 0


def serve_apache_kafka(topics: Sequence[tuple[str, int]], groups: Sequence[str]) -> int:
    """Apache Kafka's own broker with ``topics``; each of ``groups`` reads from the earliest offset."""
    stop = _stop_on_signal()
    with ApacheKafka() as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log.connection.close": False})
        for name, partitions in topics:
            create_topic(admin, name, partitions)
        for group in groups:
            set_group_configs(admin, group, {"share.auto.offset.reset": "earliest"})
        served = " ".join(f"{name}:{count}" for name, count in topics) or "(none)"
        print(f"bootstrap.servers={kafka.bootstrap_servers}", flush=True)
        print(f"ready: Apache Kafka, topics {served}; log {kafka.log_path}; Ctrl-C or SIGTERM stops", flush=True)
        stop.wait()
    print("stopped", flush=True)
    return 0
