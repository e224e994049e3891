"""``sharegroup kafka --secured``: the command's printed connection details are enough to connect.

The command is run as a developer runs it, in its own process; a client that knows only what it
printed logs in over SASL_SSL trusting the printed CA, is authorized for what --allow granted and
refused the rest (no ACL: no access), and a signal stops the broker cleanly. A password given with
--user is never printed back.
"""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

pytestmark = pytest.mark.secured

SHAREGROUP = Path(sys.executable).parent / "sharegroup"
#: A JVM, openssl and the SCRAM users: under a loaded machine's suite this takes a while.
START_TIMEOUT_S = 180.0


def _lines(stream: IO[str]) -> queue.Queue[str | None]:
    """The stream's lines as they come (None at its end): the test polls them with a deadline."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _until_ready(lines: queue.Queue[str | None], timeout_s: float) -> list[str]:
    """Every line up to and with ``ready``; fails with what was printed when the command ended or took too long."""
    printed: list[str] = []
    deadline = time.monotonic() + timeout_s
    while not (printed and printed[-1].startswith("ready:")):
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"no ready line within {timeout_s:.0f} s; printed: {printed}")
        if line is None:
            pytest.fail(f"the command ended before its ready line; printed: {printed}")
        printed.append(line)
    return printed


def _details(printed: list[str]) -> dict[str, str]:
    """The key=value lines and the users' passwords (``password.NAME``) as printed."""
    details = {m[1]: m[2] for line in printed if (m := re.fullmatch(r"([a-z.]+)=(\S+).*", line))}
    details |= {f"password.{m[1]}": m[2] for line in printed
                if (m := re.fullmatch(r"user (\S+): password=(\S+) \(generated for this run\)", line))}
    return details


def _sasl_ssl(details: dict[str, str], user: str, password: str, mechanism: str) -> dict[str, str]:
    return {"bootstrap.servers": details["bootstrap.servers"], "security.protocol": details["security.protocol"],
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": details["ssl.ca.location"]}


def test_a_client_connects_with_what_the_command_printed_and_no_acl_means_no_access(tmp_path: Path) -> None:
    topic, given = f"orders-{uuid.uuid4().hex[:6]}", f"given-{uuid.uuid4().hex[:8]}"
    command = subprocess.Popen(
        [str(SHAREGROUP), "kafka", "--secured", "--topic", f"{topic}:2", "--user", "alice", "--user", f"bob={given}",
         "--allow", f"alice:TOPIC:{topic}:DESCRIBE"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    output, errors = _lines(command.stdout), _lines(command.stderr)  # drained as they come: a full pipe blocks
    printed: list[str] = []
    try:
        printed = _until_ready(output, START_TIMEOUT_S)
        details = _details(printed)
        assert details["security.protocol"] == "SASL_SSL"
        assert Path(details["ssl.ca.location"]).is_file()
        assert "password.alice" in details, printed
        assert "user bob: password given with --user (not printed)" in printed
        assert f"granted: User:alice DESCRIBE on TOPIC {topic}" in printed
        assert any(f"--allow-principal User:alice --operation WRITE --topic {topic}" in line for line in printed)

        alice = _sasl_ssl(details, "alice", details["password.alice"], "SCRAM-SHA-512")
        listed = AdminClient(alice).list_topics(timeout=30)
        assert topic in listed.topics and len(listed.topics[topic].partitions) == 2, "DESCRIBE was granted"
        bob = AdminClient(_sasl_ssl(details, "bob", given, "PLAIN")).list_topics(timeout=30)
        assert topic not in bob.topics, "bob has no ACL: the topic is not even described to him"

        outcomes: list[KafkaError | None] = []
        producer = Producer({**alice, "message.timeout.ms": 30_000})
        producer.produce(topic, b"refused", on_delivery=lambda error, _: outcomes.append(error))
        producer.flush(45)
        assert len(outcomes) == 1 and outcomes[0] is not None, "a producer without WRITE is refused"
        assert outcomes[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, outcomes[0]

        wrong = AdminClient({**_sasl_ssl(details, "alice", "not-the-password", "SCRAM-SHA-512"),
                             "socket.timeout.ms": 10_000})
        with pytest.raises(KafkaException):
            wrong.list_topics(timeout=10)

        admin = AdminClient({"bootstrap.servers": details["admin.bootstrap.servers"]})
        assert topic in admin.list_topics(timeout=30).topics, "the PLAINTEXT address is a super user's"
    finally:
        command.send_signal(signal.SIGINT)  # what Ctrl-C sends
        try:
            command.wait(timeout=60)
        except subprocess.TimeoutExpired:
            command.kill()
            command.wait()
            pytest.fail("SIGINT did not stop the command within 60 s")
    assert command.returncode == 0
    out, err = _rest(output), _rest(errors)
    assert out[-1:] == ["stopped"], out
    assert not [line for line in err if "Traceback" in line], err
    assert given not in "\n".join(printed + out + err), "a given password is never printed"


def _rest(lines: queue.Queue[str | None]) -> list[str]:
    """The lines still to come of an ended process's stream."""
    rest: list[str] = []
    while (line := lines.get(timeout=10)) is not None:
        rest.append(line)
    return rest
