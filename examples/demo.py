"""``make demo``: the main job on a laptop.

A share-group broker, a producer of sample orders, and a Spark query reading
``format("sharegroup")`` into a Delta table. One line per micro-batch, then a summary read
from the state tables. Finishes by itself in about two minutes; Ctrl-C stops it early, as
cleanly (the batch in progress ends, the query stops, the summary is printed, the temporary
folder is removed, or kept and its path printed with SHAREGROUP_DEMO_KEEP=1); a second Ctrl-C
stops the query without waiting for the batch.

    python examples/demo.py                  # the embedded broker: fast, no JVM broker
    python examples/demo.py --kafka apache   # Apache Kafka's own broker (needs make jars)
    python examples/demo.py --coordinator delta   # the share group's state in Delta, any Kafka
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import random
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from sharegroup_source.sinks import DeltaBatchWriter
from sharegroup_testing.apache_kafka import ApacheKafka, create_topic, set_group_configs
from sharegroup_testing.embedded_broker import EmbeddedBroker
from sharegroup_testing.secured_kafka import SecuredKafka
from sharegroup_testing.spark import QUIET_LOG4J2
from state_store import StateStore

TOPIC, PARTITIONS, GROUP = "orders", 4, "orders-workers"
DEMO_USER = "orders-app"  # --kafka secured: the user the query and the producer log in as
ORDERS, PRODUCE_SECONDS, RUN_LIMIT_SECONDS = 20_000, 45, 110
TRIGGER_MS, STOP_MARGIN_MS = 2_000, 250  # the query's processing-time trigger; a stop keeps this far from it
BATCH_PATIENCE_SECONDS = 60  # how long a stop waits for the batch in progress to end
LEAVE_PATIENCE_SECONDS = 30  # how long the summary waits for the source's stop to finish (give back, leave the group)
#: Where the demo's own Kafka clients (its admin and producer) log: Python logging, as the connector's clients do,
#: not librdkafka's raw lines on stderr
KAFKA_LOG = logging.getLogger("demo.kafka")


def client_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of one of the demo's own Kafka clients: ``config`` with its log through :data:`KAFKA_LOG`."""
    return {**config, "logger": KAFKA_LOG}


class StopRequest:
    """Counts Ctrl-Cs: the first asks for a stop between two batches, a second for a stop now. The
    handler only counts: it runs between two bytecodes of the main thread, which may hold any lock
    at that moment (an Event's, stdout's), so taking one could hang."""

    def __init__(self) -> None:
        self.presses = 0

    def __call__(self, signum: int, frame: object) -> None:
        self.presses += 1

    @property
    def requested(self) -> bool:
        return self.presses > 0

    @property
    def urgent(self) -> bool:
        return self.presses > 1


def stop_between_batches(query: StreamingQuery, stop: StopRequest, patience_s: float = BATCH_PATIENCE_SECONDS) -> None:
    """Stops ``query`` while it waits for its next trigger, as a graceful stop should.

    ``query.stop()`` during a batch cancels its Spark jobs: the batch's records go back to the share
    group (RELEASE, nothing is lost), but Spark prints what the cancel broke, a killed Python task's
    ``BrokenPipeError`` and, with ``foreachBatch``, a ``StackOverflowError`` from its own check of
    the cancelled job's long message. Between batches the stream thread waits for its next trigger
    and a stop interrupts only that wait. Spark's processing-time trigger fires at multiples of its
    interval on the wall clock, so the stop also keeps clear of the next one.
    """
    deadline = time.monotonic() + patience_s
    while query.isActive and not stop.urgent and time.monotonic() < deadline:
        idle = not query.status["isTriggerActive"]
        if idle and TRIGGER_MS - time.time() * 1000 % TRIGGER_MS > STOP_MARGIN_MS:
            break
        time.sleep(0.05)
    query.stop()


def produce_orders(producer: Producer, done: threading.Event, stopping: Callable[[], bool]) -> None:
    """Orders arrive over PRODUCE_SECONDS, as a live system would send them."""
    rng = random.Random(7)
    per_tick = ORDERS // (PRODUCE_SECONDS * 10)
    for order_id in range(ORDERS):
        if stopping():
            producer.flush(5)
            return
        order = {"order_id": order_id, "sku": f"sku-{rng.randrange(100)}", "qty": rng.randrange(1, 5)}
        producer.produce(TOPIC, key=str(order_id).encode(), value=json.dumps(order).encode(),
                         partition=order_id % PARTITIONS)
        if order_id % per_tick == per_tick - 1:
            producer.poll(0)
            time.sleep(0.1)
    producer.flush(30)
    done.set()


