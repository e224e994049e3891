"""format("sharegroup") end to end: local Spark, real sinks, the embedded broker over TCP.

Every test compares the sink with what was produced, record by record.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from pyspark.errors import PySparkException
from pyspark.errors.exceptions.captured import StreamingQueryException

from sharegroup_source.acks import Ack
from sharegroup_source.coordinators.broker.share_client import ShareClient
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from tests.scenarios import assert_exactly_once, file_sink_exactly_once, sink_down_at_batch_2_then_restart
from tests.streams import StreamSetup

pytestmark = pytest.mark.spark


def _setup(kafka: KafkaUnderTest, tmp_path: Path, partitions: int = 3, **group_settings) -> StreamSetup:
    return StreamSetup(kafka, kafka.new_topic(partitions), kafka.new_group(**group_settings), tmp_path)


@pytest.mark.embedded
def test_every_record_exactly_once_into_a_file_sink(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, partitions=3)
    file_sink_exactly_once(spark, setup, 5000, 3, maxRecordsPerTrigger=2000, maxRecordsPerPartition=700)
    assert setup.leftovers_for_a_fresh_member() == [], "every record must have been acknowledged"
    assert {e.status for e in setup.ledger_entries()} == {"ACKED"}
    progress = setup.progress()
    assert progress["acquired"] == 5000 and progress["accepted"] == 5000
    # an acknowledgement can fail without the source's doing: under load a broker connection that drops with a
    # ShareAcknowledge in flight fails it (SHARE_SESSION_NOT_FOUND, client-side). Each record it held came back
    # and was deduplicated, never emitted twice (the sink above) nor left in the group (the leftovers above).
    assert progress["redeliveries_deduped"] >= progress["ack_failures"], progress
    if progress["ack_failures"]:
        print(f"{progress['ack_failures']} acknowledgements failed and came back deduplicated: {progress}")
    # the file sink writes one file per task: at most 700 records each, so one Kafka partition spans tasks
    epochs = [e.record_count for e in setup.ledger_entries()]
    assert sum(epochs) == 5000
    assert len(list(setup.sink.glob("part-*.parquet"))) == sum(-(-n // 700) for n in epochs)


@pytest.mark.timing
def test_sink_failure_then_restart_from_checkpoint(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, partitions=2)
    produced = kafka.produce_numbered(setup.topic, 600, 2)
    second = sink_down_at_batch_2_then_restart(spark, setup, maxRecordsPerTrigger=100)
    second.awaitTermination(180)
    assert second.exception() is None
    assert_exactly_once(setup.sink_rows(spark), produced)
    assert setup.leftovers_for_a_fresh_member() == []


@pytest.mark.timing
def test_restart_after_sink_commit_before_spark_commit(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, partitions=2)
    produced = kafka.produce_numbered(setup.topic, 400, 2)
    first = setup.batch_sink(spark, maxRecordsPerTrigger=100)
    first.awaitTermination(120)
    commits = sorted((setup.checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert len(commits) >= 2
    commits[-1].unlink()  # the sink has batch N, Spark's commit log does not
    commits[-1].with_name(f".{commits[-1].name}.crc").unlink(missing_ok=True)
    replayed_batch = int(commits[-1].name)
    second = setup.batch_sink(spark, maxRecordsPerTrigger=100)
    second.awaitTermination(120)
    assert second.exception() is None
    assert (setup.checkpoint / "commits" / str(replayed_batch)).exists(), "batch N must have been re-run"
    assert_exactly_once(setup.sink_rows(spark), produced)
    assert setup.leftovers_for_a_fresh_member() == []


@pytest.mark.timing
def test_a_failed_batch_goes_back_to_the_group(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, partitions=1)
    produced = kafka.produce_numbered(setup.topic, 300, 1)
    seen_in_failed_batch: list[bytes] = []

    def always_fail(frame, _batch_id: int) -> None:
        seen_in_failed_batch.extend(bytes(r.value) for r in frame.select("value").collect())
        raise RuntimeError("poison sink")

    query = setup.batch_sink(spark, always_fail, maxRecordsPerTrigger=100)
    with pytest.raises(StreamingQueryException, match="poison sink"):
        query.awaitTermination(120)
    assert len(seen_in_failed_batch) == 100
    # the query is never restarted: another member of the group must get every record
    setup.wait_until_member_left()
    got = {}
    with ShareClient(kafka.config(**{"group.id": setup.group}), [setup.topic]) as other:
        deadline = time.monotonic() + 30
        while len(got) < 300 and time.monotonic() < deadline:
            records = other.poll(0.5)
            got.update({r.value(): r.delivery_count() for r in records})
            other.acknowledge(Ack(r.topic(), r.partition(), r.offset()) for r in records)
            if records:
                other.commit()
    assert {(0, v) for v in got} == produced
    assert {got[v] for v in seen_in_failed_batch} == {2}, "the failed batch was released, not accepted"
    assert {e.epoch: e.status for e in setup.ledger_entries()} == {1: "RELEASED"}


@pytest.mark.timing
def test_query_and_independent_member_share_the_group(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, partitions=4)
    independent: dict[bytes, int] = {}
    independent_failed: set[bytes] = set()
    lock = threading.Lock()
    stop = threading.Event()
    client = ShareClient(kafka.config(**{"group.id": setup.group}), [setup.topic], max_poll_records=50)

    def work() -> None:
        while not stop.is_set():
            records = client.poll(0.2)
            client.acknowledge(Ack(r.topic(), r.partition(), r.offset()) for r in records)
            if not records:
                continue
            failed = {res.partition for res in client.commit() if not res.ok}
            with lock:
                for r in records:
                    independent[r.value()] = r.partition()
                    if r.partition() in failed:
                        independent_failed.add(r.value())

    def at_independent() -> set[tuple[int, bytes]]:
        with lock:
            return {(p, v) for v, p in independent.items()}

    worker = threading.Thread(target=work)
    worker.start()
    produced: set[tuple[int, bytes]] = set()
    try:
        query = setup.batch_sink(spark, available_now=False, maxRecordsPerTrigger=200)
        wait_for(lambda: query.lastProgress is not None, 60, "the query's first trigger")
        # The independent member drains a round faster than a trigger, and it learns that the
        # query's member took some of its partitions only at its next heartbeat (every 5 s),
        # so records come in rounds until both members have had some.
        for _ in range(20):
            produced.update(kafka.produce_numbered(setup.topic, 400, 4, first=len(produced)))
            wait_for(lambda: {(p, v) for p, v, _ in setup.sink_rows(spark)} | at_independent() >= produced,
                     120, "every record in the sink or at the independent member", interval_s=1)
            if setup.sink_rows(spark) and at_independent():
                break
        # a stop releases what the query still holds, and the independent member would get it
        wait_for(setup.every_epoch_settled, 60, "the query's last epoch acknowledged")
        query.stop()
    finally:
        stop.set()
        worker.join()
        client.close()
    rows = setup.sink_rows(spark)
    in_sink = {(p, v) for p, v, _ in rows}
    assert len(rows) == len(in_sink), "the query's sink must hold no duplicates"
    assert in_sink and independent, f"both members must have taken part ({len(produced)} records produced)"
    assert in_sink | at_independent() == produced
    both = in_sink & at_independent()
    if both:
        failures = setup.progress()["ack_failures"] + len(independent_failed)
        assert failures > 0, f"{len(both)} records reached both members without any failed acknowledgement"


@pytest.mark.embedded
@pytest.mark.timing
def test_failed_acknowledgements_keep_the_sink_exactly_once(spark, kafka, tmp_path):
    broker = kafka.require_embedded("fault injection")
    setup = _setup(kafka, tmp_path, partitions=2, lock_duration_ms=2000)
    produced = kafka.produce_numbered(setup.topic, 1000, 2)
    broker.fail_next("ShareAcknowledge", ["SHARE_SESSION_NOT_FOUND", "INVALID_RECORD_STATE",
                                          "SHARE_SESSION_NOT_FOUND"])
    query = setup.batch_sink(spark, available_now=False, maxRecordsPerTrigger=150)
    try:
        def settled() -> bool:
            progress = setup.progress()
            return (len(setup.sink_rows(spark)) >= 1000 and progress.get("ack_failures", 0) > 0
                    and progress["redeliveries_deduped"] >= progress["ack_failures"] and setup.every_epoch_settled())

        wait_for(settled, 120, "all records in the sink and every failed ack's records deduplicated", interval_s=1)
    finally:
        query.stop()
    assert_exactly_once(setup.sink_rows(spark), produced)
    progress = setup.progress()
    assert progress["ack_failures"] >= 1 and progress["redeliveries_deduped"] >= progress["ack_failures"]
    assert setup.leftovers_for_a_fresh_member() == []


@pytest.mark.timing
def test_locks_that_expire_before_the_ack_keep_the_sink_exactly_once(spark, kafka, tmp_path):
    """The real broker's own way to fail an acknowledgement: the first batch outlives its locks."""
    setup = _setup(kafka, tmp_path, partitions=2, lock_duration_ms=2000)
    produced = kafka.produce_numbered(setup.topic, 600, 2)

    def slow_first_batch(_frame, batch_id: int) -> None:
        if batch_id == 0:
            time.sleep(3)  # the slow batch is the behaviour under test: its 2 s locks expire

    query = setup.batch_sink(spark, slow_first_batch, available_now=False, maxRecordsPerTrigger=200)
    try:
        def settled() -> bool:
            progress = setup.progress()
            # an epoch whose acknowledgement failed is ACKED once all its records came back and were acknowledged
            return (len(setup.sink_rows(spark)) >= 600 and progress.get("ack_failures", 0) > 0
                    and progress["redeliveries_deduped"] > 0
                    and setup.every_epoch_acked())

        wait_for(settled, 240, "all records in the sink, the expired locks' records redelivered and deduplicated",
                 interval_s=1, state=lambda: setup.describe(spark))
    finally:
        query.stop()
    assert_exactly_once(setup.sink_rows(spark), produced)
    assert setup.leftovers_for_a_fresh_member() == []


