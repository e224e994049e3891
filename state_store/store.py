"""StateStore: the Delta tables of one query state location, and their upkeep.

One root (the ``stateLocation`` option, a path or URI) holds the tables ``ledger``,
``decisions``, ``share_state``, ``dead_letters`` and ``progress`` (columns in
docs/state-tables.md). Each is created by its first write, so a location that never rejected a
record has no dead-letter table.

The dead letters are the user's data, kept with Delta's retention (see state_store.dead_letters);
the other tables are internal state, vacuumed at once with a short log.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pyarrow as pa

from state_store.dead_letters import DeadLetters
from state_store.decisions import DECISIONS_SCHEMA, Decisions
from state_store.delta_table import Footprint, StateTable
from state_store.errors import StateStoreError
from state_store.format_version import FormatVersion
from state_store.ledger import LEDGER_ADDED_COLUMNS, LEDGER_SCHEMA, Ledger
from state_store.progress import PROGRESS_ADDED_COLUMNS, PROGRESS_FORMAT, PROGRESS_SCHEMA, ProgressTable
from state_store.share_partition import ShareConfig
from state_store.share_state import SHARE_STATE_SCHEMA, ShareStateTable
from state_store.table_files import file_in_the_way, local_path
from state_store.table_open import TABLE_FORMAT
from state_store.table_retention import Retention

__all__ = ["StateStore"]


class StateStore:
    """The state tables under ``location``.

    ``dead_letter_location`` puts the dead letters elsewhere (a path or URI of their own table).
    ``storage_options`` go to delta-rs for object stores (credentials, endpoints). ``share_config``
    is the group configuration the Delta coordinator enforces. ``log_retention`` is how long Delta
    log entries of the internal state tables outlive the checkpoint that replaces them: state
    needs no time travel, and a long log slows every commit down. It does not apply to the dead
    letters, which keep Delta's retention (30 days of log, 7 days of replaced files) for their
    readers.

    An instance caches what it read and is meant for one thread; other threads and processes use
    their own instances and coordinate through Delta's compare-and-swap commits.
    """

    def __init__(self, location: str, *, storage_options: dict[str, str] | None = None,
                 share_config: ShareConfig | None = None, log_retention: timedelta = timedelta(minutes=1),
                 dead_letter_location: str | None = None):
        if not location or not location.strip():
            raise StateStoreError("the state location is empty: set stateLocation to a path or URI")
        local = local_path(location)
        if local is not None:
            blocker = file_in_the_way(local)
            if blocker is not None:
                raise StateStoreError(f"cannot use state location {location}: {blocker} is a file, not a "
                                      "directory")
        self.location = location if "://" in location else os.path.abspath(location)

        def table(name: str, schema: pa.Schema, added_columns: tuple[str, ...] = (),
                  table_format: FormatVersion = TABLE_FORMAT) -> StateTable:
            return StateTable(self.location, name, schema, storage_options=storage_options,
                              retention=Retention.state(log_retention), added_columns=added_columns,
                              table_format=table_format)

        self.ledger = Ledger(table("ledger", LEDGER_SCHEMA, LEDGER_ADDED_COLUMNS))
        self.decisions = Decisions(table("decisions", DECISIONS_SCHEMA))
        self.share_state = ShareStateTable(table("share_state", SHARE_STATE_SCHEMA),
                                           share_config or ShareConfig())
        self.dead_letters = (DeadLetters.at(dead_letter_location, storage_options=storage_options)
                             if dead_letter_location else
                             DeadLetters.open(self.location, "dead_letters", storage_options=storage_options))
        self.progress = ProgressTable(table("progress", PROGRESS_SCHEMA, PROGRESS_ADDED_COLUMNS, PROGRESS_FORMAT))

    def maintain(self, ledger_keep_epochs: int = 10_000) -> dict[str, Footprint]:
        """Fold, prune, compact, checkpoint and vacuum every table; returns their sizes afterwards.

        Each table keeps its own retention: state tables lose replaced files at once, the dead
        letters keep them (and their log) for readers of older versions.

        Call it every few hundred epochs. Per query the ledger keeps its newest
        ``ledger_keep_epochs`` epochs plus every unsettled one; decisions of dropped epochs go too.
        Safe while other writers commit: rewrites are compare-and-swap commits.
        """
        horizons = self.ledger.maintain(ledger_keep_epochs)
        self.decisions.maintain(horizons)
        self.share_state.maintain()
        self.dead_letters.maintain()
        self.progress.maintain()
        return self.footprint()

    def footprint(self) -> dict[str, Footprint]:
        """Live data files and bytes per table."""
        tables = (self.ledger.table, self.decisions.table, self.share_state.table, self.dead_letters.table,
                  self.progress.table)
        return {t.name: t.footprint() for t in tables}

