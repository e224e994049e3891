"""How many records the next epoch takes: the read limit, unless keeping to it would give records back to die.

Kafka acquires whole producer batches up to the share-partitions' in-flight windows, whatever
``max.poll.records`` says, so one acquisition may hold many triggers' worth; the surplus waits,
acquired, in the backlog. Every record given back unprocessed spends one of its delivery
attempts, and at the group's ``share.delivery.count.limit`` the broker archives it, unprocessed,
telling nobody. So the read limits (``maxRecordsPerTrigger``, ``maxBytesPerTrigger``) yield to
two rules, and an epoch that takes more than they allow says why (``Overrun``):

- a record on its last delivery attempt goes into the next epoch (given back, it would be archived);
- what one acquisition brought is spread over the batches that can still start and end inside its
  lock (``LOCK_SHARE`` of it), at the pace Spark's batches have gone (``BatchPace``): an epoch takes
  more when the limit would leave records waiting past that.

Only a backlog no batch can emit in time any more goes back (a batch that outlived the lock would
have its records processed twice), and none of it is on its last attempt. Where batches are slow
for the lock, every warning gives the same advice (``longer_lock``).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import dataclass

from sharegroup_source.kafka.group_configs import GROUP_CONFIG_PREFIX, group_config_command

__all__ = ["LOCK_SHARE", "BatchPace", "Overrun", "Pacing", "longer_lock"]

log = logging.getLogger(__name__)

#: A batch should end by this share of its records' lock: the rest is for the acknowledgement's trip.
LOCK_SHARE = 0.8
#: Batches whose pace the next one is judged by: the slowest of them.
PACE_WINDOW = 3
#: Batches are planned this much slower than they went: Spark's next call comes late by a trigger's jitter, and a
#: larger batch takes longer (planned at the pace, a plan's last batch was given back at 12.0 s of a 15 s lock).
PLAN_HEADROOM = 1.5
#: At start, a trigger limit that leaves less than this for each batch of one acquisition, inside its lock, is
#: warned of: a Spark micro-batch into a real sink rarely takes less.
START_BATCH_S = 1.0
#: After the first overrun's warning, the next comes no sooner than this (each overrun is logged at INFO).
WARN_EVERY_S = 600.0
#: The smallest in-flight window Kafka accepts (``share.partition.max.record.locks``).
MIN_RECORD_LOCKS = 100


class BatchPace:
    """How long Spark takes between handing out an epoch and calling for the next: the batch, the sink, the trigger.

    Measured from the return of a call that handed out records to the start of the next call, so time the source
    itself waited for records (an idle queue, a new member's assignment) is not counted. A run's first batch is
    not counted either: Spark starts its Python workers and the sink with it (6.2 s where the next took 1.2 s,
    Apache Kafka 4.4.0, a 1 s sink, 2026-12-01)."""

    def __init__(self) -> None:
        self._handed_out_at: float | None = None
        self._periods: deque[float] = deque(maxlen=PACE_WINDOW)
        self._first = True

    def called(self, now_s: float | None = None) -> None:
        """Spark calls for the next epoch."""
        if self._handed_out_at is not None:
            if not self._first:
                self._periods.append((time.monotonic() if now_s is None else now_s) - self._handed_out_at)
            self._first = False
            self._handed_out_at = None

    def answered(self, records: int, now_s: float | None = None) -> None:
        """The call ends, handing out ``records`` (none: Spark runs no batch, there is nothing to time)."""
        self._handed_out_at = (time.monotonic() if now_s is None else now_s) if records else None

    @property
    def period_ms(self) -> float | None:
        """The slowest of the last batches, in milliseconds; None before the first."""
        return max(self._periods) * 1000 if self._periods else None


@dataclass(frozen=True)
class Overrun:
    """Why an epoch takes ``size`` records where the limits allowed ``allowed``."""

    size: int
    allowed: int
    last_attempts: int  # records on their last delivery attempt among them
    waiting: int  # the records of the acquisition still to emit, these included
    batches_left: int  # batches that can still start and end inside the acquisition's lock


class Pacing:
    """The rules above for one query run. ``lock_duration_ms`` None: the member renews its locks, nothing ages."""

    def __init__(self, group_id: str, lock_duration_ms: int | None, delivery_limit: int, partitions: int):
        """``partitions``: the subscribed share-partitions, whose in-flight windows bound an acquisition."""
        self._group_id = group_id
        self._lock_ms = lock_duration_ms
        self.delivery_limit = delivery_limit
        self._partitions = max(partitions, 1)
        self.pace = BatchPace()
        self._warned_at: float | None = None

    def warn_at_start(self, limit: int | None, acquisition: int) -> None:
        """Warn when one acquisition (at most ``acquisition`` records) holds so many epochs of ``limit`` records that
        each would have under ``START_BATCH_S`` inside the lock."""
        if self._lock_ms is None or limit is None or acquisition <= limit:
            return
        batches = math.ceil(acquisition / limit)
        budget_s = LOCK_SHARE * self._lock_ms / 1000 / batches
        if budget_s >= START_BATCH_S:
            return
        log.warning("group %s: one acquisition may bring up to %s records (%d share-partitions' in-flight windows; "
                    "Kafka acquires whole producer batches), %d batches at maxRecordsPerTrigger=%d, and all must be "
                    "emitted within %.1fs of their %.1fs lock: %.2fs a batch. Slower batches take more than "
                    "maxRecordsPerTrigger rather than give records back (each give-back spends one of a record's %d "
                    "delivery attempts); to keep batches at %d, %s", self._group_id, f"{acquisition:,}",
                    self._partitions,
                    batches, limit, LOCK_SHARE * self._lock_ms / 1000, self._lock_ms / 1000, budget_s,
                    self.delivery_limit, limit, self._remedy(limit, START_BATCH_S * 1000, acquisition, limit + 1))

    def emittable(self, acquired_at_ms: int, now_ms: int | None = None) -> bool:
        """Whether a batch started now, at the pace batches have gone, ends inside ``LOCK_SHARE`` of the lock of
        records acquired at ``acquired_at_ms`` (before any batch was timed: whether half the lock is left)."""
        if self._lock_ms is None:
            return True
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        period = self.pace.period_ms
        if period is None:
            return now_ms - acquired_at_ms < self._lock_ms / 2
        return now_ms + period <= acquired_at_ms + LOCK_SHARE * self._lock_ms

    def batches_left(self, acquired_at_ms: int, now_ms: int | None = None) -> int | None:
        """How many batches, this one included, can still start and end inside ``LOCK_SHARE`` of the lock of
        records acquired at ``acquired_at_ms``; None when nothing bounds them (renewed locks, no batch timed yet)."""
        period = self.pace.period_ms
        if self._lock_ms is None or period is None:
            return None
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        planned = max(PLAN_HEADROOM * period, 1.0)
        last_start = acquired_at_ms + LOCK_SHARE * self._lock_ms - planned
        return max(math.floor((last_start - now_ms) / planned) + 1, 1)

    def size(self, waiting: int, allowed: int, last_attempts: int, acquired_at_ms: int) -> int:
        """How many of ``waiting`` records (the ``last_attempts`` first) the next epoch takes, where the read
        limits allow ``allowed``; an overrun is logged with its reason."""
        left = self.batches_left(acquired_at_ms)
        paced = 0 if left is None else math.ceil(waiting / left)
        size = min(max(allowed, paced, last_attempts), waiting)
        if size > allowed:
            self._overrun(Overrun(size, allowed, last_attempts, waiting, left or 1))
        return size

    def _overrun(self, overrun: Overrun) -> None:
        reasons = []
        if overrun.last_attempts:
            reasons.append(f"{overrun.last_attempts} on their last delivery attempt (share.delivery.count.limit="
                           f"{self.delivery_limit}; given back, the group would archive them unprocessed)")
        if overrun.size > overrun.last_attempts and overrun.size > overrun.allowed and self._lock_ms is not None:
            period = self.pace.period_ms or 0.0
            reasons.append(f"{overrun.waiting:,} acquired records wait and {overrun.batches_left} batch(es) of "
                           f"{period / 1000:.1f}s can still end inside {LOCK_SHARE:.0%} of their "
                           f"{self._lock_ms / 1000:.1f}s lock")
        line = (f"group {self._group_id}: the next epoch takes {overrun.size:,} records, past the read limit's "
                f"{overrun.allowed:,}: {'; '.join(reasons)}")
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < WARN_EVERY_S:
            log.info("%s", line)
            return
        self._warned_at = now
        remedy = ""
        if self._lock_ms is not None and self.pace.period_ms is not None and overrun.size > overrun.last_attempts:
            remedy = f"; to keep batches at {overrun.allowed:,}, " + self._remedy(
                overrun.allowed, self.pace.period_ms, overrun.waiting, overrun.size)
        log.warning("%s%s", line, remedy)

    def _remedy(self, limit: int, period_ms: float, acquisition: int, taken: int) -> str:
        """The settings that let ``acquisition`` records go ``limit`` a batch at ``period_ms`` a batch; each above what
        the query has (``taken``: the epoch this overrun sized), since what it has did not let them."""
        assert self._lock_ms is not None
        batches = math.ceil(acquisition / limit)
        lock = max(int(math.ceil(batches * period_ms / LOCK_SHARE / 10_000) * 10_000),
                   (self._lock_ms // 10_000 + 1) * 10_000)
        fit = max(int(LOCK_SHARE * self._lock_ms // max(period_ms, 1.0)), 1) * limit  # records the lock lets go
        return (f"raise the group's lock ({GROUP_CONFIG_PREFIX}share.record.lock.duration.ms={lock}; Kafka caps it at "
                f"the broker's group.share.max.record.lock.duration.ms), or acquire fewer records at once "
                f"({GROUP_CONFIG_PREFIX}share.partition.max.record.locks="
                f"{max(fit // self._partitions, MIN_RECORD_LOCKS)}), or raise maxRecordsPerTrigger to "
                f"{max(math.ceil(acquisition * period_ms / (LOCK_SHARE * self._lock_ms)), taken):,}")


def longer_lock(group_id: str, used_ms: float, lock_ms: int, bootstrap_servers: str) -> str:
    """How to give a group's records a lock with room for work that took ``used_ms``: twice that, in whole 10 s."""
    raised = int(-(-max(2 * used_ms, lock_ms + 10_000) // 10_000) * 10_000)
    return (f"raise the group's share.record.lock.duration.ms (the source option "
            f"groupConfig.share.record.lock.duration.ms={raised}, or "
            f"{group_config_command(group_id, 'share.record.lock.duration.ms', raised, bootstrap_servers)})")
