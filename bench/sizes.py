"""How big a bench run is: the full run (about 20 minutes on two cores, both peers) and ``--quick``.

Every figure of one run is measured on records of the same size, key and value bytes, and every
consumer of the throughput story on the same topic at each partition count, so the plain consumer,
the Spark queries and the limit are compared on equal terms. The embedded broker keeps at most
5 MiB per partition, so its topics stay small (50,000 records of 64 bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

__all__ = ["DeltaSizes", "Sizes", "StorySizes"]

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
class StorySizes:
    """How big the throughput story (``bench.story``) is."""

    #: one topic per partition count, of ``records`` records each; every round runs every consumer on each
    partition_counts: tuple[int, ...]
    rounds: int
    #: enough for 5 steady batches or more of ``trigger`` records (delta, format("kafka")) at every count
    records: int
    #: coordinator=delta's maxRecordsPerTrigger (and format("kafka")'s maxOffsetsPerTrigger), and its
    #: maxRecordsPerPartition
    trigger: int
    task: int
    #: the broker coordinator's runs read this many windows (partitions x lock limit) of the topic, and at least
    #: ``broker_records_min`` records: a batch is what the windows hold, but Apache Kafka acquires whole producer
    #: batches, so a batch on few partitions holds several windows (about 13,000 records on 2 partitions)
    broker_windows: int
    broker_records_min: int
    #: batches of each run of the limit's trivial source (the first is left out)
    spark_cost_batches: int


@dataclass(frozen=True)
class Sizes:
    #: records of the main topic on a peer without the story (the embedded broker), and of (c)'s driver passes
    records: int
    value_bytes: int
    #: the partition count of the figures measured at one count ((c) to (f), latency, lock limits, (h))
    main_partitions: int
    #: maxRecordsPerPartition values of (d) besides the story's broker and broker_tuned
    max_records_per_partition: tuple[int, ...]
    #: the throughput story, on Apache Kafka
    story: StorySizes
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
    #: (c): passes of the driver methods over the main topic, a fresh share group each
    driver_passes: int = 3
    #: longest a single consuming run may take before it is reported as incomplete
    run_timeout_s: float = 180.0
    #: the in-flight windows (group.share.partition.max.record.locks) of the lock-limit figure; the default
    #: (2,000) is the story's configuration, whose runs it reuses
    lock_limits: tuple[int, ...] = (2_000, 10_000)
    #: latency: a steady rate of this share of the sharegroup query's throughput, for this long per consumer
    #: (a dozen sharegroup batches or more, thousands of records)
    latency_share: float = 0.2
    latency_seconds: float = 6.0
    #: the checkpoint setting's comparison (the trivial source): batches per run, rounds
    spark_cost_batches: int = 7
    settings_rounds: int = 1

    @classmethod
    def full(cls) -> Sizes:
        return cls(records=50_000, value_bytes=64, main_partitions=4, max_records_per_partition=(2_000,),
                   story=StorySizes(partition_counts=(2, 4, 8, 16), rounds=3, records=600_000, trigger=100_000,
                                    task=50_000, broker_windows=10, broker_records_min=120_000,
                                    spark_cost_batches=7),
                   ledger_epochs=100, memory_batches=4,
                   delta=DeltaSizes(records=400_000, trigger=100_000, task=50_000, rounds=1, reader_passes=4,
                                    coordination_passes=2, bytes_records=4_000, bytes_epoch=1_000,
                                    member_records=30_000, member_poll_records=500))

    @classmethod
    def quick(cls) -> Sizes:
        return cls(records=30_000, value_bytes=64, main_partitions=4, max_records_per_partition=(1_000,),
                   story=StorySizes(partition_counts=(2, 4, 8, 16), rounds=1, records=200_000, trigger=20_000,
                                    task=5_000, broker_windows=6, broker_records_min=80_000,
                                    spark_cost_batches=5),
                   ledger_epochs=40, memory_batches=2, driver_passes=1, run_timeout_s=90.0,
                   state_epochs=2_000, latency_seconds=8.0, spark_cost_batches=5, settings_rounds=1,
                   delta=DeltaSizes(records=60_000, trigger=20_000, task=5_000, rounds=1, reader_passes=4,
                                    coordination_passes=1, bytes_records=2_000, bytes_epoch=500,
                                    member_records=10_000, member_poll_records=500))