def spark_session() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (SparkSession.builder.master("local[2]").appName("sharegroup-demo")
            .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={QUIET_LOG4J2}")
            .getOrCreate())


def has_delta_spark(spark: SparkSession) -> bool:
    try:
        spark._jvm.java.lang.Class.forName("io.delta.tables.DeltaTable")
        return True
    except Exception:
        return False


def progress(state: Path) -> dict:
    return StateStore(str(state)).progress.totals(GROUP)


@contextmanager
def share_group_broker(kind: str, coordinator_kind: str) -> Iterator[dict[str, str]]:
    """The demo's broker with its topic and share group made; yields the clients' Kafka settings."""
    if kind == "embedded":
        with EmbeddedBroker(lock_duration_ms=30_000) as broker:
            broker.create_topic(TOPIC, PARTITIONS)
            print(f"embedded broker {broker.bootstrap_servers}")
            yield {"bootstrap.servers": broker.bootstrap_servers}
        return
    from confluent_kafka.admin import AdminClient

    if kind == "secured":
        with SecuredKafka(users={DEMO_USER: secrets.token_urlsafe(12)}) as secured:
            admin = AdminClient(client_config({"bootstrap.servers": secured.internal_servers}))
            create_topic(admin, TOPIC, PARTITIONS)
            set_group_configs(admin, GROUP, {"share.auto.offset.reset": "earliest"})
            secured.allow(DEMO_USER, "TOPIC", TOPIC, "READ", "WRITE")  # WRITE: the demo's producer is the user too
            if coordinator_kind == "broker":  # coordinator=delta needs no ACL on the group
                secured.allow(DEMO_USER, "GROUP", GROUP, "READ")
            print(f"Apache Kafka with SASL_SSL and ACLs {secured.bootstrap_servers} as user {DEMO_USER} "
                  f"(log {secured.log_path})")
            yield {key: str(value) for key, value in secured.client_config(DEMO_USER).items()}
        return
    with ApacheKafka() as kafka:
        admin = AdminClient(client_config({"bootstrap.servers": kafka.bootstrap_servers}))
        create_topic(admin, TOPIC, PARTITIONS)
        set_group_configs(admin, GROUP, {"share.auto.offset.reset": "earliest"})
        print(f"Apache Kafka {kafka.bootstrap_servers} (log {kafka.log_path})")
        yield {"bootstrap.servers": kafka.bootstrap_servers}


def main(argv: list[str] | None = None) -> None:
    # the docstring as a terminal shows it: without reST's literal marks
    parser = argparse.ArgumentParser(prog="python examples/demo.py",
                                     description=inspect.cleandoc(__doc__ or "").replace("``", ""),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kafka", choices=("embedded", "apache", "secured"), default="embedded",
                        help="the broker: librdkafka's embedded mock (default), Apache Kafka's own (make jars), or "
                             "Apache Kafka with SASL_SSL and ACLs, read as a user with only the ACLs it needs")
    parser.add_argument("--coordinator", choices=("broker", "delta"), default="broker",
                        help="who holds the locks: the broker's share group (default), or a Delta table "
                             "(executors read the records; no share-group support needed on the broker)")
    args = parser.parse_args(argv)
    stop = StopRequest()
    signal.signal(signal.SIGINT, stop)
    work = Path(tempfile.mkdtemp(prefix="sharegroup-demo-"))
    try:
        run(args.kafka, args.coordinator, work, stop)
    finally:
        if os.environ.get("SHAREGROUP_DEMO_KEEP") == "1":
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if stop.requested:
        print("stopped by Ctrl-C")


