"""Plain Python workers in a Delta-coordinated share group: ``DeltaShareConsumer``.

How a worker takes part in the group, and where it differs from ``ShareConsumer``, is the class's docstring:
the API reference shows it.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import AcknowledgeType, IllegalStateException, KafkaError, KafkaException, Message, TopicPartition

from sharegroup_source.acks import Ack, record_keys, releases, runs_of
from sharegroup_source.coordinators.delta.coordinator import DeltaCoordinator
from sharegroup_source.coordinators.delta.member import GroupMember
from sharegroup_source.kafka.offset_reader import OffsetRangeReader
from sharegroup_source.locations import STORAGE_PREFIX, check_location, storage_options_of
from sharegroup_source.redaction import redact
from sharegroup_source.schema import message_key
from state_store import AckType, DeadLetters
from state_store.dead_letters import DELIVERY_LIMIT_REASON
from state_store.group import SETTING_OPTIONS, GroupStore

__all__ = ["DEFAULT_MAX_POLL_RECORDS", "REJECTED_REASON", "DeltaMessage",
           "DeltaShareConsumer"]

log = logging.getLogger(__name__)

DEFAULT_MAX_POLL_RECORDS = 500
REJECTED_REASON = "rejected by the worker"
#: Keys every consumer needs, and what each names (for the error that says one is missing).
_REQUIRED = {
    "bootstrap.servers": "the Kafka cluster",
    "group.id": "the share group",
    "group.location": "the path or URI of the group's Delta state, the same as a query's groupLocation",
}
#: Keys this consumer takes; every other key is the Kafka client's.
_OWN = {"group.id", "group.location", "max.poll.records", "dead.letter.location", "share.acknowledgement.mode",
        *SETTING_OPTIONS}


Position = tuple[str, int, int]


class DeltaMessage:
    """A record as ``ShareConsumer.poll`` gives it: the log's record and the delivery count the group gave it
    (a plain consumer's record has none)."""

    __slots__ = ("_delivery_count", "_position", "_record")

    def __init__(self, record: Message, delivery_count: int):
        self._record = record
        self._position = message_key(record)
        self._delivery_count = delivery_count

    def topic(self) -> str:
        return self._position[0]

    def partition(self) -> int:
        return self._position[1]

    def offset(self) -> int:
        return self._position[2]

    def key(self) -> bytes | None:
        return self._record.key()

    def value(self) -> bytes | None:
        return self._record.value()

    def headers(self) -> list[tuple[str, str | bytes | None]] | None:
        headers = self._record.headers()
        return None if headers is None else list(headers.items() if isinstance(headers, dict) else headers)

    def timestamp(self) -> tuple[int, int]:
        return self._record.timestamp()

    def delivery_count(self) -> int:
        return self._delivery_count

    def error(self) -> KafkaError | None:
        """Always None: a poll raises its errors instead of returning them as messages."""
        return None

    def __repr__(self) -> str:  # no payload: it may be sensitive
        topic, partition, offset = self._position
        return f"DeltaMessage({topic}[{partition}]@{offset}, delivery_count={self._delivery_count})"


class DeltaShareConsumer:
    """A worker member of the share group at ``group.location``.

    Shaped like ``confluent_kafka.ShareConsumer`` in explicit acknowledgement mode, so code written
    for a share consumer shares one queue with Spark queries (``coordinator=delta``) on any Kafka
    cluster. A worker is a member of the group as a query's driver is (kind ``worker`` in the
    members table) and makes the driver's calls (``DeltaCoordinator``): a poll locks offset ranges
    in the group's ``share_state`` in one compare-and-swap commit and reads those records from the
    log with a plain consumer (assign + seek); a commit settles every staged acknowledgement in one
    commit. Only Metadata, ListOffsets and Fetch reach Kafka.

    Where it differs from ShareConsumer, because the group's state is in Delta:

    - the member renews its locks while it lives, so slow processing keeps its records; a worker
      that dies stops renewing, and its records go to another member after the lock duration;
    - offsets inside the log that hold no record (compaction, transaction markers) are never
      returned: they are ACCEPTed with the next commit, as a broker archives them;
    - REJECTed records, and records the group archived at its delivery-count limit, are kept in the
      dead letters table (``dead.letter.location``), as a query keeps them: nobody gets them again.

    ``config``: ``bootstrap.servers``, ``group.id`` and ``group.location`` (required), the group
    settings ``share.record.lock.duration.ms``, ``share.delivery.count.limit``,
    ``share.partition.max.record.locks`` and ``share.auto.offset.reset`` (checked against the
    group's, as a query's are), ``max.poll.records`` (500), ``dead.letter.location``
    (``<group.location>/dead_letters``); every other key goes to the Kafka client unchanged.
    Like ShareConsumer it is not thread-safe: one instance per thread.
    """

    def __init__(self, config: Mapping[str, Any]):
        for key, meaning in _REQUIRED.items():
            if config.get(key) is None or not str(config[key]).strip():
                raise ValueError(f"DeltaShareConsumer config {key!r} is required: {meaning}")
        mode = str(config.get("share.acknowledgement.mode", "explicit")).strip().lower()
        if mode != "explicit":
            raise ValueError(f"share.acknowledgement.mode={mode!r}: DeltaShareConsumer acknowledges explicitly only")
        self._group_id = str(config["group.id"])
        self._max_poll_records = _positive(config, "max.poll.records", DEFAULT_MAX_POLL_RECORDS)
        storage = storage_options_of(config)  # stateStorage.<key>, as a query takes them
        self._kafka = {key: value for key, value in config.items()
                       if key not in _OWN and not key.lower().startswith(STORAGE_PREFIX)}
        locations = {key: str(config[key]) for key in ("group.location", "dead.letter.location") if config.get(key)}
        for key, location in locations.items():
            check_location(key, location, storage)  # reachable, writable, atomic: before the member joins
        self._group = GroupStore.open(locations["group.location"], self._group_id, _group_settings(config),
                                      storage_options=storage)
        self._dead_letters = _dead_letters(locations.get("dead.letter.location"), self._group.location, storage)
        self.member_id = f"worker-{uuid.uuid4().hex}"
        self._reader = OffsetRangeReader(self._kafka, delivered=True)
        self._coordinator: DeltaCoordinator | None = None
        self._topics: list[str] = []
        self._in_flight: dict[Position, DeltaMessage] = {}  # returned by a poll, not settled yet
        self._staged: dict[Position, AckType] = {}
        self._gaps: list[Position] = []  # acquired offsets without a record: ACCEPTed with the next settle
        self._closed = False

    def __repr__(self) -> str:
        return (f"DeltaShareConsumer(member={self.member_id}, group={self._group_id}, "
                f"group.location={self._group.location_shown}, topics={self._topics}, config={redact(self._kafka)})")

    @property
    def lost_commit_races(self) -> int:
        """How many of this consumer's commits to the group's ``share_state`` table lost a compare-and-swap race
        to another member's commit since it was created, each planned again on the newer version: how
        contended the group's state is (ShareConsumer has no such count; bench/delta_coordinator.py reports it)."""
        return self._group.share_state.table.lost_races

    # -- ShareConsumer's calls -----------------------------------------------------------------
    def subscribe(self, topics: Sequence[str]) -> None:
        """Join the group as a member taking records of ``topics`` (once per consumer: a member's topics are fixed)."""
        self._check_open()
        if self._coordinator is not None:
            raise IllegalStateException(f"already subscribed to {self._topics}: a DeltaShareConsumer subscribes "
                                        "once; close it and create another for other topics")
        if not topics:
            raise ValueError("subscribe() needs at least one topic")
        member = GroupMember(self._group, self.member_id, "worker", self._kafka, topics)
        self._coordinator = DeltaCoordinator(member, self._max_poll_records)
        self._topics = list(topics)

    def poll(self, timeout: float = -1) -> list[DeltaMessage]:
        """Lock up to ``max.poll.records`` records for this member and read them, waiting up to ``timeout``
        seconds for some (negative: until some come). Acknowledgements staged since the last commit are
        settled first, as ShareConsumer sends them with its next poll.

        Raises IllegalStateException, as ShareConsumer does, when the consumer is closed or not
        subscribed, or when records of the previous poll are still unacknowledged: this member holds
        them, and a poll that went on would hold them until it leaves.
        """
        self._check_open()
        coordinator = self._subscribed()
        unacknowledged = sum(position not in self._staged for position in self._in_flight)
        if unacknowledged:
            raise IllegalStateException(f"{unacknowledged} records from previous poll have not been acknowledged")
        self._warn_on_failures(self._settle())
        positions = coordinator.acquire(self._max_poll_records, math.inf if timeout < 0 else timeout)
        try:
            messages, self._gaps = self._read(positions)
            self._dead_letter_archived()
        except BaseException:  # the caller got nothing, yet the member would renew these locks: give them back
            coordinator.acknowledge(releases(positions)).result()
            raise
        self._in_flight = {(m.topic(), m.partition(), m.offset()): m for m in messages}
        return messages

    def acknowledge(self, message: DeltaMessage, ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Stage how ``message`` is settled; it takes effect with the next commit, poll or close."""
        self.acknowledge_offset(message.topic(), message.partition(), message.offset(), ack_type)

    def acknowledge_offset(self, topic: str, partition: int, offset: int,
                           ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """:meth:`acknowledge` by position. A record not returned by a poll, or settled already, is refused
        (IllegalStateException): this member does not hold it."""
        self._check_open()
        position = (topic, partition, offset)
        if position not in self._in_flight:
            raise IllegalStateException(f"{topic}[{partition}] offset {offset} is not in flight: only records "
                                        "returned by the last poll and not committed yet can be acknowledged")
        self._staged[position] = AckType[AcknowledgeType(ack_type).name]

    def commit_sync(self, timeout: float = 60) -> dict[TopicPartition, KafkaException | None]:
        """Settle every staged acknowledgement in one commit: per topic-partition, None or the error, as
        ShareConsumer returns them. A partition whose lock this member lost (it expired and another
        member took the records) fails whole with INVALID_RECORD_STATE; its records go to that member.

        ``timeout`` is ShareConsumer's signature only: the settle is one Delta commit, retried on
        contention a bounded number of times, and is not cut short.
        """
        self._check_open()
        return self._settle()

    def close(self) -> None:
        """Settle what is staged, give back what is still held, and leave the group; once."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._coordinator is not None:
                self._leave(self._coordinator)
        finally:
            self._reader.close()

    def __enter__(self) -> DeltaShareConsumer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateException("Share consumer closed")

    def _subscribed(self) -> DeltaCoordinator:
        if self._coordinator is None:
            raise IllegalStateException("Consumer is not subscribed to any topics")
        return self._coordinator

    def _settle(self) -> dict[TopicPartition, KafkaException | None]:
        """Staged acknowledgements and the last poll's gaps, in one commit; rejected records are dead-lettered
        first, so a REJECT never leaves a record nowhere."""
        acks = [Ack(*position, ack_type) for position, ack_type in self._staged.items()]
        acks += [Ack(*position) for position in self._gaps]
        if not acks:
            return {}
        self._dead_letter([self._in_flight[p] for p, t in self._staged.items() if t is AckType.REJECT],
                          REJECTED_REASON)
        failures = self._subscribed().acknowledge(runs_of(acks)).result()
        for position in self._staged:
            del self._in_flight[position]
        self._staged.clear()
        self._gaps = []
        self._dead_letter_archived()
        return {TopicPartition(topic, partition): _lost_lock(failures[(topic, partition)])
                if (topic, partition) in failures else None
                for topic, partition in sorted({(a.topic, a.partition) for a in acks})}

    def _leave(self, coordinator: DeltaCoordinator) -> None:
        try:
            self._warn_on_failures(self._settle())
        finally:
            coordinator.close()  # gives back the rest and leaves the members table
        self._dead_letter_archived()  # a RELEASE at the delivery-count limit archives

    def _read(self, positions: pa.Table) -> tuple[list[DeltaMessage], list[Position]]:
        """The records at ``positions`` (``schema.POSITIONS``) with their delivery counts, in log order, and the
        positions that hold no record: gaps in the log, or records it no longer holds."""
        counts = dict(zip(record_keys(positions), positions.column("deliveryCount").to_pylist(), strict=True))
        wanted: dict[tuple[str, int], list[int]] = {}
        for topic, partition, offset in counts:
            wanted.setdefault((topic, partition), []).append(offset)
        messages: list[DeltaMessage] = []
        empty: list[Position] = []
        results = self._reader.read_many(wanted)  # the partitions' fetches go out together
        for (topic, partition), result in sorted(results.items()):
            if result.missing:
                log.warning("%d offset(s) of %s[%d] the group handed out are no longer in the log (retention); "
                            "they are acknowledged without a record", len(result.missing), topic, partition)
            messages += [DeltaMessage(r, counts[message_key(r)]) for r in sorted(result.records, key=message_key)]
            empty += [(topic, partition, offset) for offset in sorted(result.gaps + result.missing)]
        return messages, empty

    def _dead_letter_archived(self) -> None:
        """Records the group archived at its delivery-count limit in this member's commits: nobody gets them again."""
        archived = self._subscribed().archived()
        if archived.num_rows:
            self._dead_letter(self._read(archived)[0], DELIVERY_LIMIT_REASON)

    def _dead_letter(self, messages: Sequence[DeltaMessage], reason: str) -> None:
        if not messages:
            return
        now_ms = int(time.time() * 1000)
        self._dead_letters.append([
            {"key": m.key(), "value": m.value(), "headers": m.headers(), "topic": m.topic(),
             "partition": m.partition(), "offset": m.offset(), "delivery_count": m.delivery_count(),
             "reason": reason, "time": now_ms, "group_id": self._group_id}
            for m in messages])

    def _warn_on_failures(self, results: Mapping[TopicPartition, KafkaException | None]) -> None:
        """Acknowledgements settled by a poll or close have no caller to return to (ShareConsumer would call its
        acknowledgement callback): a failure is logged, and its records go to the member that holds them."""
        for tp, error in results.items():
            if error is not None:
                log.warning("member %s: acknowledgement of %s[%d] failed: %s", self.member_id, tp.topic,
                            tp.partition, error)


def _positive(config: Mapping[str, Any], key: str, default: int) -> int:
    raw = config.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"DeltaShareConsumer config {key!r} must be a positive integer, got {raw!r}")
    return value


def _group_settings(config: Mapping[str, Any]) -> dict[str, int | str]:
    """The group settings this consumer set, typed as GroupStore takes them (GroupSettings checks their ranges)."""
    settings: dict[str, int | str] = {}
    for option, name in SETTING_OPTIONS.items():
        raw = config.get(option)
        if raw is None:
            continue
        if name == "auto_offset_reset":
            settings[option] = str(raw).strip().lower()
            continue
        try:
            settings[option] = int(str(raw).strip())
        except ValueError:
            raise ValueError(f"DeltaShareConsumer config {option!r} must be an integer, got {raw!r}") from None
    return settings


def _dead_letters(location: str | None, group_location: str, storage: dict[str, str]) -> DeadLetters:
    """The dead letters table at ``location`` (a path or URI), or ``dead_letters`` under the group's location."""
    if location is None:
        return DeadLetters.open(group_location, "dead_letters", storage_options=storage)
    return DeadLetters.at(location, storage_options=storage)


def _lost_lock(reason: str) -> KafkaException:
    return KafkaException(KafkaError(KafkaError.INVALID_RECORD_STATE, reason))
