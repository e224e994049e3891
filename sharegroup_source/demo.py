"""``make demo``: the embedded broker, sample orders, and a share-group member working the queue.

Short, complete and runnable on a laptop: no Kafka install, no JVM broker.
"""

from __future__ import annotations

import json
import random
import time

from sharegroup_source.broker import EmbeddedBroker
from sharegroup_source.share_client import Ack, AckType, ShareClient

ORDERS = 5_000
PARTITIONS = 4


def _orders(count: int) -> list[tuple[int, bytes, bytes]]:
    rng = random.Random(7)
    rows = []
    for order_id in range(count):
        order = {"order_id": order_id, "sku": f"sku-{rng.randrange(100)}", "qty": rng.randrange(1, 5)}
        rows.append((order_id % PARTITIONS, str(order_id).encode(), json.dumps(order).encode()))
    return rows


def main() -> None:
    with EmbeddedBroker(lock_duration_ms=30_000) as broker:
        broker.create_topic("orders", PARTITIONS)
        print(f"embedded broker at {broker.bootstrap_servers}, topic orders:{PARTITIONS}")
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
        for partition, key, value in _orders(ORDERS):
            producer.produce("orders", key=key, value=value, partition=partition)
        producer.flush(30)
        print(f"produced {ORDERS} orders")

        config = {"bootstrap.servers": broker.bootstrap_servers, "group.id": "orders-workers"}
        accepted = released = 0
        started = time.monotonic()
        with ShareClient(config, ["orders"], max_poll_records=1_000) as client:
            while accepted < ORDERS and time.monotonic() - started < 60:
                records = client.poll(1.0)
                acks = []
                for record in records:
                    # every 50th order fails once: RELEASE puts it back for a later delivery
                    retry = record.delivery_count() == 1 and int(record.key()) % 50 == 0
                    acks.append(Ack(record.topic(), record.partition(), record.offset(),
                                    AckType.RELEASE if retry else AckType.ACCEPT))
                client.acknowledge(acks)
                if records:
                    failed = [r for r in client.commit() if not r.ok]
                    accepted += sum(a.type is AckType.ACCEPT for a in acks)
                    released += sum(a.type is AckType.RELEASE for a in acks)
                    print(f"poll: {len(records):5d} records, accepted {accepted:5d}, released {released:3d}"
                          + (f", failed acks on {len(failed)} partition(s)" if failed else ""))
        print(f"done: {accepted} orders accepted ({released} retried once) in {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
