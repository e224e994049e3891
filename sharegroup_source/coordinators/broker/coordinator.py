"""The ``broker`` coordinator: the Kafka broker's share group holds the locks; the driver is the member.

Acquisition locks belong to the member that fetched a record, and Spark's commit point is on
the driver, so the driver's one share consumer acquires every record and sends every
acknowledgement. A restarted query first waits for its previous run's member to leave (see
``handover``), so the broker does not split the partitions between the two.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from sharegroup_source.acks import AckRun
from sharegroup_source.coordinators.base import Failures, Settled
from sharegroup_source.coordinators.broker.group_setup import lock_duration, set_up_group
from sharegroup_source.coordinators.broker.handover import HANDOVER_TIMEOUT_S, await_previous_member
from sharegroup_source.coordinators.broker.share_client import ShareClient
from sharegroup_source.kafka.metadata import group_start
from sharegroup_source.options import SourceOptions
from sharegroup_source.schema import POSITIONS, records_to_arrow
from state_store import OffsetRange
from state_store.progress import ProgressTable

__all__ = ["BrokerCoordinator"]

log = logging.getLogger(__name__)

#: How long the member waits for the cluster's metadata (the topics' partitions) when it joins.
METADATA_TIMEOUT_S = 30.0


class BrokerCoordinator:
    """One explicit-mode share consumer (``client``) acquiring and acknowledging for run ``run_id``."""

    def __init__(self, client: ShareClient, run_id: str, lock_duration_ms: int,
                 kafka_config: Mapping[str, Any] | None = None):
        """``kafka_config``: the client's configuration (``group.id`` included), to ask the cluster about the group."""
        self._client = client
        self._run_id = run_id
        self._lock_duration_ms = lock_duration_ms
        self._kafka_config = dict(kafka_config or {})

    @classmethod
    def join(cls, options: SourceOptions, progress: ProgressTable, run_id: str,
             handover_timeout_s: float | None = None) -> BrokerCoordinator:
        """Join the share group once the query's previous member has left (that run's stop writes its
        releases to the ledger, which the driver reads next); ``handover_timeout_s`` bounds the wait. The
        group's configs the options set are set before the member's first fetch (``startingOffsets`` in the
        query's first run only: the progress table has no run of it yet)."""
        await_previous_member(progress, options.group_id,
                              HANDOVER_TIMEOUT_S if handover_timeout_s is None else handover_timeout_s)
        read = set_up_group(options, first_run=not progress.totals(options.group_id))
        lock_duration_ms = lock_duration(options, read)
        client = ShareClient(options.client_config, options.topics, options.max_poll_records,
                             metadata_timeout_s=METADATA_TIMEOUT_S)
        return cls(client, run_id, lock_duration_ms, options.client_config)

    @property
    def member_id(self) -> str:
        """The run id: librdkafka's share consumer does not expose the member id the broker gave it."""
        return self._run_id

    @property
    def partitions(self) -> Mapping[str, int]:
        return self._client.partitions

    @property
    def lock_duration_ms(self) -> int:
        """The group's lock duration as the cluster said it when the member joined; the ``lockDurationMs`` option
        where it did not say (a broker without group configurations)."""
        return self._lock_duration_ms

    def starts_at(self) -> str | None:
        """The group's ``share.auto.offset.reset`` as the broker's group configuration says it."""
        group_id = self._kafka_config.get("group.id")
        return group_start(self._kafka_config, str(group_id)) if group_id else None

    @property
    def next_run_takes_over(self) -> bool:
        """No: a broker's locks belong to the member, and a new member cannot take them over."""
        return False

    def take_over(self, unsettled: Sequence[OffsetRange]) -> None:
        """Nothing: the broker released the previous run's records when its member left, which the join waited
        for (a member that died without leaving loses its locks on their expiry)."""

    def acquire(self, max_records: int | None, wait_s: float) -> pa.Table:
        """One ShareFetch round; its size is the consumer's ``max.poll.records`` (a soft limit), not ``max_records``."""
        return records_to_arrow(self._client.poll(wait_s), 0, include_headers=True)

    def acquire_ahead(self, max_records: int | None) -> None:
        """Nothing: an explicit-mode member cannot poll again before its last poll is acknowledged."""

    def acknowledge(self, acks: Sequence[AckRun]) -> Settled:
        """Stage and commit ``acks`` before returning: the member cannot poll before they are committed."""
        return Settled(self._commit(acks))

    def _commit(self, acks: Sequence[AckRun]) -> Failures:
        """A share-partition the commit has no result for failed too: nothing says the broker applied its
        acknowledgements, and counting it ACKED would let a redelivery pass as new."""
        if not acks:
            return {}
        self._client.acknowledge_runs(acks)
        results = self._client.commit()
        failures = {(r.topic, r.partition): r.error for r in results if r.error is not None}
        answered = {(r.topic, r.partition) for r in results}
        for partition in sorted({(a.topic, a.partition) for a in acks} - answered):
            failures[partition] = "no result in the commit's answer"
        return failures

    def archived(self) -> pa.Table:
        """Nothing: the broker archives at its delivery-count limit without telling its members."""
        return POSITIONS.empty_table()

    def close(self, keep: Sequence[OffsetRange] = ()) -> None:
        """Leave the group: the broker releases what the member still holds (``keep`` is always empty here)."""
        self._client.close()
