"""Where each subscribed partition's log starts and ends: all the Delta coordinator asks of Kafka to acquire.

An acquisition locks offset ranges, not records, so it needs the log's bounds (ListOffsets),
never a fetch. Both bounds of every partition are asked in two batched requests (one per
bound), not one per partition, so a many-partition group costs the same round trips as one.

A leader that moves (a broker killed or restarted) answers for a few seconds with errors such as
FENCED_LEADER_EPOCH; those are asked again, on a new admin client, for up to ``retry_s``, so an
acquisition waits out an election instead of failing the query (tests/test_cluster_faults.py kills
leaders mid-stream). The kept client would not do: it kept its stale leader epoch for a minute.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from sharegroup_source.kafka.clients import TRANSIENT_BOUND_S, admin_config, retry_transient
from sharegroup_source.kafka.errors import refusal
from sharegroup_source.kafka.metadata import partition_counts

__all__ = ["NEEDS", "LogBounds"]

#: What a member of a Delta-coordinated group needs of Kafka, said with any authorization error.
NEEDS = "coordinator=delta needs READ on each subscribed TOPIC and no GROUP ACL"


class LogBounds:
    """A kept admin client answering (log start, log end) for many partitions at once.

    The log end is the high watermark, or the last stable offset when ``isolation.level`` is
    read_committed: a member must not lock offsets the group could not deliver yet.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 15.0, retry_s: float = TRANSIENT_BOUND_S):
        self._config = config
        self._committed = str(config.get("isolation.level", "read_uncommitted")) == "read_committed"
        self._admin_config = admin_config(config)
        self._admin = AdminClient(self._admin_config)
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._servers = config.get("bootstrap.servers", "")

    def of(self, partitions: Mapping[str, int]) -> dict[tuple[str, int], tuple[int, int]]:
        """(log start, log end) of every partition of ``partitions`` (topic -> partition count)."""
        keys = [(topic, p) for topic, count in partitions.items() for p in range(count)]
        def ask() -> dict[tuple[str, int], tuple[int, int]]:
            starts = self._ask(keys, OffsetSpec.earliest())
            ends = self._ask(keys, OffsetSpec.latest())
            return {key: (starts[key], ends[key]) for key in keys}

        return retry_transient(ask, "read log offsets", self._servers, self._retry_s, before_retry=self._new_client,
                               explain=lambda error: self._explain(error, partitions))

    def _explain(self, error: KafkaError, partitions: Mapping[str, int]) -> Exception | None:
        """A refusal, or what the topics' metadata says: a principal that lost DESCRIBE on a topic, or a deleted
        topic, meets "No leaders found" from ListOffsets, which names neither."""
        refused = refusal(error, self._config, "DESCRIBE", topics=list(partitions), needs=NEEDS)
        if refused is None:
            partition_counts(self._config, partitions, needs=NEEDS)  # raises what is wrong with the topics, if any
        return refused

    def _new_client(self) -> None:
        """A fresh admin client, with fresh metadata: the kept one keeps asking the old leader epoch."""
        self._admin = AdminClient(self._admin_config)

    def _ask(self, keys: list[tuple[str, int]], spec: OffsetSpec) -> dict[tuple[str, int], int]:
        isolation = IsolationLevel.READ_COMMITTED if self._committed else IsolationLevel.READ_UNCOMMITTED
        futures = self._admin.list_offsets({TopicPartition(t, p): spec for t, p in keys}, isolation_level=isolation,
                                           request_timeout=self._timeout_s)
        return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
