"""Secrets in options never reach logs, errors or reprs."""

from sharegroup_source.redaction import REDACTED, redact
from sharegroup_source.share_client import ShareClient
from tests.kafka_under_test import KafkaUnderTest


def test_security_settings_are_redacted_and_the_rest_kept():
    options = {
        "kafka.bootstrap.servers": "b:9092",
        "kafka.sasl.jaas.config": "... password='hunter2';",
        "kafka.sasl.username": "alice",
        "kafka.ssl.key.password": "hunter2",
        "kafka.ssl.truststore.location": "/etc/ts.jks",
        "sasl.password": "hunter2",
        "subscribe": "orders",
    }
    shown = redact(options)
    assert "hunter2" not in repr(shown) and "alice" not in repr(shown)
    assert shown["kafka.bootstrap.servers"] == "b:9092" and shown["subscribe"] == "orders"
    assert shown["kafka.ssl.truststore.location"] == "/etc/ts.jks"
    assert shown["kafka.ssl.key.password"] == REDACTED


def test_share_client_repr_hides_credentials(kafka: KafkaUnderTest):
    topic = kafka.new_topic(1)
    with ShareClient(kafka.config(**{"group.id": "g", "sasl.password": "hunter2"}), [topic]) as client:
        assert "hunter2" not in repr(client) and REDACTED in repr(client)
