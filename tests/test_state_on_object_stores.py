"""State on object stores: every location of the source on an S3 server (moto), on Azurite and on a GCS server
(fake-gcs-server behind its XML API front), over their protocols.

Each test runs once per store, on Apache Kafka's broker. What a user would check is checked: the
records in the sink against what was produced, the state tables read back from the store, the
store's own count of commits and refused commits, and the one-line messages of a store at fault.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import sharegroup_source
from sharegroup_source import DeltaShareConsumer
from sharegroup_source.admin import describe_groups, reset_offsets
from sharegroup_source.errors import OptionError
from sharegroup_source.locations import check_location
from sharegroup_testing.kafka_peers import KafkaUnderTest, wait_for
from sharegroup_testing.workers import kill_source_workers
from state_store import RecordState, StateStore, StateStoreError
from state_store.delta_table import StateTable
from state_store.group import GroupStore
from state_store.storage_errors import ACCESS_DENIED, NO_SUCH_STORE
from state_store.table_commit import Write
from tests.conftest import selected_peers
from tests.object_stores import azurite, gcs_server, s3_server  # noqa: F401  (session fixtures)
from tests.scenarios import assert_exactly_once
from tests.streams import StreamSetup
from tests.test_state_tables import rewrite_that_loses_a_race

pytestmark = pytest.mark.object_store
#: The store is what these tests vary; Kafka is Apache Kafka's broker (the embedded one if it alone is selected).
ON_APACHE = pytest.mark.parametrize("kafka", [p for p in selected_peers() if p == "apache"] or selected_peers(),
                                    indirect=True)

#: Short locks, so a crashed run's records come back within the test; not shorter: a batch on the store took
#: seconds on a loaded machine, and with 3 s locks records ran out of them until the group's delivery limit
#: archived them (two suite workers, 2 cores, moto's S3).
LOCK_MS = 8_000
#: Longer than delta-rs's retries of a refused connection (3-6 s here), shorter than a lock duration matters.
OUTAGE_S = 10
def _for_seconds(seconds: float, until: Callable[[], bool]) -> None:
    """Let ``seconds`` pass (an outage lasts that long), or less once ``until`` holds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        time.sleep(0.2)


@dataclass
class Store:
    """One test's place on a store: a fresh bucket or container, and what a test does to the store."""

    name: str
    root: str
    storage: dict[str, str]
    #: storage options whose credential the store refuses; None: the store checks none (the GCS server)
    wrong_credentials: dict[str, str] | None
    #: a location in a bucket or container that does not exist
    missing: str
    outage: Callable[[], AbstractContextManager[None]]
    #: inside it the store checks credentials (Azurite always does; moto only when told)
    checking_credentials: Callable[[], AbstractContextManager[None]]
    #: (commits, refused commits) the store answered in this test's bucket or container
    commit_counts: Callable[[], tuple[int, int]]

    def uri(self, path: str) -> str:
        return f"{self.root}/{path}"


@pytest.fixture(params=["s3", "azure", "gcs"])
def store(request) -> Store:
    if request.param == "s3":
        s3 = request.getfixturevalue("s3_server")
        bucket = s3.create_bucket()
        return Store("s3", s3.uri(bucket, "t"), s3.storage_options(),
                     s3.storage_options(aws_secret_access_key="not-the-secret"),
                     s3.uri(f"sharegroup-missing-{uuid.uuid4().hex[:8]}", "t"), s3.outage, s3.credentials_required,
                     lambda: tuple(s3.counts(bucket)))
    if request.param == "gcs":
        gcs = request.getfixturevalue("gcs_server")
        bucket = gcs.create_bucket()
        return Store("gcs", gcs.uri(bucket, "t"), gcs.storage_options(), None,
                     gcs.uri(f"sharegroup-missing-{uuid.uuid4().hex[:8]}", "t"), gcs.outage, contextlib.nullcontext,
                     lambda: tuple(gcs.counts(bucket)))
    server = request.getfixturevalue("azurite")
    container = server.create_container()
    return Store("azure", server.uri(container, "t"), server.storage_options(),
                 server.storage_options(azure_storage_account_key=server.wrong_key()),
                 server.uri(f"missing-{uuid.uuid4().hex[:8]}", "t"), server.outage, contextlib.nullcontext,
                 lambda: tuple(server.counts(container)))


