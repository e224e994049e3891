"""Apache Kafka as production runs it: a SASL_SSL listener (SCRAM-SHA-512 and PLAIN users), TLS from a CA
made at start, and the StandardAuthorizer with no ACL meaning no access.

Clients connect to :attr:`SecuredKafka.bootstrap_servers` (SASL_SSL, hostname verification on: the
broker's certificate names ``127.0.0.1`` and ``localhost``); :meth:`SecuredKafka.client_config` gives a
user's librdkafka settings. The broker's own traffic (and the test's setup: topics, ACLs) uses a
PLAINTEXT listener on loopback whose principal, ``User:ANONYMOUS``, is a super user, as is ``admin``.

>>> with SecuredKafka(users={"alice": "alice-secret"}) as kafka:
...     kafka.allow("alice", "TOPIC", "orders", "READ")
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from sharegroup_testing.apache_kafka import ApacheKafka, BrokerStartError, KafkaNode, free_port

__all__ = ["ADMIN_USER", "SecuredKafka", "make_tls"]

#: The super user every SecuredKafka has (besides the internal listener's ANONYMOUS).
ADMIN_USER = ("admin", "admin-secret")
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def make_tls(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> dict[str, Path]:
    """A CA and a broker certificate signed by it, naming ``hosts`` in its SAN, as PEM files (openssl):
    ``ca`` (what clients trust), ``broker`` (the broker's key and certificate chain, PKCS#8 key)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (directory / n for n in ("ca.key", "ca.pem", "broker.key", "broker.csr",
                                                          "broker.crt"))
    san = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
    steps = [
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2",
         "-subj", "/CN=sharegroup-test-ca"],
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={hosts[0]}"],
        ["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
         "-days", "2", "-extfile", "/dev/stdin"],
    ]
    for step in steps:
        done = subprocess.run([str(a) for a in step], input=f"subjectAltName={san}\n", capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            raise BrokerStartError(f"openssl failed making the test certificates: {done.stderr.strip()[-500:]}")
    broker = directory / "broker.pem"
    broker.write_text(key.read_text() + cert.read_text() + ca.read_text())
    return {"ca": ca, "broker": broker}


class SecuredKafka(ApacheKafka):
    """A single-node Apache Kafka whose clients authenticate (SASL_SSL) and are authorized by ACLs.

    ``users``: name -> password, each a SCRAM-SHA-512 and a PLAIN user (plus :data:`ADMIN_USER`).
    """

    def __init__(self, users: Mapping[str, str] | None = None, settings: Mapping[str, str] | None = None,
                 **kwargs: Any):
        super().__init__(settings, **kwargs)
        self.users = {ADMIN_USER[0]: ADMIN_USER[1], **(users or {})}
        self.internal_servers = ""
        self.tls: dict[str, Path] = {}

    def _configure(self, node: KafkaNode) -> tuple[Mapping[str, str], Sequence[str]]:
        assert self.directory is not None
        # localhost left out: a client that connects by that name meets a hostname mismatch
        self.tls = make_tls(self.directory / "tls", hosts=("127.0.0.1",))
        secured = free_port()
        self.internal_servers = node.address
        self.bootstrap_servers = f"127.0.0.1:{secured}"
        plain_users = " ".join(f'user_{name}="{password}"' for name, password in self.users.items())
        settings = {
            "listeners": f"PLAINTEXT://{node.address},SASL_SSL://{self.bootstrap_servers},"
                         f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{node.address},SASL_SSL://{self.bootstrap_servers}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{_SCRAM} required;",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": f"{_PLAIN} required {plain_users};",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.tls["broker"]),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls["ca"]),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN_USER[0]};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }
        scram = [arg for name, password in self.users.items()
                 for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")]
        return settings, scram

    @property
    def ready_servers(self) -> str:
        return self.internal_servers

    def client_config(self, user: str, password: str | None = None, mechanism: str = "SCRAM-SHA-512",
                      **extra: Any) -> dict[str, Any]:
        """librdkafka settings of ``user`` on the SASL_SSL listener (``password`` default: the user's own)."""
        return {"bootstrap.servers": self.bootstrap_servers, "security.protocol": "SASL_SSL",
                "sasl.mechanism": mechanism, "sasl.username": user,
                "sasl.password": self.users[user] if password is None else password,
                "ssl.ca.location": str(self.tls["ca"]), **extra}

    @property
    def admin(self) -> AdminClient:
        """An admin client on the internal listener: a super user, for the test's own setup."""
        return AdminClient({"bootstrap.servers": self.internal_servers})

    def allow(self, user: str, resource: str, name: str, *operations: str) -> None:
        """Grant ``user`` the ``operations`` (READ, DESCRIBE, ...) on a TOPIC or GROUP named ``name``."""
        bindings = [AclBinding(ResourceType[resource], name, ResourcePatternType.LITERAL, f"User:{user}", "*",
                               AclOperation[operation], AclPermissionType.ALLOW) for operation in operations]
        admin = self.admin  # held while the futures run: a collected client cancels them
        for future in admin.create_acls(bindings, request_timeout=30).values():
            future.result()

    def revoke(self, user: str, resource: str, name: str) -> None:
        """Remove every ACL of ``user`` on the TOPIC or GROUP ``name``."""
        binding = AclBindingFilter(ResourceType[resource], name, ResourcePatternType.LITERAL, f"User:{user}", "*",
                                   AclOperation.ANY, AclPermissionType.ANY)
        admin = self.admin
        for future in admin.delete_acls([binding], request_timeout=30).values():
            future.result()
