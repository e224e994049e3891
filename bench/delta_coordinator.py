"""Figure (h): ``coordinator=delta``, against the data path's own limit.

With the Delta coordinator the driver only locks offset ranges; executors read the records with
a plain consumer (assign + seek). So the ceiling is what a plain ``confluent_kafka.Consumer`` loop
reads by position into Arrow tables of the output schema, and the cost the coordinator adds is
one Delta commit per epoch (the acquisition, carrying the settle before it) and the ledger entry.
Measured, in one run:

- throughput, on every peer, in interleaved rounds (medians): (1) the plain reader (one
  consumer, one core, several passes over the topic, the first a warm-up, so librdkafka's
  prefetch cannot hide the fetches), (2) ``coordinator=delta`` into noop with batches a user
  would choose, (3) the broker coordinator with the same options beside it, and on Apache
  Kafka (4) Spark's own ``format("kafka")`` with the same batch size; ratios to (1) and (4);
- coordination cost per epoch (first peer): the source's driver (``MicroBatchDriver``) in delta
  mode in Spark's call order, ``GroupMember.acquire`` timed by wrapping it, one compare-and-swap
  commit on the group's ``share_state`` each (those that locked records, and those that only
  settled);
- driver bytes per epoch: the epoch's InputPartitions pickled as Spark's source runner pickles
  them, on 64 B and 4 KiB records in equal epochs: offset ranges only, so the size must not
  follow the records';
- members on ONE partition: 1, 2 and 4 ``DeltaShareConsumer`` processes sharing a group, total
  records/s and the compare-and-swap races they lost (``DeltaShareConsumer.lost_commit_races``).
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from itertools import count
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from pyspark.serializers import CPickleSerializer
from pyspark.sql import SparkSession

from bench.cluster import produce_dataset
from bench.measure import Throughput, median_run, percentiles_ms
from bench.rounds import measure_rounds
from bench.sizes import DeltaSizes
from bench.spark_noop import kafka_into_noop, source_into_noop
from sharegroup_source.coordinators.delta import DeltaShareConsumer
from sharegroup_source.coordinators.delta.member import GroupMember
from sharegroup_source.driver.micro_batch import MicroBatchDriver
from sharegroup_source.executor.partition_reader import read_partition
from sharegroup_source.kafka.settings import replay_consumer_config
from sharegroup_source.options import SourceOptions
from sharegroup_source.schema import records_to_arrow
from sharegroup_testing.kafka_peers import KafkaUnderTest

__all__ = ["DELTA_CONSUMERS", "delta_details", "delta_into_noop", "delta_rounds", "measure_delta"]

#: The consumers of the delta comparison, in the order every output lists them.
DELTA_CONSUMERS = {
    "plain_reader": "plain Consumer, assign+seek -> Arrow",
    "delta": "coordinator=delta -> noop",
    "broker": "coordinator=broker -> noop",
    "spark_kafka": 'Spark format("kafka") -> noop',
}
#: Records a consume() call hands over at once, as the executors' reader takes them.
_CONSUME_BATCH = 10_000
#: Spark's source runner pickles each InputPartition with this serializer before it goes to the JVM.
_SPARK_PICKLE = CPickleSerializer()


# -- the comparison, on every peer ----------------------------------------------------------------
def measure_delta(kafka: KafkaUnderTest, spark: SparkSession, sizes: DeltaSizes, partitions: int, scratch: Path,
                  timeout_s: float, say: Callable[[str], None], details: bool, topic: str | None = None,
                  known: Mapping[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """(h) on one peer: the comparison, and with ``details`` the figures measured on the first peer only; on
    ``topic`` (of ``sizes.records`` records) and with the runs in ``known`` when the caller has them already."""
    sizes = sizes.on(kafka.is_embedded)
    if topic is None:
        topic = produce_dataset(kafka, partitions, sizes.records, 64)
        say(f"delta: produced {sizes.records:,} records of 64 B into {partitions} partitions")
    extra = delta_details(kafka, topic, sizes, partitions, scratch, timeout_s, say) if details else {}
    return {"comparison": delta_rounds(kafka, spark, topic, sizes, partitions, scratch, timeout_s, say, known),
            **extra}


def delta_into_noop(spark: SparkSession, kafka: KafkaUnderTest, topic: str, records: int, work: Path,
                    timeout_s: float, trigger: int, task: int) -> dict[str, Any]:
    """``coordinator=delta`` into noop on a fresh Delta group (earliest offsets) in batches of ``trigger``
    records and tasks of ``task``; the group's in-flight window is the trigger, so it never bounds a batch."""
    return source_into_noop(spark, kafka, topic, records, work, timeout_s, coordinator="delta",
                            groupLocation=work / "group", maxRecordsPerTrigger=trigger, maxRecordsPerPartition=task,
                            **{"share.auto.offset.reset": "earliest", "share.partition.max.record.locks": trigger})