class StoreSetup(StreamSetup):
    """A query whose state and dead letters are on the store; its checkpoint and sink stay local."""

    store: Store

    @property
    def state(self) -> str:  # type: ignore[override]
        return self.store.uri(f"{self.root.name}/state")

    @property
    def dead_letters(self) -> str:
        return self.store.uri(f"{self.root.name}/dead_letters")

    def options(self, **extra) -> dict[str, str]:
        return super().options(deadLetterLocation=self.dead_letters, **extra)


def _setup(kafka: KafkaUnderTest, store: Store, root: Path, topic: str, group: str) -> StoreSetup:
    setup = StoreSetup(kafka, topic, group, root, storage=store.storage)
    setup.store = store
    return setup


def _dead_letter_keys(setup: StoreSetup) -> set[tuple[int, bytes]]:
    rows = StateStore(setup.state, storage_options=setup.storage,
                      dead_letter_location=setup.dead_letters).dead_letters.read().to_pylist()
    return {(r["partition"], r["value"]) for r in rows}


def _committed_unacknowledged(setup: StoreSetup) -> bool:
    """Spark committed its latest batch, which wrote records to the sink, and no epoch is acknowledged yet."""
    planned = [int(p.name) for p in (setup.checkpoint / "offsets").glob("[0-9]*")]
    if not planned or not (setup.checkpoint / "commits" / str(max(planned))).exists():
        return False
    batch = setup.sink / f"batch={max(planned)}"
    return ((batch / "_SUCCESS").exists() and pq.read_table(batch).num_rows > 0
            and {e.status for e in setup.ledger_entries()} == {"ACQUIRED"})


def _settled_as_far_as_known(setup: StoreSetup) -> bool:
    """Every epoch of this run ACKED, and every epoch of an earlier run ACKED or ACK_FAILED. An earlier run (killed
    after Spark's commit, or failed on the outage) may have acknowledged some of an epoch's records, or settled their
    redeliveries, before it ended and before the ledger took the epoch's new status; the next run cannot tell which
    records are still to come back, so the epoch stays ACK_FAILED until maintenance drops it. The test then asks the
    group what is left."""
    entries = setup.ledger_entries()
    if not entries:
        return False
    current = max(entries, key=lambda e: e.epoch).member_id
    return all(e.status == "ACKED" or (e.status == "ACK_FAILED" and e.member_id != current) for e in entries)


def _drain(setup: StoreSetup, spark, handler, expected: set, outage=None) -> str:
    """Run the query until ``expected`` is in the sink and every epoch is acknowledged ("went on"), or until it
    fails ("failed": then with the store's own words). ``outage``: the store is down for a while once the run
    has written a few batches."""
    query = setup.batch_sink(spark, handler, available_now=False, lockDurationMs=LOCK_MS, maxRecordsPerTrigger=20)
    try:
        if outage is not None:
            written = len(setup.ledger_entries())
            wait_for(lambda: len(setup.ledger_entries()) >= written + 3, 90, "a few batches of this run")
            with outage():
                _for_seconds(OUTAGE_S, until=lambda: query.exception() is not None)
        wait_for(lambda: query.exception() is not None
                 or ({(p, v) for p, v, _ in setup.sink_rows(spark)} >= expected
                     and _settled_as_far_as_known(setup)),
                 180, "every record in the sink and every epoch acknowledged, or the query failed",
                 interval_s=0.5, state=lambda: setup.describe(spark))
        error = query.exception()
    finally:
        query.stop()
    if error is None:
        return "went on"
    message = str(error)
    assert "cannot be reached" in message or "error sending request" in message, message
    return "failed"


