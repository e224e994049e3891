"""The connector's words for a cluster that refuses the client: who was refused what, and never a secret.

librdkafka reports a refused login or TLS handshake as an error event while the call that needed
the connection waits out its timeout and then says "Broker transport failure": a wrong password
read as "cannot reach Kafka" after 30 s. A refused operation comes back as
``*_AUTHORIZATION_FAILED``, which librdkafka marks retriable although asking again changes
nothing until an administrator grants the ACL. Every client of the connector therefore collects
its error events (:class:`Refusals`), and a call that fails or answers with one of these errors
raises the connector's own error at once, with the broker's words kept:

- :class:`~sharegroup_source.errors.AuthenticationError` names the mechanism and the user;
- :class:`~sharegroup_source.errors.TlsError` names ``ssl.ca.location`` or the endpoint check;
- :class:`~sharegroup_source.errors.AuthorizationError` names the principal, the operation and the
  resource, as ``kafka-acls`` takes them.

Settings are named as librdkafka and ``DeltaShareConsumer`` take them; the source's options are
the same names with ``kafka.`` in front.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError

from sharegroup_source.errors import AuthenticationError, AuthorizationError, ClusterError, TlsError

__all__ = ["REFUSALS", "Refusals", "is_refusal", "principal_of", "refusal"]

_AUTHENTICATION = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                             KafkaError.UNSUPPORTED_SASL_MECHANISM, KafkaError.ILLEGAL_SASL_STATE})
#: The resource type each authorization error is about, as ``kafka-acls`` names it.
_AUTHORIZATION = {KafkaError.TOPIC_AUTHORIZATION_FAILED: "TOPIC", KafkaError.GROUP_AUTHORIZATION_FAILED: "GROUP",
                  KafkaError.CLUSTER_AUTHORIZATION_FAILED: "CLUSTER",
                  KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TRANSACTIONAL_ID"}
#: Errors that asking again does not cure.
REFUSALS = frozenset({*_AUTHENTICATION, KafkaError._SSL, *_AUTHORIZATION})


def is_refusal(error: KafkaError) -> bool:
    """Whether the cluster refused the client (its credentials, its TLS trust, or an ACL)."""
    return error.code() in REFUSALS


def principal_of(config: Mapping[str, Any]) -> str:
    """The principal the broker sees, as far as the client's settings tell."""
    mechanism = str(config.get("sasl.mechanism", config.get("sasl.mechanisms", "GSSAPI"))).upper()
    protocol = str(config.get("security.protocol", "plaintext")).upper()
    if protocol.startswith("SASL") and mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        return f"User:{config.get('sasl.username', '')}"
    if protocol.startswith("SASL"):
        return f"the principal of the client's {mechanism} login"
    if protocol == "SSL":
        return "the principal of the client's certificate (ssl.certificate.location)"
    return "User:ANONYMOUS"


def refusal(error: KafkaError, config: Mapping[str, Any], operation: str = "", topics: Sequence[str] = (),
            group: str | None = None, needs: str = "") -> ClusterError | None:
    """The connector's error for ``error`` if the cluster refused the client, else None.

    ``operation`` is what the failed call needed of the resource (``READ``, ``DESCRIBE``), ``topics``
    and ``group`` the resources it was about; ``needs`` says what the whole job needs, for the
    administrator who grants one ACL and would meet the next refusal.
    """
    code, servers, words = error.code(), config.get("bootstrap.servers", ""), error.str()
    if code in _AUTHENTICATION:
        mechanism = config.get("sasl.mechanism", config.get("sasl.mechanisms", "GSSAPI"))
        return AuthenticationError(
            f"Kafka at bootstrap.servers={servers} refused the login of user {config.get('sasl.username', '')!r} "
            f"with SASL mechanism {mechanism} (sasl.username, sasl.password, sasl.mechanism): {words}")
    if code == KafkaError._SSL:
        if "certificate verify failed" in words and _chain_is_trusted(config):
            return TlsError(
                f"the TLS certificate of Kafka at bootstrap.servers={servers} does not name the host connected to "
                f"(ssl.endpoint.identification.algorithm={config.get('ssl.endpoint.identification.algorithm', 'https')}"
                f" checks it: connect by a name in the certificate): {words}")
        return TlsError(
            f"Kafka at bootstrap.servers={servers} presented a TLS certificate the client does not trust: "
            f"ssl.ca.location={config.get('ssl.ca.location', '(not set: the system CAs)')} must hold the CA that "
            f"signed it: {words}")
    resource = _AUTHORIZATION.get(code)
    if resource is None:
        return None
    names = [group] if resource == "GROUP" and group else list(topics) if resource == "TOPIC" else []
    named = f"{resource} {', '.join(names)}" if names else resource
    operation = f"{operation} on" if operation else "use"
    grant = (f"; kafka-acls --add --allow-principal {principal_of(config)} --operation {operation.split()[0]} "
             f"--{resource.lower().replace('_', '-')} {names[0]}" if operation != "use" and len(names) == 1 else "")
    needed = f"; {needs}" if needs else ""
    return AuthorizationError(f"{principal_of(config)} is not authorized to {operation} {named} at "
                              f"bootstrap.servers={servers} ({words}){grant}{needed}")


def _chain_is_trusted(config: Mapping[str, Any], timeout_s: float = 5.0) -> bool:
    """Whether the first bootstrap server's certificate chain verifies against ``ssl.ca.location`` when its host name
    is not checked. librdkafka says "certificate verify failed" for an untrusted CA and for a certificate that does
    not name the host alike; a handshake of Python's own ``ssl`` with the name check off tells them apart."""
    first = str(config.get("bootstrap.servers", "")).split(",")[0].strip().rpartition("://")[2]
    host, _, port = first.rpartition(":")
    context = ssl.create_default_context(cafile=config.get("ssl.ca.location") or None)
    context.check_hostname = False
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as connection, \
                context.wrap_socket(connection, server_hostname=host.strip("[]")):
            return True
    except (OSError, ValueError):  # ssl.SSLCertVerificationError among them: the chain itself is not trusted
        return False


class Refusals:
    """A client's ``error_cb``: keeps the first refusal among its error events, for the call that then fails.

    librdkafka calls it from the client's ``poll``; the events say why a connection was closed
    (``_AUTHENTICATION``, ``_SSL``) while the call waiting for that connection only times out.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.first: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if is_refusal(error):
            with self._lock:
                self.first = self.first or error
