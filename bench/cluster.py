"""The Kafka and the records every figure is measured on.

The same peers as the tests: the embedded broker, and Apache Kafka's own single-node broker,
started for the run from the jars of ``jvm/pom.xml`` (or, with ``SHAREGROUP_TEST_BOOTSTRAP``, an
existing Kafka 4.2+ cluster with share groups enabled). Records are produced once per topic, before any
share consumer starts: on the embedded broker a closing client connection drops every share
session on its node, so a producer must not come and go while a measured consumer is running.
Each measurement then reads the same topic through a fresh share group (earliest offset).
"""

from __future__ import annotations

from sharegroup_testing.kafka_peers import BOOTSTRAP_ENV, PEERS, KafkaUnderTest, kafka_session

__all__ = ["BOOTSTRAP_ENV", "PEERS", "bench_kafka", "produce_dataset", "record_value"]


bench_kafka = kafka_session  # bench_kafka("embedded" | "apache"): one peer, stopped at the end


def record_value(number: int, value_bytes: int) -> bytes:
    """Record ``number``'s value: its number, padded to a fixed size so every run moves the same bytes."""
    return str(number).encode().ljust(value_bytes, b".")


#: records per produce-and-flush: librdkafka's queue holds 100,000 messages, and a broker slower than
#: Python's producing loop would fill it (BufferError) in a single pass over a larger topic
_PRODUCE_CHUNK = 50_000


def produce_dataset(kafka: KafkaUnderTest, partitions: int, records: int, value_bytes: int) -> str:
    """A new topic with ``partitions`` partitions holding records ``0..records-1`` round-robin."""
    topic = kafka.new_topic(partitions, prefix=f"bench-p{partitions}")
    for first in range(0, records, _PRODUCE_CHUNK):
        kafka.produce(topic, ((n % partitions, str(n).encode(), record_value(n, value_bytes))
                              for n in range(first, min(records, first + _PRODUCE_CHUNK))))
    return topic
