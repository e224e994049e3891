"""Handing the share group over from a query's previous run to the next one.

Spark stops a query's driver-side Python worker with SIGTERM and moves on without waiting,
so a query restarted at once (after a failure, by a job retry, in a notebook) can start its
member while the previous run is still releasing its records. If the new member joins first,
the assignor splits the partitions between the two; the new run sees only its share until
its next heartbeat after the old member left (5 s on Kafka's defaults), and a
Trigger.AvailableNow run, which ends after a few idle seconds, could end with records still
in the queue. So each run records its member in the ``progress`` table, marks it as left
after closing it, and a new run joins only once the previous member has left, its process is
gone, or a bounded wait ran out.
"""

from __future__ import annotations

import logging
import time

from sharegroup_source.termination import not_joined_yet
from state_store.progress import ProgressTable

__all__ = ["HANDOVER_TIMEOUT_S", "await_previous_member"]

log = logging.getLogger(__name__)

#: Longest wait for the previous run's member to leave; a stop takes well under a second normally.
HANDOVER_TIMEOUT_S = 20.0
_CHECK_EVERY_S = 0.2


def await_previous_member(progress: ProgressTable, query_id: str, timeout_s: float = HANDOVER_TIMEOUT_S) -> bool:
    """Wait until the query's previous run has left the share group; False when the wait ran out."""
    deadline = time.monotonic() + timeout_s
    with not_joined_yet():
        while (member := progress.member_in_group(query_id)) is not None and not member.process_is_gone():
            if time.monotonic() >= deadline:
                log.warning(
                    "query %s: run %s (pid %s on %s) has not recorded leaving the share group after %.0f s; "
                    "starting anyway. Until the broker expires its member (the group's session timeout), it keeps "
                    "part of the partitions.", query_id, member.run_id, member.pid, member.host, timeout_s)
                return False
            time.sleep(_CHECK_EVERY_S)
        return True
