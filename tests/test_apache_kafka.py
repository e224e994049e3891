"""The Apache Kafka broker the suite starts: up quickly, and never left behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap

import psutil
import pytest

from sharegroup_testing.apache_kafka import EPHEMERAL_PORTS, FIRST_CHOSEN_PORT, ApacheKafka, free_port
from sharegroup_testing.jars import JarsMissing, jar_dir
from sharegroup_testing.kafka_peers import wait_for

#: A process that starts a broker, says so, then waits to be killed.
_HOLDER = textwrap.dedent("""
    import sys, time
    from sharegroup_testing.apache_kafka import ApacheKafka
    kafka = ApacheKafka().start()
    print(kafka.bootstrap_servers, kafka.log_path, flush=True)
    time.sleep(600)
""")


def _brokers_of(pid: int) -> list[psutil.Process]:
    """Kafka JVMs among ``pid``'s descendants."""
    return [p for p in psutil.Process(pid).children(recursive=True) if "kafka.Kafka" in " ".join(p.cmdline())]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_no_broker_outlives_the_process_that_started_it(how: signal.Signals):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, text=True,
                              cwd=os.getcwd())
    try:
        line = holder.stdout.readline()
        assert line, "the broker did not start (the holder ended first)"
        jvms = _brokers_of(holder.pid)
        assert len(jvms) == 1, f"expected one Kafka JVM under the holder, found {jvms}"
        holder.send_signal(how)
        holder.wait(30)
        wait_for(lambda: not jvms[0].is_running() or jvms[0].status() == psutil.STATUS_ZOMBIE, 30,
                 f"the Kafka JVM {jvms[0].pid} to end after its starter got {how.name} (log: {line.split()[-1]})")
    finally:
        holder.kill()
        holder.wait(10)


def test_ready_within_thirty_seconds_with_its_log_named():
    with ApacheKafka(startup_timeout_s=30) as kafka:
        assert kafka.bootstrap_servers.startswith("127.0.0.1:")
        assert "Kafka Server started" in kafka.log_path.read_text(), kafka.log_path
    assert kafka.log_path.exists(), "the log stays after the broker stopped, to read a failure"


def test_missing_jars_are_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SHAREGROUP_JARS", str(tmp_path))
    with pytest.raises(JarsMissing, match=r"no jars in .*kafka: run `make jars`"):
        jar_dir("kafka")


def test_free_ports_lie_below_the_ports_the_kernel_hands_out():
    """A client still dialling a stopped broker's port never reaches a socket the kernel gave someone else since
    (Spark's one-shot collect() server took one such client's request for its authentication, CI 2026-11-30)."""
    first_ephemeral = int(EPHEMERAL_PORTS.read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert all(FIRST_CHOSEN_PORT <= port < first_ephemeral for port in ports), (first_ephemeral, ports)
    for port in ports:  # free when chosen: nothing listens there
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))
