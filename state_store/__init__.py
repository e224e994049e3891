"""Delta-backed state of a share-group query: ledger, ack decisions, share-partition state, dead letters,
progress counters; and of a share group led by Delta (GroupStore: settings, share state, members).

Imports only deltalake, pyarrow and the standard library, so it runs in Spark's driver and
executor Python workers (which have no SparkSession) and in plain processes alike.
"""

from state_store.dead_letters import DeadLetters
from state_store.decisions import Decisions
from state_store.delta_table import Footprint
from state_store.errors import FencedError, GroupSettingsError, StateStoreError
from state_store.group import GroupSettings, GroupStore, MemberInfo
from state_store.ledger import SETTLED, STATUSES, UNSETTLED, EpochStatus, Fence, Ledger, LedgerEntry, OffsetRange
from state_store.progress import ProgressTable, SourceCounters
from state_store.share_partition import (
    AckType,
    AcquiredRecords,
    InvalidRecordStateError,
    PersistedBatch,
    PersistedState,
    RecordState,
    ShareConfig,
    SharePartition,
    StateBatch,
)
from state_store.share_state import Acquisition, ShareStateTable
from state_store.store import StateStore

__all__ = [
    "SETTLED",
    "STATUSES",
    "UNSETTLED",
    "AckType",
    "AcquiredRecords",
    "Acquisition",
    "DeadLetters",
    "Decisions",
    "EpochStatus",
    "Fence",
    "FencedError",
    "Footprint",
    "GroupSettings",
    "GroupSettingsError",
    "GroupStore",
    "InvalidRecordStateError",
    "Ledger",
    "LedgerEntry",
    "MemberInfo",
    "OffsetRange",
    "PersistedBatch",
    "PersistedState",
    "ProgressTable",
    "RecordState",
    "ShareConfig",
    "SharePartition",
    "ShareStateTable",
    "SourceCounters",
    "StateBatch",
    "StateStore",
    "StateStoreError",
]
