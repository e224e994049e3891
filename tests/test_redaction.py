"""Secrets in options never reach logs, errors or reprs."""

import pytest

from sharegroup_source.coordinators.broker.share_client import ShareClient
from sharegroup_source.redaction import REDACTED, redact, redact_location
from sharegroup_testing.kafka_peers import KafkaUnderTest


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


def test_state_storage_options_are_secret():
    shown = redact({"stateStorage.AWS_SECRET_ACCESS_KEY": "hunter2", "STATESTORAGE.azure_storage_sas_token": "sig",
                    "statestorage.AWS_REGION": "eu-west-1"})
    assert set(shown.values()) == {REDACTED}, "every storage option may carry a credential, the region included"


@pytest.mark.parametrize(("location", "shown"), [
    ("/tmp/state", "/tmp/state"),
    ("s3://bucket/state", "s3://bucket/state"),
    ("/data/alice@example/state", "/data/alice@example/state"),
    ("abfss://container@account.dfs.core.windows.net/state", "abfss://container@account.dfs.core.windows.net/state"),
    ("s3a://AKIA:hunter2@bucket/state", f"s3a://{REDACTED}@bucket/state"),
    ("https://token@host/state", f"https://{REDACTED}@host/state"),
    ("https://acct.blob.core.windows.net/c/state?sv=2022&sig=hunter2", f"https://acct.blob.core.windows.net/c/state?{REDACTED}"),
    ("https://b.s3.amazonaws.com/s?X-Amz-Credential=AKIA&X-Amz-Signature=hunter2",
     f"https://b.s3.amazonaws.com/s?{REDACTED}"),
    ("gs://bucket/state#hunter2", f"gs://bucket/state#{REDACTED}"),
])
def test_location_credentials_are_redacted(location, shown):
    assert redact_location(location) == shown


def test_redact_hides_credentials_inside_location_options():
    shown = redact({"stateLocation": "s3a://AKIA:hunter2@bucket/s", "deadLetterLocation": "https://h/p?sig=hunter2",
                    "subscribe": "orders"})
    assert "hunter2" not in repr(shown) and shown["subscribe"] == "orders"


def test_state_table_messages_show_the_location_without_its_credentials(tmp_path):
    from state_store.delta_table import StateTable
    from state_store.ledger import LEDGER_SCHEMA

    signed = StateTable("s3://AKIAEXAMPLE:hunter2@bucket/state?X-Amz-Signature=abc123", "ledger", LEDGER_SCHEMA)
    assert "hunter2" not in signed.shown and "abc123" not in signed.shown and "bucket/state" in signed.shown
    local = StateTable(str(tmp_path), "ledger", LEDGER_SCHEMA)
    assert local.shown == local.uri
