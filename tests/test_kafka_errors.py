"""The connector's words for refusals, without a broker: who, what, which setting; never retried; no secret."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from sharegroup_source.errors import AuthenticationError, AuthorizationError, ClusterError
from sharegroup_source.kafka.errors import principal_of, refusal
from sharegroup_source.kafka.transient import is_transient, retry_transient

SCRAM = {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
         "sasl.username": "alice", "sasl.password": "hunter2-Secret"}


@pytest.mark.parametrize(("config", "principal"), [
    (SCRAM, "User:alice"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"},
     "the principal of the client's OAUTHBEARER login"),
    ({"security.protocol": "SSL"}, "the principal of the client's certificate (ssl.certificate.location)"),
    ({}, "User:ANONYMOUS"),
])
def test_the_principal_is_what_the_settings_tell(config, principal):
    assert principal_of(config) == principal


def test_a_missing_acl_is_marked_retriable_by_the_client_yet_never_transient():
    refused = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", retriable=True)
    assert refused.retriable() and not is_transient(refused)
    assert not is_transient(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error", retriable=True))
    assert is_transient(KafkaError(KafkaError.NOT_COORDINATOR, "moved"))


def test_retry_transient_raises_the_refusal_at_the_first_attempt():
    from confluent_kafka import KafkaException

    attempts = []

    def refused() -> None:
        attempts.append(1)
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed",
                                        retriable=True))

    with pytest.raises(AuthorizationError, match=r"^User:alice is not authorized to DESCRIBE on TOPIC orders "):
        retry_transient(refused, "read log offsets", "b:9093",
                        explain=lambda error: refusal(error, SCRAM, "DESCRIBE", topics=["orders"]))
    assert attempts == [1]


def test_each_refusal_names_what_is_wrong_and_no_password():
    login = refusal(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: invalid credentials"), SCRAM)
    assert isinstance(login, AuthenticationError) and isinstance(login, ClusterError)
    assert str(login).startswith("Kafka at bootstrap.servers=b:9093 refused the login of user 'alice' with SASL "
                                 "mechanism SCRAM-SHA-512")
    group = refusal(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."), SCRAM, "READ",
                    topics=["orders"], group="orders-workers", needs="a member needs READ on its GROUP")
    assert str(group) == ("User:alice is not authorized to READ on GROUP orders-workers at bootstrap.servers=b:9093 "
                          "(Group authorization failed.); kafka-acls --add --allow-principal User:alice --operation "
                          "READ --group orders-workers; a member needs READ on its GROUP")
    assert refusal(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "no such topic"), SCRAM) is None
    assert all("hunter2-Secret" not in str(error) for error in (login, group))
