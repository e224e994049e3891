"""The ``progress`` table: the source's counters, one row per change, readable by any Delta reader.

The driver's Python worker has no SparkSession and Spark's progress events carry no
source-specific numbers, so the counters that tests, the demo and dashboards need
(acknowledged by type, failed acks, deduplicated redeliveries, lock headroom) live here.
Counters are cumulative per query run, so only each run's latest row matters; maintenance
drops the others.

Each row also says which process runs the query's share-group member and whether that member
has left the group, so a restarted query can wait for its predecessor's member to leave (see
``sharegroup_source.coordinators.broker.handover``).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import pyarrow as pa

from state_store.delta_table import StateTable
from state_store.format_version import FormatVersion
from state_store.table_cache import Snapshot
from state_store.table_commit import Write

__all__ = ["COUNTERS", "PROGRESS_ADDED_COLUMNS", "PROGRESS_FORMAT", "PROGRESS_SCHEMA", "ProgressTable", "RunMember",
           "SourceCounters"]


@dataclass
class SourceCounters:
    """What a query run acquired, acknowledged, lost and deduplicated: cumulative for the run."""

    acquired: int = 0
    accepted: int = 0
    released: int = 0
    rejected: int = 0
    ack_failures: int = 0
    redeliveries_deduped: int = 0
    dead_lettered: int = 0
    epochs: int = 0
    #: Smallest time left on an acquisition lock when its epoch was acknowledged; negative when a
    #: lock had already expired, None before the first acknowledgement.
    min_lock_headroom_ms: int | None = None
    #: Records this run RELEASEd unread because they had waited past half their lock for a batch: each comes
    #: back (to this query or another member) with its delivery count raised.
    given_back: int = 0
    #: Records this run emitted in an epoch although the group had delivered them before (delivery count above
    #: 1): work done again, after a lock ran out or a member gave them back.
    redelivered: int = 0
    #: Records that left the log (retention, DeleteRecords) before the group processed them, which the run went on
    #: without under failOnDataLoss=false.
    lost_unread: int = 0

    def snapshot(self) -> dict[str, int | None]:
        return asdict(self)


#: The counter columns of the ``progress`` table.
COUNTERS = tuple(f.name for f in fields(SourceCounters))
#: Counters format versions 2 (given_back, redelivered) and 3 (lost_unread) added: last in the schema, null in the
#: rows of runs before them.
PROGRESS_ADDED_COLUMNS = ("given_back", "redelivered", "lost_unread")
#: Versions 2 and 3 gained PROGRESS_ADDED_COLUMNS, which a release reading an earlier one would take for another
#: schema.
PROGRESS_FORMAT = FormatVersion(current=3)
PROGRESS_SCHEMA = pa.schema([("query_id", pa.string()), ("run_id", pa.string()), ("written_at_ms", pa.int64()),
                             *[(name, pa.int64()) for name in COUNTERS if name not in PROGRESS_ADDED_COLUMNS],
                             ("host", pa.string()), ("pid", pa.int64()), ("left_at_ms", pa.int64()),
                             ("commit_version", pa.int64()),  # later commits win
                             *[(name, pa.int64()) for name in PROGRESS_ADDED_COLUMNS]])


@dataclass(frozen=True)
class RunMember:
    """The share-group member of a query run that has not recorded leaving the group."""

    run_id: str
    host: str | None
    pid: int | None

    def process_is_alive(self) -> bool:
        """True when the run's process is known to be alive: on this host, with its pid in use.

        Elsewhere, or without a pid, the answer is False: not known either way.
        """
        return self.host == socket.gethostname() and self.pid is not None and not self.process_is_gone()

    def process_is_gone(self) -> bool:
        """True when the run's process is known to be dead: it can no longer leave the group.

        Only a process on this host can be checked; elsewhere the answer is False.
        """
        if self.host != socket.gethostname() or self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)  # signal 0 only asks whether the process exists
        except ProcessLookupError:
            return True
        except PermissionError:  # it exists, under another user
            pass
        return False


class ProgressTable:
    """Counter rows per query run in the ``progress`` Delta table."""

    def __init__(self, table: StateTable):
        self.table = table

    def append(self, query_id: str, run_id: str, counters: Mapping[str, int | None], *, left: bool = False) -> None:
        """Record a run's counters; ``left`` says its member has left the share group for good."""
        now_ms = int(time.time() * 1000)
        row = {"query_id": query_id, "run_id": run_id, "written_at_ms": now_ms,
               **{name: counters[name] for name in COUNTERS},
               "host": socket.gethostname(), "pid": os.getpid(), "left_at_ms": now_ms if left else None}
        self.table.commit(lambda snapshot: Write(pa.Table.from_pylist(
            [{**row, "commit_version": snapshot.next_version}], schema=PROGRESS_SCHEMA)))

    def totals(self, query_id: str) -> dict[str, int]:
        """Counters summed over the query's runs (each run's latest row); empty before any row."""
        latest = _latest_per_run(r for r in self.table.snapshot().rows() if r["query_id"] == query_id)
        if not latest:
            return {}
        totals = {name: sum(r[name] or 0 for r in latest) for name in COUNTERS}
        headrooms = [r["min_lock_headroom_ms"] for r in latest if r["min_lock_headroom_ms"] is not None]
        totals["min_lock_headroom_ms"] = min(headrooms) if headrooms else None
        totals["runs"] = len(latest)
        return totals

    def member_in_group(self, query_id: str) -> RunMember | None:
        """A run of the query whose member is in the share group, judged per run; None when none is.

        Each run speaks only for its own member: a run that joined late and left (a second query refused
        at its first call) says nothing of the run still in the group, whose rows may all be older. A run
        whose latest row has not recorded leaving is in the group, unless it died without leaving and
        another run wrote a row since (a successor waited for it before joining, so it is gone from the
        group too). Only a process on this host can be checked: a run elsewhere, or one whose process is
        not alive, counts as ended once another run wrote after it, as the latest row always decided.

        The newest such run whose process is not known to be gone is returned, so a caller that waits
        for it waits for a live member first; failing that, the newest one whose process is gone (a
        caller stops waiting for it: see ``RunMember.process_is_gone``).
        """
        latest = sorted(_latest_per_run(r for r in self.table.snapshot().rows() if r["query_id"] == query_id),
                        key=lambda r: r["commit_version"])
        newest = latest[-1]["commit_version"] if latest else None
        in_group: list[RunMember] = []
        for row in latest:
            if row["left_at_ms"] is not None:
                continue
            member = RunMember(row["run_id"], row["host"], row["pid"])
            if row["commit_version"] != newest and not member.process_is_alive():  # another run wrote since
                continue
            in_group.append(member)
        alive = [m for m in in_group if not m.process_is_gone()]
        return (alive or in_group)[-1] if in_group else None

    def maintain(self) -> None:
        """Keep each run's latest row only: earlier ones are superseded cumulative counters."""
        def rewrite(snapshot: Snapshot) -> pa.Table | None:
            rows = snapshot.rows()
            latest = _latest_per_run(rows)
            return None if len(latest) == len(rows) else pa.Table.from_pylist(latest, schema=PROGRESS_SCHEMA)

        self.table.maintain(rewrite)


def _latest_per_run(rows: Any) -> list[dict[str, Any]]:
    ordered = sorted(rows, key=lambda r: r["commit_version"])
    return list({(r["query_id"], r["run_id"]): r for r in ordered}.values())
