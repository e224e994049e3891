"""A new query on a group that starts at the log end, over a topic that already holds records: nothing comes,
and one warning says why and how to start at the beginning; a record produced after the start arrives."""

from __future__ import annotations

import logging
import uuid

import pytest

from sharegroup_source.driver.micro_batch import MicroBatchDriver
from sharegroup_testing.kafka_peers import wait_for
from tests.streams import StreamSetup

RECORDS = 20
PARTITIONS = 2


@pytest.mark.embedded
@pytest.mark.parametrize("coordinator", ["broker", "delta"])
def test_a_new_query_at_the_log_end_says_once_why_nothing_comes(kafka, tmp_path, caplog, coordinator):
    if coordinator == "broker" and kafka.is_embedded:
        pytest.skip("the embedded broker's share.auto.offset.reset is one cluster-wide value (earliest for the "
                    "suite): a broker-coordinated group at the log end needs Apache Kafka")
    # no group configuration: Apache Kafka's default, latest; a Delta group asks for it
    setup = StreamSetup(kafka, kafka.new_topic(PARTITIONS), f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    kafka.produce_numbered(setup.topic, RECORDS, PARTITIONS)
    delta = {"coordinator": "delta", "groupLocation": str(tmp_path / "group"), "share.auto.offset.reset": "latest"}
    driver = MicroBatchDriver(setup.source_options(**(delta if coordinator == "delta" else {})))
    try:
        with caplog.at_level(logging.WARNING, logger="sharegroup_source.driver.micro_batch"):
            start = driver.initial_offset()
            assert driver.latest_offset(start, 100) == start, "a group at the log end acquired older records"
            assert driver.latest_offset(start, 100) == start
            marker = kafka.produce_numbered(setup.topic, 1, PARTITIONS, first=RECORDS)
            end = wait_for(lambda: (e := driver.latest_offset(start, 100)) != start and e, 60,
                           "the record produced after the query started")
        entry = driver.store.ledger.get(setup.group, end["epoch"])
        assert entry is not None and entry.record_count == len(marker) == 1
    finally:
        driver.stop()
    said = [r.getMessage() for r in caplog.records if "acquired nothing" in r.getMessage()]
    assert len(said) == 1, f"the empty start was explained {len(said)} times: {said}"
    assert f"{setup.topic} hold {RECORDS} records" in said[0]
    assert "share.auto.offset.reset=latest" in said[0] and "share.auto.offset.reset=earliest" in said[0]