def delta_rounds(kafka: KafkaUnderTest, spark: SparkSession, topic: str, sizes: DeltaSizes, partitions: int,
                 scratch: Path, timeout_s: float, say: Callable[[str], None],
                 known: Mapping[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The four consumers (three off Apache Kafka) on the same records, in interleaved rounds; medians and ratios.
    Those in ``known`` were measured already on these records with these options (the throughput story's runs)."""
    known = known or {}
    runs = count()
    batches = {"maxRecordsPerTrigger": sizes.trigger, "maxRecordsPerPartition": sizes.task}
    consumers: dict[str, Callable[[], dict[str, Any]]] = {
        "plain_reader": lambda: plain_offset_reader(kafka, topic, partitions, sizes.records, sizes.reader_passes,
                                                    timeout_s),
        "delta": lambda: delta_into_noop(spark, kafka, topic, sizes.records, scratch / f"delta-{next(runs)}",
                                         timeout_s, sizes.trigger, sizes.task),
        "broker": lambda: source_into_noop(spark, kafka, topic, min(sizes.records, sizes.broker_records),
                                           scratch / f"broker-{next(runs)}", timeout_s, **batches),
    }
    if not kafka.is_embedded:  # Java clients cannot talk to the embedded broker (see the README)
        consumers["spark_kafka"] = lambda: kafka_into_noop(spark, kafka, topic, sizes.records,
                                                           scratch / f"kafka-{next(runs)}", timeout_s, sizes.trigger)
    measured = {**measure_rounds({name: run for name, run in consumers.items() if name not in known}, sizes.rounds,
                                 lambda message: say(f"delta, {partitions} partitions: {message}"),
                                 labels=DELTA_CONSUMERS),
                **{name: run for name, run in known.items() if name in consumers}}
    rates = {name: measured[name]["throughput"]["records_per_s"] if "throughput" in measured.get(name, {}) else None
             for name in DELTA_CONSUMERS}

    def ratio(name: str, to: str) -> float | None:
        return round(rates[name] / rates[to], 3) if rates[name] is not None and rates[to] else None

    return {"kind": kafka.describe(), "topic_partitions": partitions, "records": sizes.records,
            "options": {"maxRecordsPerTrigger": sizes.trigger, "maxRecordsPerPartition": sizes.task},
            "records_per_s": rates,
            "ratio_to_plain_reader": {name: ratio(name, "plain_reader") for name in DELTA_CONSUMERS},
            "ratio_to_spark_kafka": {name: ratio(name, "spark_kafka") for name in DELTA_CONSUMERS},
            "errors": {name: run["error"] for name, run in measured.items() if "error" in run},
            "runs": measured}


def plain_offset_reader(kafka: KafkaUnderTest, topic: str, partitions: int, records: int, passes: int,
                        timeout_s: float) -> dict[str, Any]:
    """A plain consumer reads every partition from its log start to its end by assign + seek into Arrow tables of
    the output schema, as an executor's reader does, ``passes`` times; records/s over passes 2..n.

    Each pass is a new consumer (as each Spark task opens one), timed from its creation to its
    last record: its time includes every fetch of its records, whatever librdkafka prefetches
    within the pass, and no pass starts with what an earlier one fetched. Like the executors'
    reader it asks for no more records than remain, so no call waits out its timeout for
    records that will never come."""
    config = replay_consumer_config(kafka.config())
    deadline = time.monotonic() + timeout_s
    seconds: list[float] = []
    counts: list[int] = []
    payload_bytes = 0
    probe = Consumer(config)  # where the logs start and end, outside the timed passes
    try:
        bounds = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)}
    finally:
        probe.close()
    total = sum(high - low for low, high in bounds.values())
    for _ in range(passes):
        began = time.perf_counter()
        consumer = Consumer(config)
        try:
            consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in bounds.items()])
            read = 0
            while read < total:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the plain reader read {read:,} of {total:,} records in {timeout_s:.0f} s")
                batch: list[Message] = []
                for message in consumer.consume(min(total - read, _CONSUME_BATCH), 0.5):
                    error = message.error()
                    if error is None:
                        batch.append(message)
                    elif error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(error)
                if batch:
                    table = records_to_arrow(batch, 0, include_headers=False)  # as an executor builds it
                    read += table.num_rows
                    payload_bytes += table.column("value").nbytes
            seconds.append(time.perf_counter() - began)
            counts.append(read)
        finally:
            consumer.close()
    steady = slice(1, None) if passes > 1 else slice(None)
    return {"throughput": Throughput(sum(counts[steady]), sum(seconds[steady]),
                                     complete=all(c >= records for c in counts)).as_dict(),
            "passes": passes, "records_per_pass": counts, "pass_seconds": [round(s, 3) for s in seconds],
            "payload_bytes": payload_bytes}