# -- a broker-mode query: crash, restart, an outage of the store ---------------------------------------------------
@pytest.mark.spark
@pytest.mark.timing
@ON_APACHE
def test_a_query_with_its_state_on_the_store_survives_a_crash_and_an_outage(spark, kafka, store, tmp_path):
    """Every location on the store. A run is killed after Spark's commit, before its ACCEPT; the restarted run
    meets a 10 s outage of the store. Either way: every record once, the rejected ones as dead letters on the
    store, the ledger settled and the progress table counting both runs."""
    group = kafka.new_group(lock_duration_ms=LOCK_MS, session_timeout_ms=6_000)
    setup = _setup(kafka, store, tmp_path, kafka.new_topic(2, prefix="store"), group)
    produced = kafka.produce_numbered(setup.topic, 200, 2)
    rejected = {(i % 2, f"record-{i}".encode()) for i in range(0, 400, 40)}
    options = setup.options()

    def reject_some(frame, batch_id):
        values = [v for _, v in rejected]
        sharegroup_source.acknowledge(frame.filter(frame.value.isin(values)), "REJECT", "bad", options=options)
        return frame.filter(~frame.value.isin(values))

    # run 1: acknowledgements wait for the next trigger (no checkpointLocation option), 15 s away. A first
    # batch can be empty (a new member gets its partitions with its second heartbeat, later on a busy machine):
    # then Spark commits it and the next trigger brings the records.
    query = setup.batch_sink(spark, reject_some, available_now=False, processing_time="15 seconds",
                             lockDurationMs=LOCK_MS)
    try:
        wait_for(lambda: _committed_unacknowledged(setup), 90, "Spark's commit of a batch with records, before its "
                 "acknowledgement", state=lambda: setup.describe(spark))
        assert kill_source_workers() == 1
    finally:
        query.stop()
    produced |= kafka.produce_numbered(setup.topic, 200, 2, first=200)

    # run 2 (and 3, if the outage failed run 2): the store goes away for a while as batches are written
    outcomes = [_drain(setup, spark, reject_some, produced - rejected, outage=store.outage)]
    if outcomes[0] == "failed":
        outcomes.append(_drain(setup, spark, reject_some, produced - rejected))
    assert outcomes in (["went on"], ["failed", "went on"]), outcomes
    print(f"\n{store.name}: the run that met the outage {outcomes[0]}")

    assert_exactly_once(setup.sink_rows(spark), produced - rejected)
    assert _dead_letter_keys(setup) == rejected
    assert setup.leftovers_for_a_fresh_member() == []
    totals = setup.progress()
    assert totals["runs"] >= 2, totals
    # a run that failed on the outage could not write its last progress row (the store was away), so the REJECTs
    # it sent after its previous row are missing from the counts: the dead letters above are the record of them
    assert totals["rejected"] >= (len(rejected) if outcomes == ["went on"] else 1), (outcomes, totals)
    assert totals["redeliveries_deduped"] > 0, "batch 0's records never came back to be acknowledged"


