"""The admin on a broker that authenticates (SASL_SSL, SCRAM) and authorizes (ACLs, no ACL: no access).

A group the user may not DESCRIBE is that group's error line; the groups it may are described; the
Java client settings file Kafka's tools take (``--command-config``) works as it does for them; no
password reaches the output.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from sharegroup_source.admin import describe_groups, reset_offsets
from sharegroup_source.errors import AuthenticationError
from sharegroup_source.kafka.metadata import check_login
from sharegroup_testing.apache_kafka import create_topic
from sharegroup_testing.secured_kafka import SecuredKafka
from tests.test_admin import _cli

pytestmark = pytest.mark.secured


def _properties(secured: SecuredKafka, tmp_path: Path, user: str) -> Path:
    """A --command-config file as Kafka's tools take it: the Java client's settings."""
    path = tmp_path / f"{user}.properties"
    path.write_text(f"bootstrap.servers={secured.bootstrap_servers}\nsecurity.protocol=SASL_SSL\n"
                    "sasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config=org.apache.kafka.common.security.scram."
                    f'ScramLoginModule required username="{user}" password="{secured.users[user]}";\n'
                    f"ssl.truststore.type=PEM\nssl.truststore.location={secured.tls['ca']}\n")
    return path


def test_a_group_the_user_may_not_describe_is_its_own_line_and_the_others_are_described(secured_kafka, tmp_path,
                                                                                        capsys):
    secured = secured_kafka
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    create_topic(secured.admin, topic, 2)
    producer = Producer({"bootstrap.servers": secured.internal_servers})
    for n in range(10):
        producer.produce(topic, value=str(n).encode(), partition=n % 2)
    assert producer.flush(30) == 0
    visible, hidden = f"visible-{topic}", f"hidden-{topic}"
    admin = secured.client_config("admin")
    for group in (visible, hidden):
        reset_offsets(group=group, to="earliest", topics=[topic], execute=True, kafka_config=admin)
    secured.allow("alice", "GROUP", visible, "DESCRIBE")
    secured.allow("alice", "TOPIC", topic, "DESCRIBE")

    described = describe_groups(groups=[visible, hidden], kafka_config=secured.client_config("alice"))
    assert [(d.group_id, d.error) for d in described] == [
        (visible, None), (hidden, f"not authorized to DESCRIBE GROUP {hidden} (GROUP_AUTHORIZATION_FAILED)")]
    assert [(p.partition, p.spso, p.lag) for p in described[0].partitions] == [(0, 0, 5), (1, 0, 5)]
    listed = describe_groups(all_groups=True, kafka_config=secured.client_config("alice"))
    assert visible in {d.group_id for d in listed} and hidden not in {d.group_id for d in listed}
    assert {visible, hidden} <= {d.group_id for d in describe_groups(all_groups=True, kafka_config=admin)}

    config = _properties(secured, tmp_path, "alice")
    code, out, err = _cli(capsys, "describe", "--group", visible, "--group", hidden, "--command-config", str(config))
    print(out, err)
    assert code == 1 and re.search(rf"^{visible}\s+{topic}\s+1\s+0\s+5\s", out, re.MULTILINE), out
    assert err.strip().splitlines() == [
        f"sharegroup: error: (group {hidden}): not authorized to DESCRIBE GROUP {hidden} (GROUP_AUTHORIZATION_FAILED)"]
    assert secured.users["alice"] not in out + err


def test_a_refused_login_is_said_at_once_by_the_admin_and_its_cli(secured_kafka, tmp_path, capsys):
    """Not "cannot reach Kafka" after the whole timeout: the user and the mechanism, within seconds, no password."""
    secured = secured_kafka
    wrong = secured.client_config("alice", password="nope-Wrong-9")
    started = time.monotonic()
    [described] = describe_groups(groups=["orders"], kafka_config=wrong)
    assert time.monotonic() - started < 10
    assert described.error is not None and described.error.startswith(
        f"Kafka at bootstrap.servers={secured.bootstrap_servers} refused the login of user 'alice' with SASL "
        "mechanism SCRAM-SHA-512"), described.error
    config = _properties(secured, tmp_path, "alice")
    config.write_text(config.read_text().replace(secured.users["alice"], "nope-Wrong-9"))
    code, out, err = _cli(capsys, "describe", "--group", "orders", "--command-config", str(config))
    assert code == 1 and "refused the login of user 'alice'" in err, err
    assert "nope-Wrong-9" not in out + err and "nope-Wrong-9" not in described.error


def test_librdkafka_reads_the_refusal_kafka_python_may_drop(secured_kafka):
    """What the admin asks when its kafka-python bootstrap failed for no reason it saw.

    Kafka closes a refused login's connection right after its answer, and kafka-python's transport drops bytes
    read together with the close: on a busy machine the admin's bootstrap may see only "socket disconnected".
    librdkafka reads the answer; ``check_login`` says it as the connector's error, and lets a good login pass.
    """
    secured = secured_kafka
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as refused:
        check_login(secured.client_config("alice", password="nope-Wrong-9"), timeout_s=10)
    assert time.monotonic() - started < 10
    assert str(refused.value).startswith(
        f"Kafka at bootstrap.servers={secured.bootstrap_servers} refused the login of user 'alice' with SASL "
        "mechanism SCRAM-SHA-512"), refused.value
    assert "nope-Wrong-9" not in str(refused.value)
    check_login(secured.client_config("alice"), timeout_s=10)