# -- figures on the first peer --------------------------------------------------------------------
def delta_details(kafka: KafkaUnderTest, topic: str, sizes: DeltaSizes, partitions: int, scratch: Path,
                  timeout_s: float, say: Callable[[str], None]) -> dict[str, Any]:
    """Coordination cost per epoch, driver bytes per epoch at two record sizes, and members on one partition."""
    coordination = _driver_passes(kafka, topic, sizes.records, sizes.trigger, sizes.task, scratch / "coordination",
                                  sizes.coordination_passes, timeout_s)
    say(f"delta: coordination per epoch of {coordination['records_per_epoch_p50']:,.0f} records: acquire p50 "
        f"{coordination['acquire']['p50_ms']} ms, settle p50 {coordination['settle']['p50_ms']} ms; "
        f"{coordination['driver_bytes_per_epoch_p50']:,.0f} driver bytes per epoch")
    by_size = {}
    for value_bytes in (64, 4096):
        small = produce_dataset(kafka, partitions, sizes.bytes_records, value_bytes)
        run = _driver_passes(kafka, small, sizes.bytes_records, sizes.bytes_epoch, sizes.task,
                             scratch / f"bytes-{value_bytes}", 1, timeout_s)
        by_size[str(value_bytes)] = {"records_per_epoch_p50": run["records_per_epoch_p50"],
                                     "driver_bytes_per_epoch_p50": run["driver_bytes_per_epoch_p50"],
                                     "tasks_per_epoch_p50": run["tasks_per_epoch_p50"],
                                     "bytes_per_record": run["driver_bytes_per_record"],
                                     "record_bytes_per_epoch": run["records_per_epoch_p50"] * value_bytes}
    growth = round(by_size["4096"]["driver_bytes_per_epoch_p50"] / max(by_size["64"]["driver_bytes_per_epoch_p50"], 1),
                   3)
    say(f"delta: driver bytes per {sizes.bytes_epoch:,}-record epoch: 64 B records "
        f"{by_size['64']['driver_bytes_per_epoch_p50']:,.0f}, 4 KiB records "
        f"{by_size['4096']['driver_bytes_per_epoch_p50']:,.0f} ({growth}x)")
    members = members_on_one_partition(kafka, sizes, scratch / "members", timeout_s, say)
    return {"coordination": coordination,
            "driver_bytes": {"epoch_records": sizes.bytes_epoch, "by_value_bytes": by_size,
                             "ratio_4096_to_64": growth, "grows_with_record_size": growth > 1.05},
            "members": members}


