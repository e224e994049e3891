"""Where a broker group's log start passed records the group had not processed, asked before the member fetches.

Kafka moves a share-partition's start past records that retention or DeleteRecords removed at the
group's next fetch of it, and tells no member: the records are skipped without a word. Until that
fetch the group's start offset and lag stay as they were (checked on Apache Kafka 4.4.0: after
DeleteRecords, DescribeShareGroupOffsets answered the old start offset and lag until a member
fetched). So the coordinator asks before its member fetches: at its join, which is before its first
fetch, and then with each refresh of the topics' partitions while it runs. The group's lag
(KIP-1226: its records from the start offset to the log end not yet acknowledged or archived) less
what the log still holds past its start is how many of those records are gone, at least; where the
log start lies above the group's start and that is positive, they are handed to ``DataLoss``.

What this cannot see: a deletion the group's next fetch moved past before a check asked (a running
member fetches every batch, a check comes every few seconds), and records another member of the
group held when they were deleted count as lost too (the lag counts them until they are acknowledged).
A broker that does not say the lag (before KIP-1226) or answers no share-group admin request (the
embedded broker) is not asked: its losses go unseen, and the first check says so once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from sharegroup_source.coordinators.data_loss import DataLoss, LostRange
from sharegroup_source.errors import ClusterError
from sharegroup_source.kafka.metadata import LogBounds
from sharegroup_source.kafka.share_protocol import NO_SHARE_GROUP_ADMIN, ShareGroupProtocol
from sharegroup_source.kafka.share_requests import Failed, StartOffset
from sharegroup_source.kafka.topic_watch import REFRESH_S

__all__ = ["RetentionCheck"]

log = logging.getLogger(__name__)

#: How long one check may wait for the group's start offsets.
_ASK_TIMEOUT_S = 5.0


class RetentionCheck:
    """Asks whether the log start of ``group_id``'s share-partitions passed records the group had not processed, and
    hands those to ``data_loss``; a check that cannot ask (no answer, a broker without the lag) finds nothing."""

    def __init__(self, config: Mapping[str, Any], group_id: str, data_loss: DataLoss, every_s: float = REFRESH_S,
                 cannot_see: str | None = None):
        """``cannot_see``: why the cluster cannot be asked, known before (it says no group's configs either)."""
        self._config = config
        self._group_id = group_id
        self.data_loss = data_loss
        self._every_s = every_s
        self._asked_at: float | None = None
        self._bounds = LogBounds(config, timeout_s=_ASK_TIMEOUT_S)
        self._protocol: ShareGroupProtocol | None = None
        self._unseen: str | None = None  # why losses go unseen on this cluster, once said
        if cannot_see is not None:
            self._cannot_see(cannot_see)

    def check(self, partitions: Mapping[str, int]) -> None:
        """A look at every share-partition of ``partitions`` (topic -> count), the first at once, then at most every
        ``every_s``: raises DataLossError under ``failOnDataLoss=true`` where records were lost, else they are
        logged and counted."""
        if self._unseen is not None or (self._asked_at is not None and
                                        time.monotonic() - self._asked_at < self._every_s):
            return
        self._asked_at = time.monotonic()
        starts = self._start_offsets()
        if not starts:
            return
        try:
            bounds = self._bounds.of(partitions)  # after the lag: a record written in between makes it less, not more
        except Exception as error:  # the next check asks again
            log.debug("group %s: the log offsets were not read for the retention check: %s", self._group_id, error)
            return
        lost = []
        for key, (log_start, log_end) in sorted(bounds.items()):
            start = starts.get(key)
            if (start is None or start.start_offset is None or start.lag is None or not 0 <= log_start <= log_end
                    or log_start <= start.start_offset):  # a negative offset: a leader being elected says none
                continue
            gone = start.lag - (log_end - log_start)
            if gone > 0:
                first = start.start_offset
                lost.append(LostRange(*key, first, log_start - 1, min(gone, log_start - first)))
        self.data_loss.found(lost)

    def _start_offsets(self) -> dict[tuple[str, int], StartOffset]:
        """The group's start offset and lag per share-partition; empty when the cluster cannot say."""
        try:
            if self._protocol is None:
                self._protocol = ShareGroupProtocol(self._config, _ASK_TIMEOUT_S)
            answer = self._protocol.start_offsets([self._group_id]).get(self._group_id)
        except ClusterError as error:
            if NO_SHARE_GROUP_ADMIN in str(error):
                return self._cannot_see(str(error))
            log.debug("group %s: its start offsets were not read for the retention check: %s", self._group_id, error)
            return {}
        except Exception as error:  # the next check asks again
            log.debug("group %s: its start offsets were not read for the retention check: %s", self._group_id, error)
            return {}
        if answer is None or isinstance(answer, Failed):
            log.debug("group %s: its start offsets were not read for the retention check: %s", self._group_id, answer)
            return {}
        if any(s.start_offset is not None and s.lag is None for s in answer.values()):
            return self._cannot_see("the cluster does not say a share group's lag (KIP-1226)")
        return answer

    def _cannot_see(self, why: str) -> dict[tuple[str, int], StartOffset]:
        self._unseen = why
        log.info("group %s: records retention removes before the group reads them go unseen: %s", self._group_id, why)
        return {}

    def close(self) -> None:
        if self._protocol is not None:
            self._protocol.close()
