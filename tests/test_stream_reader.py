"""The driver-side worker under Spark's SIGTERMs: its records go back and its member leaves."""

from __future__ import annotations

import os
import signal

from sharegroup_source.share_client import Ack, ShareClient
from state_store import StateStore
from tests.kafka_under_test import wait_for
from tests.streams import StreamSetup, worker_holding_an_epoch


def test_a_burst_of_sigterms_still_releases_and_leaves(kafka, tmp_path):
    """Spark sends SIGTERM twice in a row; the second must not cut the first one's stop short."""
    setup = StreamSetup(kafka, kafka.new_topic(1, prefix="sigterm"), kafka.new_group(), tmp_path)
    produced = kafka.produce_numbered(setup.topic, 100, 1)
    child = worker_holding_an_epoch(setup.options())
    try:
        for _ in range(200):  # a burst: some land while the first one's stop is starting
            os.kill(child.pid, signal.SIGTERM)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    store = StateStore(str(setup.state))
    assert store.progress.member_in_group(setup.group) is None, "the member must have left the group"
    assert [e.status for e in store.ledger.entries(setup.group)] == ["RELEASED"]
    got: dict[bytes, int] = {}
    with ShareClient(kafka.config(**{"group.id": setup.group}), [setup.topic]) as member:
        def everything() -> bool:
            records = member.poll(0.5)
            got.update({r.value(): r.delivery_count() for r in records})
            member.acknowledge(Ack(r.topic(), r.partition(), r.offset()) for r in records)
            if records:
                member.commit()
            return len(got) == len(produced)

        # the session timeout is 45 s: a member that did not leave would keep the partition that long
        wait_for(everything, 15, "every record at a new member")
    assert {(0, v) for v in got} == produced and 2 in set(got.values()), "the held epoch was released"