@contextmanager
def _timing(owner: type, name: str, samples: list[tuple[float, Any]]) -> Iterator[None]:
    """Replace ``owner.name`` by a wrapper noting (seconds, result) of every call; the source is unchanged."""
    original = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        result = original(*args, **kwargs)
        samples.append((time.perf_counter() - began, result))
        return result

    setattr(owner, name, timed)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _driver_passes(kafka: KafkaUnderTest, topic: str, records: int, trigger: int, task: int, root: Path,
                   passes: int, timeout_s: float) -> dict[str, Any]:
    """The source's driver in delta mode, in Spark's call order, over ``records`` (a fresh group per pass).

    Per epoch: ``latest_offset`` (which settles the previous epoch, then acquires), ``commit``,
    ``plan``. The member's commits (an acquisition carries the settle before it) are timed by wrapping
    ``GroupMember.acquire``: those that locked records, and those that only settled; the partitions
    ``plan`` returns are pickled as Spark's source runner pickles them."""
    acquires: list[tuple[float, Any]] = []
    epochs: list[dict[str, float]] = []
    with _timing(GroupMember, "acquire", acquires):
        for n in range(passes):
            where = root / f"pass-{n}"
            driver = MicroBatchDriver(SourceOptions.parse({
                "kafka.bootstrap.servers": kafka.bootstrap_servers, "kafka.group.id": f"bench-delta-{n}",
                "subscribe": topic, "stateLocation": str(where / "state"), "coordinator": "delta",
                "groupLocation": str(where / "group"), "share.auto.offset.reset": "earliest",
                "share.partition.max.record.locks": str(trigger), "maxRecordsPerTrigger": str(trigger),
                "maxRecordsPerPartition": str(task)}))
            mark = len(acquires)
            try:
                epochs += _spark_order(driver, records, trigger, timeout_s,
                                       lambda: sum(seconds for seconds, _ in acquires))
            finally:
                driver.stop()
            # a pass's first acquisition creates the group's share-partitions: not an epoch's steady cost
            first = next((i for i in range(mark, len(acquires)) if acquires[i][1][1]), None)
            if first is not None:
                del acquires[first]
    acquire_s = [seconds for seconds, (_, held) in acquires if held]
    settle_s = [seconds for seconds, (settled, held) in acquires if settled and not held]
    total = sum(e["records"] for e in epochs) or 1
    return {"passes": passes, "epochs": len(epochs),
            "records_per_epoch_p50": statistics.median(e["records"] for e in epochs) if epochs else 0,
            "tasks_per_epoch_p50": statistics.median(e["tasks"] for e in epochs) if epochs else 0,
            "acquire": percentiles_ms(acquire_s), "settle": percentiles_ms(settle_s),
            "latest_offset": percentiles_ms([e["latest_offset_s"] for e in epochs]),
            "latest_offset_besides_commits": percentiles_ms([e["latest_offset_s"] - e["commits_s"] for e in epochs]),
            "plan": percentiles_ms([e["plan_s"] for e in epochs]),
            "task_read": percentiles_ms([t for e in epochs for t in e["tasks_s"]]),
            # the connector alone: the driver's calls plus every task's read, one after another in one process
            "without_spark_records_per_s": round(total / max(sum(e["calls_s"] + sum(e["tasks_s"]) for e in epochs),
                                                             1e-9)),
            "driver_bytes_per_epoch_p50": statistics.median(e["bytes"] for e in epochs) if epochs else 0,
            "driver_bytes_per_epoch_max": max((e["bytes"] for e in epochs), default=0),
            "driver_bytes_per_record": round(sum(e["bytes"] for e in epochs) / total, 2)}


def _spark_order(driver: MicroBatchDriver, records: int, trigger: int, timeout_s: float,
                 commits_s: Callable[[], float]) -> list[dict[str, float]]:
    """Epochs until ``records`` were acquired: their records, tasks, call times and pickled partitions' bytes.
    ``commits_s``: the time spent in acquire and settle so far (what of latest_offset is not those commits)."""
    start = driver.initial_offset()
    epochs: list[dict[str, float]] = []
    deadline = time.monotonic() + timeout_s
    while driver.counters.acquired < records and time.monotonic() < deadline:
        before = driver.counters.acquired
        committing = commits_s()
        began = time.perf_counter()
        end = driver.latest_offset(start, trigger)
        offered = time.perf_counter()
        committing = commits_s() - committing
        if start["epoch"] > 0:
            driver.commit(start["epoch"])
        if end == start:
            continue
        planned = time.perf_counter()
        partitions = driver.plan(start, end)
        planned_s = time.perf_counter() - planned
        pickled = [_SPARK_PICKLE.dumps(p) for p in partitions]
        tasks_s = [_read_task(_SPARK_PICKLE.loads(p)) for p in pickled]
        epochs.append({"records": driver.counters.acquired - before, "tasks": len(partitions),
                       "latest_offset_s": offered - began, "commits_s": committing, "plan_s": planned_s,
                       "bytes": sum(map(len, pickled)), "tasks_s": tasks_s,
                       "calls_s": time.perf_counter() - began - sum(tasks_s)})
        start = end
    driver.commit(start["epoch"])
    if driver.counters.acquired < records:
        raise TimeoutError(f"the delta driver acquired {driver.counters.acquired:,} of {records:,} records in "
                           f"{timeout_s:.0f} s")
    return epochs


def _read_task(partition: Any) -> float:
    """Seconds an executor's task takes to read ``partition`` into Arrow, here, without Spark around it."""
    began = time.perf_counter()
    for _ in read_partition(partition):
        pass
    return time.perf_counter() - began


