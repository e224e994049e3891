"""Figures for the admin: describing many share groups in one call, next to one group at a time.

    python -m bench.admin_bench [--groups 100] [--partitions 8] [--rounds 3] [--peer embedded|apache]

``run(kafka, scratch)`` builds ``groups`` Delta-coordinated groups of ``partitions`` share-partitions
each (in-flight records, a member that left) and describes them all with ``describe_groups`` in
one call and, in the same run, with the naive loop an operator script would write (one call per
group), in interleaved rounds so outside load falls on both alike. Per way it reports the median
wall time, the Delta table reads, and the Kafka requests (ListOffsets and Metadata) and admin
clients (each a bootstrap connection). The Delta reads are the same either way; the Kafka
requests are what batching saves: a lookup per cluster instead of one per group.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from sharegroup_source.admin import describe_groups
from sharegroup_testing.kafka_peers import PEERS, KafkaUnderTest, kafka_session
from state_store import AckType, SharePartition
from state_store.delta_table import StateTable
from state_store.group import GroupStore

__all__ = ["run"]

RECORDS_PER_PARTITION = 100
ACQUIRED_PER_PARTITION = 40
ACCEPTED_PER_PARTITION = 25

#: What is counted: the calls that each cost a Delta read or a Kafka round trip.
_COUNTED = {
    "delta_table_reads": (StateTable, "snapshot"),
    "list_offsets_requests": (AdminClient, "list_offsets"),
    "metadata_requests": (AdminClient, "list_topics"),
    "admin_clients": (AdminClient, "__init__"),
}


def run(kafka: KafkaUnderTest, scratch: Path, *, groups: int = 100, partitions: int = 8,
        rounds: int = 3) -> dict[str, Any]:
    """Describe ``groups`` groups of ``partitions`` share-partitions both ways; the figures as a dict.

    ``{"groups", "partitions", "rounds", "one_call": {...}, "one_group_at_a_time": {...},
    "speedup"}``, each way with ``wall_s`` (median), ``wall_s_rounds`` and, per describe of all the
    groups, ``delta_table_reads``, ``list_offsets_requests``, ``metadata_requests`` and
    ``admin_clients``.
    """
    topic = kafka.new_topic(partitions, prefix="bench-admin")
    kafka.produce(topic, ((n % partitions, None, b"x") for n in range(RECORDS_PER_PARTITION * partitions)))
    locations = [str(_group(scratch / f"group-{i:03}", f"bench-group-{i:03}", topic, partitions))
                 for i in range(groups)]
    servers = kafka.bootstrap_servers
    ways: dict[str, Callable[[], None]] = {
        "one_call": lambda: _described(describe_groups(locations, bootstrap_servers=servers)),
        "one_group_at_a_time": lambda: _described(
            [d for location in locations for d in describe_groups([location], bootstrap_servers=servers)]),
    }
    walls: dict[str, list[float]] = {way: [] for way in ways}
    counts: dict[str, Counter[str]] = {}
    for _ in range(rounds):
        for way, describe in ways.items():
            with _counting() as counted:
                started = time.perf_counter()
                describe()
                walls[way].append(time.perf_counter() - started)
            counts[way] = counted  # the same every round: the last is reported
    figures = {way: {"wall_s": round(statistics.median(walls[way]), 3),
                     "wall_s_rounds": [round(w, 3) for w in walls[way]], **counts[way]} for way in ways}
    return {"groups": groups, "partitions": partitions, "rounds": rounds, **figures,
            "speedup": round(figures["one_group_at_a_time"]["wall_s"] / figures["one_call"]["wall_s"], 2)}


def _group(location: Path, group_id: str, topic: str, partitions: int) -> Path:
    """A group with records in flight on every partition, and no member left in it."""
    store = GroupStore.open(str(location), group_id, {"share.auto.offset.reset": "earliest"})
    store.join("bench-member", "worker")

    def work(sps: dict[tuple[str, int], SharePartition]) -> None:
        now_ms = int(time.time() * 1000)
        for sp in sps.values():
            sp.acquire("bench-member", ACQUIRED_PER_PARTITION, now_ms, RECORDS_PER_PARTITION)
            sp.acknowledge("bench-member", [(0, ACCEPTED_PER_PARTITION - 1, AckType.ACCEPT)], now_ms)
            sp.release_member("bench-member", now_ms)

    store.share_state.update_all(work, {(topic, p): 0 for p in range(partitions)})
    store.leave("bench-member")
    return location


def _described(descriptions: list) -> None:
    failed = [d.error for d in descriptions if d.error is not None]
    assert not failed, f"{len(failed)} groups could not be described, e.g. {failed[0]}"


@contextmanager
def _counting() -> Iterator[Counter[str]]:
    """Count calls of the methods in _COUNTED while the block runs."""
    counted: Counter[str] = Counter()
    originals = {name: getattr(owner, method) for name, (owner, method) in _COUNTED.items()}

    def counter(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            counted[name] += 1
            return original(*args, **kwargs)
        return call

    try:
        for name, (owner, method) in _COUNTED.items():
            setattr(owner, method, counter(name, originals[name]))
        yield counted
    finally:
        for name, (owner, method) in _COUNTED.items():
            setattr(owner, method, originals[name])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peer", choices=PEERS, default="embedded")
    args = parser.parse_args()
    with kafka_session(args.peer) as kafka, tempfile.TemporaryDirectory(prefix="admin-bench-") as scratch:
        print(json.dumps(run(kafka, Path(scratch), groups=args.groups, partitions=args.partitions,
                             rounds=args.rounds), indent=2))


if __name__ == "__main__":
    main()