# -- the group's compare-and-swap under contention ----------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.timing
@ON_APACHE
def test_two_queries_and_a_worker_share_one_partition_through_the_store(spark, kafka, store, tmp_path):
    """Two delta-mode queries and a DeltaShareConsumer (its storage options as stateStorage.* keys) on one
    groupLocation on the store, one partition, small acquisitions: every record to exactly one member once, no
    redelivery (a record held twice would arrive twice), and the store refused commits that lost a race. The
    queries take records first and the worker joins for the bulk, so each member's share is shown, not hoped for."""
    topic, group = kafka.new_topic(1, prefix="cas"), f"g-{uuid.uuid4().hex[:8]}"
    produced: set[tuple[int, bytes]] = set()
    group_location = store.uri("group")
    delta = {"coordinator": "delta", "groupLocation": group_location, "share.auto.offset.reset": "earliest",
             "maxRecordsPerTrigger": 10}
    setups = [_setup(kafka, store, tmp_path / name, topic, group) for name in ("a", "b")]
    got_by_worker: list[tuple[int, bytes, int]] = []
    worker_lost_races: list[int] = []
    stop = threading.Event()
    config = {"bootstrap.servers": kafka.bootstrap_servers, "group.id": group, "group.location": group_location,
              "share.auto.offset.reset": "earliest", "max.poll.records": 10,
              **{f"stateStorage.{k}": v for k, v in store.storage.items()}}

    def work() -> None:
        consumer = DeltaShareConsumer(config)
        try:
            consumer.subscribe([topic])
            while not stop.is_set():
                messages = consumer.poll(0.2)
                for message in messages:
                    consumer.acknowledge(message)
                results = consumer.commit_sync()
                got_by_worker.extend((m.partition(), m.value(), m.delivery_count()) for m in messages
                                     if results.get((m.topic(), m.partition())) is None)
            # compare-and-swap races it lost and retried (as bench/delta_coordinator.py, reaching in for the counter)
            worker_lost_races.append(consumer._group.share_state.table.lost_races)
        finally:
            consumer.close()

    def taken() -> list[int]:
        return [len(s.sink_rows(spark)) for s in setups] + [len(got_by_worker)]

    def feed_until(condition: Callable[[list[int]], bool], what: str) -> None:
        # a member that starts late (a Spark query's first trigger, on a busy machine) would find the partition
        # drained by the others: whenever everything produced has been taken, more is produced, until it holds
        def fed() -> bool:
            counts = taken()
            if condition(counts):
                return True
            if sum(counts) >= len(produced):
                produced.update(kafka.produce_numbered(topic, 20, 1, first=len(produced)))
            return False
        wait_for(fed, 240, what, interval_s=1, state=lambda: f"{taken()} taken of {len(produced)}")

    queries = [setup.file_sink(spark, available_now=False, **delta) for setup in setups]
    worker = threading.Thread(target=work, name="delta-share-consumer")
    try:
        feed_until(lambda counts: all(counts[:2]), "both queries to take records")
        worker.start()
        # the bulk, with all three members running: they contend for it
        produced.update(kafka.produce_numbered(topic, 400 - len(produced), 1, first=len(produced)))
        feed_until(lambda counts: counts[2] > 0, "the worker to take records")
        wait_for(lambda: sum(taken()) >= len(produced), 240, "every record in a sink or with the worker",
                 interval_s=1, state=lambda: f"{taken()} taken of {len(produced)}")
        for setup in setups:
            wait_for(setup.every_epoch_settled, 60, "each query's last epoch to be acknowledged")
    finally:
        stop.set()
        if worker.is_alive():
            worker.join(60)
        for query in queries:
            query.stop()
    sinks = [setup.sink_rows(spark) for setup in setups]
    everything = [row for rows in sinks for row in rows] + got_by_worker
    assert_exactly_once(everything, produced)
    assert {dc for *_, dc in everything} == {1}, "a record was delivered twice: two members held it"
    assert all(sinks) and got_by_worker, f"a member took nothing: {[len(s) for s in sinks]}, {len(got_by_worker)}"
    group_store = GroupStore.existing(group_location, storage_options=store.storage)
    assert sorted(m.kind for m in group_store.members()) == ["query", "query", "worker"]
    # Spark's stop returns before its Python worker has stopped: a query's member leaves after it
    wait_for(lambda: all(m.left_at_ms is not None for m in group_store.members()), 60, "every member to leave",
             state=group_store.members)
    share_state = group_store.share_state.partitions()
    assert [b for sp in share_state.values() for b in sp.batches if b.state is not RecordState.ACKNOWLEDGED] == []
    commits, refused = store.commit_counts()
    print(f"\n{store.name}: {commits} Delta commits stored, {refused} refused by the store (two writers PUT one "
          f"version); the worker lost {worker_lost_races} compare-and-swap races and retried them")
    assert worker_lost_races and worker_lost_races[0] + refused > 0, "no commit lost a race: the test did not contend"

    # the admin on the store: describe, then a reset back to the start, one commit
    [described] = describe_groups([group_location], bootstrap_servers=kafka.bootstrap_servers,
                                  storage_options=store.storage)
    assert (described.error, described.state, described.members) == (None, "Empty", ()), described
    end = len(produced)
    assert [(p.spso, p.acquired, p.lag) for p in described.partitions] == [(end, 0, 0)]
    plan = reset_offsets(group_location, to="earliest", execute=True, bootstrap_servers=kafka.bootstrap_servers,
                         storage_options=store.storage)
    assert [(r.start_offset, r.new_start_offset) for r in plan.partitions] == [(end, 0)]
    [described] = describe_groups([group_location], bootstrap_servers=kafka.bootstrap_servers,
                                  storage_options=store.storage)
    assert [(p.spso, p.lag) for p in described.partitions] == [(0, end)]