@pytest.mark.parametrize("missing", ["kafka.bootstrap.servers", "kafka.group.id", "subscribe", "stateLocation"])
def test_each_required_option_is_named_when_missing(spark, kafka, tmp_path, missing):
    setup = _setup(kafka, tmp_path, partitions=1)
    options = {k: v for k, v in setup.options().items() if k != missing}
    with pytest.raises(PySparkException, match=f"option '{missing}' is required"):
        spark.readStream.format("sharegroup").options(**options).load()


def test_unknown_topic_fails_the_query_with_its_name(spark, kafka, tmp_path):
    setup = StreamSetup(kafka, "no-such-topic", kafka.new_group(), tmp_path)
    query = setup.file_sink(spark)
    with pytest.raises(StreamingQueryException, match="topic 'no-such-topic' does not exist"):
        query.awaitTermination(60)


def test_unwritable_state_location_is_named(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, partitions=1)
    kafka.produce_numbered(setup.topic, 10, 1)
    setup.state.write_text("a file where the state folder should be")
    query = setup.file_sink(spark)
    with pytest.raises(StreamingQueryException, match=str(setup.state)):
        query.awaitTermination(60)


def test_format_resolves_without_registration_and_keeps_bytes(spark, kafka, tmp_path):
    import sharegroup_source

    setup = _setup(kafka, tmp_path, partitions=1)
    headers = [("trace", b"\x00\xff"), ("empty", b""), ("none", None)]
    records = [(0, None, b"no key"), (0, b"\x00\x01binary", b""), (0, b"k", None)]
    producer = kafka.producer
    for partition, key, value in records:
        producer.produce(setup.topic, key=key, value=value, partition=partition, headers=headers)
    producer.flush(30)
    frame = setup.read_stream(spark, includeHeaders="true")
    assert frame.schema.fieldNames()[-3:] == ["headers", "deliveryCount", "epoch"]
    sharegroup_source.register(spark)  # also fine where the format is already found
    query = (frame.writeStream.format("parquet").option("path", str(setup.sink))
             .option("checkpointLocation", str(setup.checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    rows = sorted(spark.read.parquet(str(setup.sink)).collect(), key=lambda r: r.offset)
    assert [(r.key, r.value) for r in rows] == [
        (None, bytearray(b"no key")), (bytearray(b"\x00\x01binary"), bytearray(b"")), (bytearray(b"k"), None)]
    assert [[(h.key, None if h.value is None else bytes(h.value)) for h in r.headers] for r in rows] == [headers] * 3
    assert {(r.topic, r.partition, r.timestampType, r.deliveryCount, r.epoch) for r in rows} == {
        (setup.topic, 0, 0, 1, 1)}
    assert all(r.timestamp is not None for r in rows)


def _push_first_records_out_of_the_log(kafka: KafkaUnderTest, topic: str) -> list[bytes]:
    """Make offsets 0-4 of partition 0 leave the log; returns the values the log then holds.

    Apache Kafka deletes them on request (DeleteRecords); the embedded broker keeps at most
    5 MiB per partition, so seven 900 kB records push them out.
    """
    if kafka.apache is None:
        kafka.require_embedded("trimming the log (the embedded broker keeps 5 MiB per partition)")
        kafka.produce(topic, [(0, None, b"x" * 900_000) for _ in range(7)])
        return [b"x" * 900_000] * 5
    kafka.admin.delete_records([TopicPartition(topic, 0, 5)])[TopicPartition(topic, 0, 5)].result(30)
    later = [f"after-{i}".encode() for i in range(3)]
    kafka.produce(topic, [(0, None, value) for value in later])
    return later


@pytest.mark.embedded
def test_fail_on_data_loss_when_a_replayed_epoch_left_the_log(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, partitions=1)
    kafka.produce(setup.topic, [(0, None, f"small-{i}".encode()) for i in range(5)])
    setup.batch_sink(spark).awaitTermination(120)
    (setup.checkpoint / "commits" / "0").unlink()  # batch 0 (epoch 1) must be replayed by offset
    (setup.checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
    in_log = _push_first_records_out_of_the_log(kafka, setup.topic)

    failing = setup.batch_sink(spark)
    with pytest.raises(StreamingQueryException,
                       match=r"5 record\(s\) of .*\[0\] recorded in the ledger are no longer in the log "
                             r"\(offsets 0, 1, 2, 3, 4\); set failOnDataLoss=false"):
        failing.awaitTermination(120)
    tolerant = setup.batch_sink(spark, failOnDataLoss="false")
    tolerant.awaitTermination(120)
    assert tolerant.exception() is None
    # the replayed batch is rewritten without the lost records; the query goes on with what the log holds
    assert sorted(v for _, v, _ in setup.sink_rows(spark)) == sorted(in_log)


@pytest.mark.timing
def test_lock_headroom_is_reported_when_a_batch_is_slow(spark, kafka, tmp_path):
    setup = _setup(kafka, tmp_path, partitions=1, lock_duration_ms=2000)  # the query reads it from the group
    produced = kafka.produce_numbered(setup.topic, 20, 1)

    def slow_sink(_frame, _batch_id) -> None:
        time.sleep(1.5)  # the slow batch is the behaviour under test, not synchronisation

    query = setup.batch_sink(spark, slow_sink, lockDurationMs=2000)
    query.awaitTermination(120)
    assert query.exception() is None
    assert_exactly_once(setup.sink_rows(spark), produced)
    headroom = setup.progress()["min_lock_headroom_ms"]
    assert headroom is not None and headroom < 500, f"a 1.5 s batch under a 2 s lock leaves < 0.5 s, got {headroom}"
