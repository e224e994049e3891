"""A local share-group broker served in the foreground, for ``sharegroup broker`` and ``sharegroup kafka``.

Each prints the bootstrap servers and a ``ready`` line, then serves until Ctrl-C or SIGTERM.
``sharegroup kafka --secured`` serves :class:`~sharegroup_testing.secured_kafka.SecuredKafka`
(SASL_SSL, ACLs) and prints first how to connect: the CA to trust, the users, the admin address.
"""

from __future__ import annotations

import secrets
import signal
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka.admin import AclOperation, AdminClient, ResourceType

from sharegroup_testing.apache_kafka import ApacheKafka, BrokerStartError, create_topic, set_group_configs
from sharegroup_testing.embedded_broker import BrokerError, EmbeddedBroker
from sharegroup_testing.jars import JarsMissing
from sharegroup_testing.secured_kafka import ADMIN_USER, SecuredKafka

__all__ = ["DEFAULT_USER", "SERVE_ERRORS", "Grant", "ServeError", "generated_password", "serve_apache_kafka",
           "serve_embedded_broker", "serve_secured_kafka"]


class ServeError(Exception):
    """A broker the command line asked for that cannot be served as asked (a grant naming an unknown user...)."""


#: What stops a broker from being served: the command prints it in one line, without a traceback.
SERVE_ERRORS = (BrokerError, BrokerStartError, JarsMissing, ServeError)

#: The user ``sharegroup kafka --secured`` makes when no --user is given (its password generated).
DEFAULT_USER = "app"


def generated_password() -> str:
    """A throwaway user's password: letters, digits, - and _ only, so Kafka's JAAS line and SCRAM's
    ``[name=...,password=...]`` take it unquoted."""
    return secrets.token_urlsafe(12)


@dataclass(frozen=True)
class Grant:
    """An ACL ``sharegroup kafka --secured --allow USER:RESOURCE:NAME:OP[,OP...]`` adds at start."""

    user: str
    resource: str  # TOPIC, GROUP, ...: a confluent_kafka ResourceType name
    name: str
    operations: tuple[str, ...]  # READ, WRITE, DESCRIBE, ...: AclOperation names

    def kafka_acls(self, admin_servers: str) -> str:
        """The same grant as Kafka's own tool adds it, on the PLAINTEXT listener (a super user there)."""
        operations = " ".join(f"--operation {op}" for op in self.operations)
        return (f"kafka-acls.sh --bootstrap-server {admin_servers} --add --allow-principal User:{self.user} "
                f"{operations} --{self.resource.lower().replace('_', '-')} {self.name}")


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


def _check_grants(grants: Sequence[Grant], users: Sequence[str]) -> None:
    """Refuse, before the JVM starts, a --allow naming a user, resource or operation Kafka would not know."""
    for grant in grants:
        if grant.user not in users:
            raise ServeError(f"--allow {grant.user}:...: no user {grant.user!r} (users: {', '.join(users)})")
        if grant.resource not in ResourceType.__members__:
            raise ServeError(f"--allow ...:{grant.resource}:...: resource types are TOPIC, GROUP, CLUSTER, "
                             "TRANSACTIONAL_ID")
        unknown = [op for op in grant.operations if op not in AclOperation.__members__ or op in ("UNKNOWN", "ANY")]
        if unknown:
            raise ServeError(f"--allow ...:{','.join(unknown)}: operations are "
                             + ", ".join(op for op in AclOperation.__members__ if op not in ("UNKNOWN", "ANY")))


def _connection_lines(kafka: SecuredKafka, generated: Mapping[str, str], grants: Sequence[Grant],
                      topics: Sequence[tuple[str, int]], groups: Sequence[str]) -> list[str]:
    """How to connect, printed before ``ready``. A password is shown only when this run generated it: the
    broker is local and thrown away at stop, so it protects nothing, and without it the user is of no use.
    A password given with --user is the caller's, who has it already: it is never printed back, as no
    command of the project prints a secret it was given."""
    lines = [f"bootstrap.servers={kafka.bootstrap_servers}", "security.protocol=SASL_SSL",
             "sasl.mechanism=SCRAM-SHA-512 (or PLAIN)", f"ssl.ca.location={kafka.tls['ca']}"]
    for user in kafka.users:
        if user in generated:
            lines.append(f"user {user}: password={generated[user]} (generated for this run)")
        elif user != ADMIN_USER[0]:
            lines.append(f"user {user}: password given with --user (not printed)")
    lines.append(f"user {ADMIN_USER[0]}: a super user (its password: ADMIN_USER in {SecuredKafka.__module__})")
    lines.append(f"admin.bootstrap.servers={kafka.internal_servers} (PLAINTEXT on loopback, no login: a super user, "
                 "for topics and ACLs)")
    lines += [f"granted: User:{g.user} {','.join(g.operations)} on {g.resource} {g.name}" for g in grants]
    user = next((u for u in kafka.users if u != ADMIN_USER[0]), ADMIN_USER[0])
    topic = topics[0][0] if topics else "TOPIC"
    group = groups[0] if groups else "GROUP"
    examples = [Grant(user, "TOPIC", topic, ("READ",)), Grant(user, "GROUP", group, ("READ",)),
                Grant(user, "TOPIC", topic, ("WRITE",))]
    lines.append("no ACL means no access: a share-group query needs READ on its topics and its group, a producer "
                 f"WRITE; grant them with --allow {user}:TOPIC:{topic}:READ, or Kafka's own tool:")
    lines += [f"  {example.kafka_acls(kafka.internal_servers)}" for example in examples]
    return lines


def serve_secured_kafka(topics: Sequence[tuple[str, int]], groups: Sequence[str], users: Mapping[str, str | None],
                        grants: Sequence[Grant] = ()) -> int:
    """Apache Kafka with a SASL_SSL listener and ACLs (no ACL: no access), ``users`` name -> password (None:
    generated; no user: :data:`DEFAULT_USER`, generated), ``grants`` added at start."""
    if ADMIN_USER[0] in users:
        raise ServeError(f"--user {ADMIN_USER[0]}: that name is the broker's super user; choose another")
    chosen = dict(users) or {DEFAULT_USER: None}
    _check_grants(grants, [*chosen, ADMIN_USER[0]])
    generated = {name: generated_password() for name, password in chosen.items() if password is None}
    stop = _stop_on_signal()
    kafka = SecuredKafka(users={name: password or generated[name] for name, password in chosen.items()})
    with kafka:
        # the PLAINTEXT listener's ANONYMOUS, a super user; quiet when the broker stops under it
        admin = AdminClient({"bootstrap.servers": kafka.internal_servers, "log.connection.close": False})
        for name, partitions in topics:
            create_topic(admin, name, partitions)
        for group in groups:
            set_group_configs(admin, group, {"share.auto.offset.reset": "earliest"})
        for grant in grants:
            kafka.allow(grant.user, grant.resource, grant.name, *grant.operations)
        for line in _connection_lines(kafka, generated, grants, topics, groups):
            print(line, flush=True)
        served = " ".join(f"{name}:{count}" for name, count in topics) or "(none)"
        print(f"ready: Apache Kafka (SASL_SSL, ACLs), topics {served}; log {kafka.log_path}; Ctrl-C or SIGTERM stops",
              flush=True)
        stop.wait()
    print("stopped", flush=True)
    return 0