def run(kafka: str, coordinator_kind: str, work: Path, stop: StopRequest) -> None:
    """The demo in ``work``: until every order is acknowledged, the time limit, or Ctrl-C."""
    coordinator = {"coordinator": coordinator_kind}
    if coordinator_kind == "delta":
        coordinator |= {"groupLocation": str(work / "group"), "share.auto.offset.reset": "earliest"}
    state, checkpoint, sink = work / "state", work / "checkpoint", work / "orders_delta"
    produced = threading.Event()
    with share_group_broker(kafka, coordinator_kind) as client:
        if stop.requested:
            return
        print(f"topic {TOPIC}:{PARTITIONS}; share group {GROUP} (coordinator={coordinator_kind}); output in {work}")
        spark = spark_session()
        signal.signal(signal.SIGINT, stop)  # the SparkContext put its own handler in: it raises KeyboardInterrupt
        orders = (spark.readStream.format("sharegroup")
                  .options(**{f"kafka.{key}": value for key, value in client.items()})
                  .option("kafka.group.id", GROUP).option("subscribe", TOPIC)
                  .option("stateLocation", str(state)).option("maxRecordsPerTrigger", 2_000)
                  .option("checkpointLocation", str(checkpoint))  # acknowledge at Spark's commit, and at a stop
                  .options(**coordinator).load())
        writer = DeltaBatchWriter(sink, app_id="demo-orders")
        use_delta_spark = has_delta_spark(spark)

        def write_batch(frame: DataFrame, batch_id: int) -> None:
            if use_delta_spark:
                frame.write.format("delta").mode("append").option("txnAppId", "demo-orders") \
                    .option("txnVersion", batch_id).save(str(sink))
            else:
                writer(frame, batch_id)
            counters = progress(state)
            headroom = counters.get("min_lock_headroom_ms")
            print(f"batch {batch_id:3d}: {frame.count():5d} records | acknowledged {counters.get('accepted', 0):6d}"
                  f" | redelivered+deduped {counters.get('redeliveries_deduped', 0):3d}"
                  f" | lock headroom {'-' if headroom is None else f'{headroom / 1000:.1f}s'}", flush=True)

        query = (orders.writeStream.foreachBatch(write_batch).option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime=f"{TRIGGER_MS} milliseconds").start())
        # one producer for the whole run: on the embedded broker a client connection that closes ends every
        # share session on the node, so a producer dropped mid-run would fail the query's next acknowledgements
        orders_producer = Producer(client_config({**client, "linger.ms": 20}))
        producer = threading.Thread(target=produce_orders, args=(orders_producer, produced, lambda: stop.requested),
                                    daemon=True)
        producer.start()
        started = time.monotonic()
        while time.monotonic() - started < RUN_LIMIT_SECONDS and query.isActive and not stop.requested:
            if produced.is_set() and progress(state).get("accepted", 0) >= ORDERS:
                break
            time.sleep(0.5)
        if stop.requested:
            print("stopping: Ctrl-C, after the batch in progress (Ctrl-C again: at once)", flush=True)
        stop_between_batches(query, stop)
        producer.join(10)  # it stops producing at Ctrl-C; the broker must outlive its last send
        member_left = wait_until_member_left(state)
        summarize(spark, state, sink, time.monotonic() - started, member_left)
        spark.stop()


def wait_until_member_left(state: Path, patience_s: float = LEAVE_PATIENCE_SECONDS) -> bool:
    """Wait for the source's stop to finish: ``query.stop()`` returns before Spark's Python worker has given back
    what the run held and left the group, and the ledger says ACQUIRED for a held epoch until then."""
    progress = StateStore(str(state)).progress
    deadline = time.monotonic() + patience_s
    while progress.member_in_group(GROUP) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def summarize(spark: SparkSession, state: Path, sink: Path, seconds: float, member_left: bool) -> None:
    store = StateStore(str(state))
    statuses: dict[str, int] = {}
    for entry in store.ledger.entries(GROUP):
        statuses[entry.status.value] = statuses.get(entry.status.value, 0) + entry.record_count
    table = DeltaTable(str(sink)).to_pyarrow_table(columns=["key"]) if (sink / "_delta_log").exists() else None
    rows = table.num_rows if table is not None else 0
    distinct = len(set(table.column("key").to_pylist())) if table is not None else 0
    counters = progress(state)
    print("\nsummary")
    print(f"  produced {ORDERS} orders; Delta sink holds {rows} rows ({distinct} distinct) after {seconds:.0f}s")
    print(f"  ledger records by status: {statuses}")
    if statuses.get("ACQUIRED"):
        when = ("the query's member left the group without settling it" if member_left else
                f"the query's stop had not finished after {LEAVE_PATIENCE_SECONDS} s")
        print(f"  {statuses['ACQUIRED']} records are in an epoch still ACQUIRED: {when}. Nothing is lost or written "
              "twice: their locks run out, the group delivers them again, and the next run of this query "
              "deduplicates them against this ledger")
    print(f"  acquired {counters.get('acquired', 0)}, accepted {counters.get('accepted', 0)}, "
          f"ack failures {counters.get('ack_failures', 0)}, "
          f"redeliveries deduped {counters.get('redeliveries_deduped', 0)}")


if __name__ == "__main__":
    main()
