"""The CLI on secured clusters and object stores: --command-config FILE and --storage-option KEY=VALUE.

The file is what Kafka's own tools take (a Java properties file of Java client settings); the
CLI's client is librdkafka, so the settings are translated where the names differ, and refused,
naming the setting, where librdkafka has nothing to match. Secrets appear in no output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sharegroup_source import admin, cli
from sharegroup_source.cli import ClientSettings, read_command_config
from sharegroup_source.errors import OptionError
from sharegroup_source.kafka.java_properties import read_properties
from sharegroup_source.kafka.java_settings import translate_java_settings
from tests.test_admin import _cli, _group_at

SECRET = "hunter2-not-the-password"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required \\\n'
              f'    username="alice" \\\n    password="{SECRET}";\n')


def _properties(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory) -> Path:
    """A real CA certificate in PEM, made by openssl: librdkafka loads it when it builds the client."""
    folder = tmp_path_factory.mktemp("ca")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
                    "-keyout", str(folder / "ca.key"), "-out", str(folder / "ca.pem")],
                   check=True, capture_output=True)
    return folder / "ca.pem"


def test_a_properties_file_is_read_as_java_reads_it():
    text = ("# a comment\n! another\n\n"
            "security.protocol = SASL_SSL\n"
            "sasl.mechanism: PLAIN\n"
            "client.id   sharegroup-cli\n"
            "sasl.jaas.config=one \\\n   two\\\n three\n"  # a continued line's leading blanks go
            "path=C:\\\\certs\\\\ca.pem\n"
            "escaped\\=key=caf\\u00e9\n"
            "empty=\n")
    assert read_properties(text) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "client.id": "sharegroup-cli",
        "sasl.jaas.config": "one twothree", "path": "C:\\certs\\ca.pem", "escaped=key": "café", "empty": ""}


def test_sasl_plain_over_tls_becomes_librdkafkas_settings(tmp_path, ca_pem):
    path = _properties(tmp_path, "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                                 f"sasl.jaas.config={PLAIN_JAAS}"
                                 f"ssl.truststore.type=PEM\nssl.truststore.location={ca_pem}\n"
                                 "ssl.endpoint.identification.algorithm=\n"
                                 "client.id=ops\nrequest.timeout.ms=20000\n"
                                 "stateStorage.aws_secret_access_key=from-the-file\nstateStorage.aws_region=eu-west-1\n")
    settings = read_command_config(str(path), ["aws_region=us-east-1", "stateStorage.aws_access_key_id=AKIAX"])
    assert dict(settings.kafka) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": SECRET,
        "ssl.ca.location": str(ca_pem), "ssl.endpoint.identification.algorithm": "none",
        "client.id": "ops", "request.timeout.ms": "20000"}
    # the command line wins over the file; the prefix is optional there
    assert dict(settings.storage) == {"aws_secret_access_key": "from-the-file", "aws_region": "us-east-1",
                                      "aws_access_key_id": "AKIAX"}
    assert SECRET not in repr(settings) and "from-the-file" not in repr(settings)
    assert {SECRET, "from-the-file", "AKIAX", "us-east-1"} <= settings.secrets()


def test_scram_oauth_and_a_pkcs12_keystore_are_translated(tmp_path):
    scram = translate_java_settings({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" '
                            f'password="{SECRET}";'})
    assert (scram["sasl.username"], scram["sasl.password"]) == ("u", SECRET)
    oauth = translate_java_settings({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.login.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                            f'clientId="svc" clientSecret="{SECRET}" scope="kafka";'})
    assert {k: v for k, v in oauth.items() if k.startswith("sasl.oauthbearer")} == {
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "svc",
        "sasl.oauthbearer.client.secret": SECRET, "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token"}
    assert "sasl.login.callback.handler.class" not in oauth
    keystore = tmp_path / "client.p12"
    pkcs12 = translate_java_settings({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(keystore),
                                      "ssl.keystore.password": SECRET, "security.protocol": "PLAINTEXT"})
    assert (pkcs12["ssl.keystore.location"], pkcs12["ssl.keystore.password"]) == (str(keystore), SECRET)


@pytest.mark.parametrize(("text", "named"), [
    (f"ssl.truststore.location=/etc/kafka/truststore.jks\nssl.truststore.password={SECRET}\n",
     "setting 'ssl.truststore.location' is a JKS truststore"),
    (f"ssl.keystore.location=/etc/kafka/keystore.jks\nssl.keystore.password={SECRET}\n",
     "setting 'ssl.keystore.location' is a JKS keystore"),
    (f'sasl.jaas.config=com.example.CustomLoginModule required secret="{SECRET}";\n',
     "login module com.example.CustomLoginModule"),
    (f'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="a" '
     f'password="{SECRET}" unknownOption="x";\n', "option unknownOption of"),
    (f"sasl.jaas.config={SECRET}\n", "is not one login module line"),
    ("default.api.timeout.ms=60000\n", "setting 'default.api.timeout.ms'"),
    ("value.deserializer=org.apache.kafka.common.serialization.StringDeserializer\n",
     "setting 'value.deserializer' is a Java Kafka client setting"),
    (f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.jaas.config={PLAIN_JAAS}"
     "ssl.truststore.type=PEM\nssl.truststore.location=/no/such/ca.pem\n",
     "setting 'ssl.truststore.location' (librdkafka's ssl.ca.location)"),
], ids=["jks-truststore", "jks-keystore", "login-module", "jaas-option", "jaas-garbled", "unknown-setting",
        "deserializer", "missing-ca-file"])
def test_what_librdkafka_cannot_take_is_refused_naming_the_setting_never_a_secret(tmp_path, capsys, text, named):
    path = _properties(tmp_path, text)
    with pytest.raises(OptionError) as refused:
        read_command_config(str(path))
    assert named in str(refused.value) and f"--command-config {path}" in str(refused.value), refused.value
    assert SECRET not in str(refused.value)
    code, out, err = _cli(capsys, "describe", str(tmp_path / "nowhere"), "--command-config", str(path))
    assert code == 1 and named in err and SECRET not in out + err, err


def test_a_storage_option_without_a_value_is_refused_without_echoing_it(capsys, tmp_path):
    code, out, err = _cli(capsys, "delete-offsets", str(tmp_path), "--topic", "t", "--storage-option", SECRET)
    assert code == 1 and "--storage-option takes KEY=VALUE" in err and SECRET not in out + err, err
    with pytest.raises(OptionError, match="cannot read it"):
        read_command_config(str(tmp_path / "missing.properties"))


def test_help_names_the_flags_and_says_values_are_never_printed():
    for command in cli.ADMIN_COMMANDS:
        result = subprocess.run([sys.executable, "-m", "sharegroup_source.cli", command, "--help"],
                                capture_output=True, text=True, check=True)
        assert "--command-config FILE" in result.stdout and "--storage-option KEY=VALUE" in result.stdout
        assert "never printed" in result.stdout, result.stdout


def _topic_with_a_group(kafka, tmp_path: Path) -> tuple[str, Path]:
    topic = kafka.new_topic(2)
    kafka.produce_numbered(topic, 20, 2)  # 10 per partition
    location = tmp_path / "group"
    _group_at(location, "ops-group", 4, [(topic, 0), (topic, 1)])
    return topic, location


def test_describe_takes_its_cluster_and_client_settings_from_the_file(kafka, tmp_path, capsys):
    topic, location = _topic_with_a_group(kafka, tmp_path)
    path = _properties(tmp_path, f"bootstrap.servers={kafka.bootstrap_servers}\nclient.id=sharegroup-ops\n"
                                 "request.timeout.ms=15000\nsocket.keepalive.enable=true\n")
    code, out, err = _cli(capsys, "describe", str(location), "--command-config", str(path), "--json")
    assert code == 0, err
    [group] = [admin.GroupDescription.from_dict(g) for g in json.loads(out)]
    assert [(p.topic, p.partition, p.spso, p.log_end_offset, p.lag) for p in group.partitions] == [
        (topic, 0, 4, 10, 6), (topic, 1, 4, 10, 6)], "the file's bootstrap.servers was asked for the log offsets"


def test_credentials_the_cluster_refuses_fail_the_describe_and_are_not_printed(kafka, tmp_path, capsys, monkeypatch):
    """SASL settings against the test broker's PLAINTEXT listener: the client cannot talk to it, the describe
    fails naming the cluster, and the password is in no output. Without the file the same describe works."""
    monkeypatch.setattr(admin.cluster, "KAFKA_TIMEOUT_S", 3.0)
    _, location = _topic_with_a_group(kafka, tmp_path)
    servers = ["--bootstrap-servers", kafka.bootstrap_servers]
    assert _cli(capsys, "describe", str(location), *servers)[0] == 0
    path = _properties(tmp_path, "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                                 f"sasl.jaas.config={PLAIN_JAAS}")
    code, out, err = _cli(capsys, "describe", str(location), *servers, "--command-config", str(path))
    assert code == 1 and f"cannot reach Kafka at bootstrap.servers={kafka.bootstrap_servers}" in err, err
    assert SECRET not in out + err


def test_storage_options_reach_the_store_and_are_not_printed(capsys):
    """An S3 location whose endpoint (a storage option) refuses connections: the error is the store's, so
    the options reached delta-rs; the secret key is in no output."""
    options = ["aws_endpoint=http://127.0.0.1:1", "aws_region=us-east-1", "aws_allow_http=true",
               "aws_access_key_id=AKIAEXAMPLE", f"aws_secret_access_key={SECRET}"]
    code, out, err = _cli(capsys, "describe", "s3://bucket/state", *[
        a for option in options for a in ("--storage-option", option)])
    assert code == 1 and "the store cannot be reached: check its address and the storage options" in err, err
    assert SECRET not in out + err and "AKIAEXAMPLE" not in out + err


def test_client_settings_show_no_values():
    settings = ClientSettings({"sasl.password": SECRET}, {"aws_secret_access_key": SECRET})
    assert SECRET not in repr(settings) and SECRET not in str(settings)
