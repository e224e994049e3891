"""Where each subscribed partition's log starts and ends: all the Delta coordinator asks of Kafka to acquire.

An acquisition locks offset ranges, not records, so it needs the log's bounds (ListOffsets),
never a fetch. Both bounds of every partition are asked in two batched requests (one per
bound), not one per partition, so a many-partition group costs the same round trips as one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka_clients import admin_config

__all__ = ["LogBounds"]


class LogBounds:
    """A kept admin client answering (log start, log end) for many partitions at once.

    The log end is the high watermark, or the last stable offset when ``isolation.level`` is
    read_committed: a member must not lock offsets the group could not deliver yet.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 15.0):
        self._committed = str(config.get("isolation.level", "read_uncommitted")) == "read_committed"
        self._admin = AdminClient(admin_config(config))
        self._timeout_s = timeout_s
        self._servers = config.get("bootstrap.servers", "")

    def of(self, partitions: Mapping[str, int]) -> dict[tuple[str, int], tuple[int, int]]:
        """(log start, log end) of every partition of ``partitions`` (topic -> partition count)."""
        keys = [(topic, p) for topic, count in partitions.items() for p in range(count)]
        starts = self._ask(keys, OffsetSpec.earliest())
        ends = self._ask(keys, OffsetSpec.latest())
        return {key: (starts[key], ends[key]) for key in keys}

    def _ask(self, keys: list[tuple[str, int]], spec: OffsetSpec) -> dict[tuple[str, int], int]:
        isolation = IsolationLevel.READ_COMMITTED if self._committed else IsolationLevel.READ_UNCOMMITTED
        futures = self._admin.list_offsets({TopicPartition(t, p): spec for t, p in keys}, isolation_level=isolation,
                                           request_timeout=self._timeout_s)
        try:
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
        except KafkaException as error:
            raise ClusterError(f"cannot read log offsets at bootstrap.servers={self._servers}: "
                               f"{error.args[0].str()}") from None
