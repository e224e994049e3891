"""An idempotent Delta sink for ``foreachBatch`` that needs no delta-spark jars.

Spark re-runs a batch after a failure; writing it twice must not duplicate it. The
batch id is recorded in the Delta log as an application transaction, in the same commit
as the data, so a re-run of a batch already written is skipped.
"""

from __future__ import annotations

from pathlib import Path

from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import DataFrame

from sharegroup_source.batch_interruption import short_on_stop

__all__ = ["DeltaBatchWriter"]


class DeltaBatchWriter:
    """``query.writeStream.foreachBatch(DeltaBatchWriter("/lake/orders", "orders-job"))``.

    ``app_id`` names the writing query; keep it stable across restarts of that query.
    """

    def __init__(self, path: str | Path, app_id: str):
        self.path = str(path)
        self.app_id = app_id

    def last_batch(self) -> int:
        try:
            version = DeltaTable(self.path).transaction_version(self.app_id)
        except TableNotFoundError:
            return -1
        return -1 if version is None else version

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        if batch_id <= self.last_batch():
            return
        with short_on_stop():  # a stop interrupts the batch's job here
            rows = frame.toArrow()
        write_deltalake(self.path, rows, mode="append",
                        commit_properties=CommitProperties(app_transactions=[Transaction(self.app_id, batch_id)]))