# -- maintenance on the store -------------------------------------------------------------------------------------
def test_maintenance_on_the_store_deletes_the_files_overwrites_replaced(store):
    """Vacuum lists what to delete and deletes it through the store's own protocol (no vacuum commit, which
    loses to concurrent overwrites): afterwards the store holds no file the table does not reference."""
    schema = pa.schema([("member", pa.string()), ("n", pa.int64())])
    table = StateTable(store.uri("maintained"), "share_state", schema, storage_options=store.storage)
    for n in range(5):
        table.commit(lambda s, n=n: Write(pa.table({"member": ["a"], "n": [n]}, schema=schema),
                                          mode="overwrite", predicate="member = 'a'"))

    def unreferenced() -> list[str]:
        delta = DeltaTable(table.uri, storage_options=store.storage)
        return delta.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True, full=True)

    assert len(unreferenced()) == 4, "the four replaced files are not on the store before maintenance"
    table.maintain()
    assert unreferenced() == []
    assert [r["n"] for r in table.snapshot().rows()] == [4]


def test_a_rewrite_that_loses_its_race_on_the_store_leaves_no_copy_behind(store):
    """The lost attempt's file goes through the store's own protocol, as vacuum's deletes do."""
    unreferenced = rewrite_that_loses_a_race(store.uri("rewritten"), store.storage)
    assert len(unreferenced) == 4, f"beyond the 4 files the rewrite replaced: {sorted(unreferenced)}"


# -- a store at fault, and a store without an atomic commit --------------------------------------------------------
def test_wrong_credentials_and_a_missing_bucket_are_named_in_one_line(store):
    """What a query, the admin and a worker say at start: the option, the location, and which of the two it is."""
    cases = [(store.missing, store.storage, NO_SUCH_STORE)]
    if store.wrong_credentials is not None:  # the GCS server checks no credential
        cases.insert(0, (store.uri("state"), store.wrong_credentials, ACCESS_DENIED))
    with store.checking_credentials():
        for location, storage, problem in cases:
            with pytest.raises(OptionError) as refused:
                check_location("stateLocation", location, storage)
            message = str(refused.value)
            assert message.startswith(f"option 'stateLocation': {location}: {problem} ("), message
            assert "\n" not in message and "not-the-secret" not in message, message
            with pytest.raises(StateStoreError, match=problem.split(":")[0]):
                StateStore(location, storage_options=storage).ledger.entries("g")


@ON_APACHE
def test_a_worker_on_a_store_it_cannot_write_is_refused_before_it_joins(kafka, store):
    config = {"bootstrap.servers": kafka.bootstrap_servers, "group.id": "g", "group.location": store.missing,
              **{f"stateStorage.{k}": v for k, v in store.storage.items()}}
    with pytest.raises(OptionError, match=f"option 'group.location': {store.missing}: {NO_SUCH_STORE}"):
        DeltaShareConsumer(config)


def test_an_s3_client_told_not_to_write_conditionally_is_refused_at_start(s3_server):  # noqa: F811
    """``aws_conditional_put=disabled``: delta-rs could not commit at all; the location check says so first.

    (A server that ignores conditional writes is another matter: tests/test_object_store_servers.py.)"""
    location = s3_server.uri(s3_server.create_bucket(), "state")
    with pytest.raises(OptionError, match=r"stateStorage.aws_conditional_put=disabled .* remove that option"):
        check_location("stateLocation", location, s3_server.storage_options(aws_conditional_put="disabled"))
