"""The faults the soak injects, and the seeded order it injects them in.

Each fault returns whether it really happened (a fault that waits for a batch may find none in
time); only those that happened are counted. Faults that need the embedded broker (node down,
injected protocol errors, a short acquisition lock) are left out on a real cluster; faults that
need the three-broker Apache Kafka the soak started (``--kafka cluster``: a broker killed with
kill -9, or restarted as an upgrade does, mid-batch) are left out everywhere else.

A caller that runs more beside the soak (the long soak: a second query, its worker, its sampling)
plugs it in through :class:`SoakHooks`: every loop that keeps the query running, the faults'
waits included, calls its tick, so nothing beside the soak waits for a fault to end.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

from sharegroup_testing.embedded_broker import EmbeddedBroker
from sharegroup_testing.kafka_cluster import KafkaCluster
from sharegroup_testing.kafka_peers import KafkaUnderTest
from sharegroup_testing.workers import kill_source_workers
from soak.member import IndependentMember
from soak.producer import NumberedProducer
from soak.query import SoakQuery
from soak.sink import BatchSink

__all__ = ["FAULTS", "Fault", "SoakContext", "SoakHooks", "applicable", "schedule"]

#: How long a fault waits for the query to reach the batch it needs.
ARM_TIMEOUT_S = 30.0
#: Lock duration while a lock-expiry fault is armed; the slow batch outlasts it by SLOW_MARGIN_S.
SHORT_LOCK_MS = 1_500
SLOW_MARGIN_S = 1.5
#: Retriable errors a broker may answer ShareFetch / ShareAcknowledge with.
FETCH_ERRORS = ("LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "REQUEST_TIMED_OUT")
ACK_ERRORS = ("SHARE_SESSION_NOT_FOUND", "INVALID_RECORD_STATE", "INVALID_SHARE_SESSION_EPOCH")


def _no_tick(_: SoakContext) -> None:
    return None


def _kill_every_source_worker(_: SoakContext) -> int:
    return kill_source_workers()


@dataclass(frozen=True)
class SoakHooks:
    """What a caller running more beside the soak plugs into it; the defaults are the soak alone.

    ``tick`` is called with the context on every turn of the loops that keep the query running
    (every 0.2 s or so, faults' waits included; not while a broker restarts). ``kill_driver_workers``
    SIGKILLs the driver-side workers the driver_killed fault kills and says how many: by default
    every one of this process, which with a second query would kill that one's too.
    """

    tick: Callable[[SoakContext], None] = _no_tick
    kill_driver_workers: Callable[[SoakContext], int] = _kill_every_source_worker


@dataclass
class SoakContext:
    """What a fault acts on, and what a hook's tick may look at (``producer``, ``members``)."""

    rng: random.Random
    kafka: KafkaUnderTest
    query: SoakQuery
    sink: BatchSink
    topic: str
    group: str
    lock_ms: int
    partitions: int = 1
    members: list[IndependentMember] = field(default_factory=list)
    producer: NumberedProducer | None = None
    hooks: SoakHooks = field(default_factory=SoakHooks)

    @property
    def broker(self) -> EmbeddedBroker:
        assert self.kafka.embedded is not None, "a broker fault was scheduled on a real cluster"
        return self.kafka.embedded

    @property
    def cluster(self) -> KafkaCluster:
        assert self.kafka.cluster is not None, "a cluster fault was scheduled on a cluster the soak did not start"
        return self.kafka.cluster

    def keep_running(self) -> None:
        """One turn of keeping things running: the query started again if it ended, then the hooks' tick."""
        self.query.ensure_running()
        self.hooks.tick(self)

    def wait(self, event: threading.Event, timeout_s: float = ARM_TIMEOUT_S) -> bool:
        """Wait for ``event`` while keeping the query running (an earlier fault may have ended it)."""
        deadline = time.monotonic() + timeout_s
        while not event.wait(0.2):
            self.keep_running()
            if time.monotonic() > deadline:
                self.sink.disarm()
                return False
        return True


@dataclass(frozen=True)
class Fault:
    name: str
    needs_embedded: bool
    inject: Callable[[SoakContext], bool]
    needs_cluster: bool = False


def _task_failure(ctx: SoakContext) -> bool:
    """foreachBatch raises once, before or after writing: the query fails and restarts from its checkpoint.

    The failure's message says it was injected, so SoakQuery counts it as expected without notice.
    """
    return ctx.wait(ctx.sink.arm_failure(after_write=ctx.rng.random() < 0.5))


def _driver_killed(ctx: SoakContext) -> bool:
    """SIGKILL the driver-side Python worker mid-batch: nothing is released, the query fails and restarts."""
    if not ctx.wait(ctx.sink.arm_pause(1.0)) or not ctx.hooks.kill_driver_workers(ctx):
        return False
    ctx.query.expect_failure()  # noticed only by ensure_running, which runs on this thread
    return True


def _query_stopped(ctx: SoakContext) -> bool:
    """query.stop() while a batch is in the sink, then start again from the checkpoint."""
    if not ctx.wait(ctx.sink.arm_pause(1.0)):
        return False
    ctx.query.restart()
    return True


def _broker_down(ctx: SoakContext) -> bool:
    node = ctx.rng.choice(ctx.broker.broker_ids)
    ctx.broker.set_down(node)
    try:
        time.sleep(ctx.rng.uniform(1.0, 3.0))
    finally:
        ctx.broker.set_up(node)
    return True


def _fetch_errors(ctx: SoakContext) -> bool:
    ctx.broker.fail_next("ShareFetch", ctx.rng.choices(FETCH_ERRORS, k=ctx.rng.randint(1, 3)))
    return True


def _ack_errors(ctx: SoakContext) -> bool:
    ctx.broker.fail_next("ShareAcknowledge", ctx.rng.choices(ACK_ERRORS, k=ctx.rng.randint(1, 3)))
    return True


def _lock_expired(ctx: SoakContext) -> bool:
    """A batch outlives its acquisition lock: its acks fail, the records come back and are deduplicated.

    Only batches acquired after the lock is shortened get the short lock, and the batch after the
    current one may already be acquired, so the slow batch is the one after that.
    """
    ctx.broker.set_lock_duration(SHORT_LOCK_MS)
    try:
        return ctx.wait(ctx.sink.arm_slow(ctx.sink.last_batch + 2, SHORT_LOCK_MS / 1000 + SLOW_MARGIN_S))
    finally:
        ctx.broker.set_lock_duration(ctx.lock_ms)


def _down_for_a_while(ctx: SoakContext, node: int, stop: Callable[[int], None]) -> bool:
    """Take ``node`` down mid-batch with ``stop``, keep the query running 2-6 s, then start it again
    (back in every ISR before the next fault, as an operator would wait)."""
    if not ctx.wait(ctx.sink.arm_pause(1.0)):
        return False
    stop(node)
    try:
        deadline = time.monotonic() + ctx.rng.uniform(2.0, 6.0)
        while time.monotonic() < deadline:
            ctx.keep_running()
            time.sleep(0.2)
    finally:
        ctx.cluster.restart(node)
    return True


def _broker_killed(ctx: SoakContext) -> bool:
    """kill -9 the leader of a random subscribed partition (or another node), then restart it."""
    cluster = ctx.cluster
    node = (cluster.leader_of(ctx.topic, ctx.rng.randrange(ctx.partitions)) if ctx.rng.random() < 0.7
            else ctx.rng.choice(list(cluster.nodes)))
    return _down_for_a_while(ctx, node, cluster.kill)


def _broker_restarted(ctx: SoakContext) -> bool:
    """A controlled restart of one node (SIGTERM, as in a rolling upgrade): its leaderships move first."""
    cluster = ctx.cluster
    return _down_for_a_while(ctx, ctx.rng.choice(list(cluster.nodes)), cluster.stop_node)


def _member_joined(ctx: SoakContext) -> bool:
    """Another ShareConsumer joins the group for a few seconds, then leaves."""
    if any(m.is_alive() for m in ctx.members):
        return False
    member = IndependentMember(ctx.kafka.config(**{"group.id": ctx.group}), ctx.topic, ctx.rng.uniform(3.0, 6.0))
    member.start()
    ctx.members.append(member)
    return True


FAULTS = (
    Fault("task_failure", False, _task_failure),
    Fault("driver_killed", False, _driver_killed),
    Fault("query_stopped", False, _query_stopped),
    Fault("broker_down", True, _broker_down),
    Fault("share_fetch_errors", True, _fetch_errors),
    Fault("share_ack_errors", True, _ack_errors),
    Fault("lock_expired", True, _lock_expired),
    Fault("member_joined", False, _member_joined),
    Fault("broker_killed", False, _broker_killed, needs_cluster=True),
    Fault("broker_restarted", False, _broker_restarted, needs_cluster=True),
)


def applicable(embedded: bool, cluster: bool = False) -> list[Fault]:
    """The faults this cluster can take: all but the cluster's on the embedded broker, those outside the
    broker on a real one, and broker kills and restarts on the three-broker cluster the soak started."""
    return [f for f in FAULTS if (embedded or not f.needs_embedded) and (cluster or not f.needs_cluster)]


def schedule(rng: random.Random, embedded: bool, cluster: bool = False,
             pending: Collection[str] = ()) -> Iterator[Fault]:
    """Every applicable kind once in a seeded random order, then kinds drawn at random for ever: from those still
    ``pending`` (the caller's live set of kinds that have not happened yet) while there are any, since a fault
    that found no batch to hit did not happen and a soak must see every kind."""
    kinds = applicable(embedded, cluster)
    first = rng.sample(kinds, len(kinds))
    yield from first
    while True:
        yield rng.choice([kind for kind in kinds if kind.name in pending] or kinds)
