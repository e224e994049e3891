"""How big a bench run is: the full run (under 8 minutes on two cores, both peers) and ``--quick`` (3 to 4 minutes).

Every figure of one run is measured on the same records (count, size, key and value bytes), so
the plain consumer, the in-process driver and the Spark query are compared on equal terms.
The embedded broker keeps at most 5 MiB per partition, so a one-partition topic must hold the
whole data set: 50,000 records of 64 bytes stay well below that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

__all__ = ["DeltaSizes", "Sizes"]

#: The most 64-byte records a 4-partition topic of the embedded broker holds whole (5 MiB per partition).
EMBEDDED_DELTA_RECORDS = 200_000


@dataclass(frozen=True)
class DeltaSizes:
    """How big (h), the coordinator=delta figures, are."""

    #: records of 64 B in the 4-partition topic every consumer of the comparison reads
    records: int
    #: maxRecordsPerTrigger / maxRecordsPerPartition of the Spark queries (and maxOffsetsPerTrigger)
    trigger: int
    task: int
    rounds: int
    #: passes of the plain reader over the topic per run; the first is a warm-up
    reader_passes: int
    #: driver passes (a fresh group each) for the coordination cost, epochs pooled
    coordination_passes: int
    #: records per topic and per epoch for driver bytes at 64 B and 4 KiB (the embedded broker keeps 5 MiB
    #: per partition, so 4 KiB records cannot fill a user's batch of tens of thousands)
    bytes_records: int
    bytes_epoch: int
    #: records in the one-partition topic the members share, and each member's max.poll.records (500 is
    #: DeltaShareConsumer's default)
    member_records: int
    member_poll_records: int
    member_counts: tuple[int, ...] = (1, 2, 4)
    member_rounds: int = 1
    #: the broker coordinator reads this many of the records: its rate is bounded by the lock limit, not the
    #: batch size, so more records only make the run longer
    broker_records: int = 100_000

    def on(self, embedded: bool) -> DeltaSizes:
        """The sizes on one peer: the embedded broker keeps 5 MiB per partition, so there the topic and the
        batches shrink by the same factor (the same number of batches per run)."""
        factor = math.ceil(self.records / EMBEDDED_DELTA_RECORDS) if embedded else 1
        if factor == 1:
            return self
        return replace(self, records=self.records // factor, trigger=self.trigger // factor,
                       task=self.task // factor)


@dataclass(frozen=True)
class Sizes:
    records: int
    value_bytes: int
    #: partition counts for the scaling figure; ``main_partitions`` is the headline configuration
    partition_counts: tuple[int, ...]
    main_partitions: int
    #: maxRecordsPerPartition values for the scaling figure (10,000 is the source's default)
    max_records_per_partition: tuple[int, ...]
    #: plain-consumer runs per configuration; the median is reported (the broker is noisy)
    baseline_repeats: int
    #: Spark runs of the headline configuration, and of every other partition count; medians are reported
    source_repeats: int
    scaling_repeats: int
    #: rounds of the headline's four consumers on a peer other than the first; medians are reported
    headline_repeats: int
    #: epochs for bench.state_store_bench.ledger_latency
    ledger_epochs: int
    #: batches the memory pass measures after one warm-up batch
    memory_batches: int
    #: (h) coordinator=delta
    delta: DeltaSizes
    #: (g) the long-lived state a driver restarts on: epochs of contiguous records each
    state_epochs: int = 10_000
    state_records_per_epoch: int = 10_000
    #: (g) the short-lived state the restart is compared with
    state_baseline_epochs: int = 10
    #: longest a single consuming run may take before it is reported as incomplete
    run_timeout_s: float = 180.0
    #: topics of the scaling figure other than the headline's hold this many lock windows (2,000 records) per
    #: partition, so a run has a few batches whatever the partition count (the 1-partition topic is small and
    #: the 16-partition one large enough for a steady state)
    scaling_windows: int = 4
    #: the in-flight windows (group.share.partition.max.record.locks) of the lock-limit figure; the default
    #: (2,000) is the headline's configuration, whose runs it reuses
    lock_limits: tuple[int, ...] = (2_000, 10_000)
    #: latency: a steady rate of this share of the sharegroup query's throughput, for this long per consumer
    #: (a dozen sharegroup batches or more, thousands of records)
    latency_share: float = 0.2
    latency_seconds: float = 6.0
    #: Spark's own batch cost (the trivial source): batches per run; rounds of the settings' comparison
    spark_cost_batches: int = 7
    settings_rounds: int = 1

    @classmethod
    def full(cls) -> Sizes:
        return cls(records=50_000, value_bytes=64, partition_counts=(1, 2, 4, 8, 16), main_partitions=4,
                   max_records_per_partition=(2_000, 10_000), baseline_repeats=3, source_repeats=3,
                   scaling_repeats=1, headline_repeats=3, ledger_epochs=100, memory_batches=4,
                   delta=DeltaSizes(records=400_000, trigger=100_000, task=25_000, rounds=1, reader_passes=4,
                                    coordination_passes=2, bytes_records=4_000, bytes_epoch=1_000,
                                    member_records=30_000, member_poll_records=500))

    @classmethod
    def quick(cls) -> Sizes:
        return cls(records=30_000, value_bytes=64, partition_counts=(1, 4), main_partitions=4,
                   max_records_per_partition=(1_000, 10_000), baseline_repeats=3, source_repeats=1,
                   scaling_repeats=1, headline_repeats=1, ledger_epochs=40, memory_batches=2, run_timeout_s=90.0,
                   state_epochs=2_000, latency_seconds=8.0, spark_cost_batches=5, settings_rounds=1,
                   delta=DeltaSizes(records=60_000, trigger=20_000, task=5_000, rounds=1, reader_passes=4,
                                    coordination_passes=1, bytes_records=2_000, bytes_epoch=500,
                                    member_records=10_000, member_poll_records=500))
