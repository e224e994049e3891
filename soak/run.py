"""One soak: produce numbered records, inject faults at seeded random times, drain, account for every record.

The query starts first and the producer once the query's member has joined (on the embedded
broker a client that comes and goes drops the share sessions of its node, which is a fault of its
own). After the fault phase the producer stops and the query keeps running until every produced
record is in the sink or was accepted by an independent member, or the drain time runs out.

The long soak (soak/long) runs this soak as its broker lane, with hooks (:class:`SoakHooks`) that
keep its second lane running and sample both; it takes :func:`query_options` and :func:`account`
for that lane too, so both lanes' queries and verdicts are made alike.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from sharegroup_source.kafka.group_configs import GROUP_CONFIG_PREFIX
from sharegroup_testing.kafka_peers import EMBEDDED_SESSION_TIMEOUT_MS, KafkaUnderTest
from soak.faults import ARM_TIMEOUT_S, SoakContext, SoakHooks, applicable, schedule
from soak.producer import NumberedProducer
from soak.query import SoakQuery
from soak.report import SoakReport
from soak.sink import BatchSink
from state_store import StateStore

__all__ = ["SoakSettings", "account", "delta_group_settings", "query_options", "run_soak"]


@dataclass(frozen=True)
class SoakSettings:
    #: how long faults are injected; the drain comes on top
    fault_seconds: float
    drain_timeout_s: float = 60.0
    seed: int = 932
    partitions: int = 4
    records_per_s: int = 200
    #: the group's acquisition lock: every ordinary batch must commit well within it
    lock_ms: int = 10_000
    #: a SIGKILLed worker's member keeps its partitions until this runs out (the heartbeat is 5 s)
    session_timeout_ms: int = 12_000
    #: pause between two faults, drawn uniformly
    gap_s: tuple[float, float] = (2.0, 4.0)
    max_delivery_attempts: int = 10


def query_options(kafka: KafkaUnderTest, topic: str, group: str, state: Path, settings: SoakSettings,
                  group_location: Path | None = None) -> dict[str, str]:
    """The soak query's options: ``coordinator=broker``, or with ``group_location`` ``coordinator=delta`` (the
    group's lock and delivery limit are then the Delta group's settings, the same as the broker group's)."""
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "kafka.group.id": group, "subscribe": topic,
               "stateLocation": str(state), "maxRecordsPerTrigger": "1000", "maxRecordsPerPartition": "300",
               "pollTimeoutMs": "500"}
    if group_location is None:
        return options | {"lockDurationMs": str(settings.lock_ms)}
    return options | {"coordinator": "delta", "groupLocation": str(group_location),
                      **{f"{GROUP_CONFIG_PREFIX}{key}": value for key, value in delta_group_settings(settings).items()}}


def delta_group_settings(settings: SoakSettings) -> dict[str, str]:
    """A Delta group's settings as the soak's broker group has them, by KIP-932's names (a worker's config takes
    them so, a query's options with the ``groupConfig.`` prefix): every member asks for the same."""
    return {"share.record.lock.duration.ms": str(settings.lock_ms),
            "share.delivery.count.limit": str(settings.max_delivery_attempts), "share.auto.offset.reset": "earliest"}


def run_soak(spark: SparkSession, kafka: KafkaUnderTest, work: Path, settings: SoakSettings,
             hooks: SoakHooks | None = None) -> SoakReport:
    """The soak under ``work`` (sink, checkpoint, state); ``hooks`` plug a caller's work into its loops."""
    rng = random.Random(settings.seed)
    topic = kafka.new_topic(settings.partitions, prefix="soak")
    group = kafka.new_group(lock_duration_ms=settings.lock_ms, delivery_attempt_limit=settings.max_delivery_attempts,
                            session_timeout_ms=settings.session_timeout_ms)
    sink = BatchSink(work / "sink")
    query = SoakQuery(spark, query_options(kafka, topic, group, work / "state", settings), work / "checkpoint", sink)
    producer = NumberedProducer(kafka.config(), topic, settings.partitions, settings.records_per_s)
    ctx = SoakContext(rng, kafka, query, sink, topic, group, settings.lock_ms, settings.partitions, producer=producer,
                      hooks=hooks or SoakHooks())
    faults: Counter[str] = Counter()
    started = time.monotonic()
    try:
        query.start()
        _keep_running(ctx, 2.0)  # the member joins before any record exists
        producer.start()
        on_cluster = kafka.cluster is not None
        pending = {f.name for f in applicable(kafka.is_embedded, on_cluster)}
        kinds = schedule(rng, kafka.is_embedded, on_cluster, pending)
        while _injecting(time.monotonic() - started, settings.fault_seconds, pending):
            _keep_running(ctx, rng.uniform(*settings.gap_s))
            fault = next(kinds)
            if fault.inject(ctx):
                faults[fault.name] += 1
                pending.discard(fault.name)
        producer.finish()
        for member in ctx.members:
            member.join()
        accepted = set().union(*(m.accepted for m in ctx.members))
        unanswered = set().union(*(m.unanswered for m in ctx.members))
        deadline = time.monotonic() + settings.drain_timeout_s
        while producer.delivered - sink.rows().numbers - accepted and time.monotonic() < deadline:
            _keep_running(ctx, 1.0)
    finally:
        query.stop()
        if producer.is_alive():
            producer.finish()
        if kafka.embedded is not None:
            kafka.embedded.set_session_timeout(EMBEDDED_SESSION_TIMEOUT_MS)
            kafka.embedded.set_up(-1)
        if kafka.cluster is not None:
            kafka.cluster.heal()
    return account(settings, faults, producer, sink, accepted, unanswered, query, StateStore(str(work / "state")),
                   group, time.monotonic() - started)


def _injecting(elapsed: float, fault_seconds: float, pending: set[str]) -> bool:
    """Inject until the fault phase is over, and beyond it until every kind happened: up to twice as long, and at
    least long enough for two faults that found no batch to hit (each waits ARM_TIMEOUT_S for nothing, which a
    loaded machine makes likely) to be tried again."""
    return elapsed < fault_seconds or (
        bool(pending) and elapsed < max(2 * fault_seconds, fault_seconds + 2 * ARM_TIMEOUT_S))


def _keep_running(ctx: SoakContext, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ctx.keep_running()
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def account(settings: SoakSettings, faults: Counter[str], producer: NumberedProducer, sink: BatchSink,
            accepted: set[int], unanswered: set[int], query: SoakQuery, store: StateStore, group: str,
            seconds: float) -> SoakReport:
    """What became of every record the producer delivered: in the sink, ``accepted`` by another member of the
    group (or sent by one without an answer: ``unanswered``), or lost; and how often the sink holds one twice."""
    produced, rows = producer.delivered, sink.rows()
    # an independent member's ACCEPT that went out unanswered and whose record never came back was applied
    member_unknown = (produced - rows.numbers - accepted) & unanswered
    lost = sorted(produced - rows.numbers - accepted - member_unknown)
    return SoakReport(
        seconds=seconds, seed=settings.seed, faults=faults, produced=len(produced), in_sink=len(rows.numbers),
        accepted_by_independent=len(accepted), in_both=len(accepted & rows.numbers),
        unanswered_at_independent=len(member_unknown), lost=len(lost),
        duplicated=rows.duplicated, lost_examples=tuple(lost[:10]), produce_failures=producer.failed,
        duplicate_batches=tuple(rows.batches_with_duplicates[:10]),
        query_starts=query.starts,
        expected_failures=query.expected_failures_seen, unexpected_failures=tuple(query.unexpected_failures),
        counters=store.progress.totals(group))