# -- members sharing one partition ----------------------------------------------------------------
def members_on_one_partition(kafka: KafkaUnderTest, sizes: DeltaSizes, root: Path, timeout_s: float,
                             say: Callable[[str], None]) -> dict[str, Any]:
    """1, 2 and 4 DeltaShareConsumer processes on ONE partition, each count on a fresh group over the same records."""
    topic = produce_dataset(kafka, 1, sizes.member_records, 64)
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes.member_counts}
    errors: dict[int, str] = {}
    for round_ in range(sizes.member_rounds):
        for members in sizes.member_counts:
            try:
                result = _members_run(kafka, topic, sizes, members, root / f"r{round_}-m{members}", timeout_s)
            except Exception as error:  # reported in the figures; the other member counts go on
                errors[members] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}"
                say(f"delta: {members} member(s) on one partition: failed: {errors[members][:160]}")
                continue
            runs[members].append(result)
            say(f"delta: {members} member(s) on one partition: {result['throughput']['records_per_s']:,} records/s, "
                f"{result['lost_races']} lost compare-and-swap races")
    return {"records": sizes.member_records, "max_poll_records": sizes.member_poll_records,
            "by_members": {str(n): median_run(r) for n, r in runs.items() if r},
            "errors": {str(n): error for n, error in errors.items()}}


def _members_run(kafka: KafkaUnderTest, topic: str, sizes: DeltaSizes, members: int, root: Path,
                 timeout_s: float) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    config = {"bootstrap.servers": kafka.bootstrap_servers, "group.id": "bench-members",
              "group.location": str(root / "group"), "share.auto.offset.reset": "earliest",
              "share.partition.max.record.locks": str(members * sizes.member_poll_records),
              "max.poll.records": str(sizes.member_poll_records)}
    settled = context.Value("q", 0)
    joined = context.Barrier(members + 1)
    go = context.Event()
    results = context.Queue()
    workers = [context.Process(target=_member, args=(config, topic, sizes.member_records, timeout_s, settled, joined,
                                                    go, results), daemon=True) for _ in range(members)]
    for worker in workers:
        worker.start()
    try:
        try:
            joined.wait(timeout=120)  # every member subscribed: joining is not the queue's throughput
        except threading.BrokenBarrierError:  # a member failed to join (it says why), or took too long
            failed = results.get(timeout=30)
            raise RuntimeError(f"a member did not join: {failed.get('error', 'no error reported')}") from None
        began = time.monotonic()
        go.set()
        reports = [results.get(timeout=timeout_s + 60) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    errors = [r["error"] for r in reports if r.get("error")]
    if errors:
        raise RuntimeError(f"a member failed: {errors[0]}")
    ended = max(r["last_commit"] for r in reports)
    accepted = sum(r["accepted"] for r in reports)
    return {"throughput": Throughput(accepted, ended - began, complete=accepted >= sizes.member_records).as_dict(),
            "members": members, "accepted": accepted,
            "lost_races": sum(r["lost_races"] for r in reports),
            "settles": sum(r["settles"] for r in reports), "failed_settles": sum(r["failed"] for r in reports),
            "idle_polls": sum(r["idle_polls"] for r in reports),
            "per_member_accepted": sorted(r["accepted"] for r in reports)}


def _member(config: Mapping[str, str], topic: str, target: int, timeout_s: float, settled: Any, joined: Any, go: Any,
            results: Any) -> None:
    """One member process: poll, ACCEPT everything, commit, until the members together settled ``target`` records."""
    report: dict[str, Any] = {"accepted": 0, "settles": 0, "failed": 0, "idle_polls": 0, "lost_races": 0,
                              "last_commit": time.monotonic()}
    try:
        consumer = DeltaShareConsumer(config)
        consumer.subscribe([topic])
        joined.wait(timeout=120)
        go.wait()
        deadline = time.monotonic() + timeout_s
        try:
            while settled.value < target and time.monotonic() < deadline:
                messages = consumer.poll(0.2)
                if not messages:
                    report["idle_polls"] += 1
                    continue
                for message in messages:
                    consumer.acknowledge(message)
                outcome = consumer.commit_sync()
                lost = {(tp.topic, tp.partition) for tp, error in outcome.items() if error is not None}
                accepted = sum((m.topic(), m.partition()) not in lost for m in messages)
                with settled.get_lock():
                    settled.value += accepted
                report["accepted"] += accepted
                report["settles"] += 1
                report["failed"] += len(lost)
                report["last_commit"] = time.monotonic()
            report["lost_races"] = consumer.lost_commit_races
        finally:
            consumer.close()
    except Exception as error:  # reported to the parent, which fails the figure with it
        report["error"] = f"{type(error).__name__}: {error}"
        joined.abort()  # the parent need not wait for a member that will never join
    results.put(report)
