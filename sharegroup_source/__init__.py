"""Kafka share groups (KIP-932) as a Spark Structured Streaming source: ``format("sharegroup")``.

``register(spark)`` registers the format on a session that started before the package was
installed (``%pip install`` into a running Databricks session: Spark looks for ``pyspark_*``
modules once per session, so it never sees a later install) or where it is only on ``sys.path``;
``acknowledge(df, outcome, reason, options=...)`` records per-record outcomes in foreachBatch;
``DeltaShareConsumer(config)`` lets a plain Python worker share a ``coordinator=delta`` queue with queries.
The connector's exceptions (``sharegroup_source.errors``) are importable from here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

# delta-rs logs from Rust at WARN unless RUST_LOG says otherwise, read once when deltalake loads: on an s3://
# location without a region or credentials the AWS SDK warns three times (IMDS lookups) before the store's own
# error, which the connector reports as one line (locations.py). A user's RUST_LOG wins.
os.environ.setdefault("RUST_LOG", "warn,aws_config=error")

from sharegroup_source.arrow_pool import returning_pool, worker_environment

# Arrow chooses its pool when pyarrow loads, from the environment: jemalloc for this process (pyarrow loads with the
# imports below) and for every process started after this import (a session's JVM and its Python workers), unless
# a pool was chosen. See arrow_pool.
os.environ.update(returning_pool(os.environ))

from sharegroup_source.errors import (
    AuthenticationError,
    AuthorizationError,
    BatchInterruptedError,
    ClusterError,
    DataLossError,
    FencedError,
    GroupConfigError,
    GroupNotEmptyError,
    GroupSettingsError,
    OptionError,
    OutcomeError,
    SparkVersionError,
    StateMismatchError,
    StateStoreError,
    TlsError,
    WorkerPythonError,
)
from sharegroup_source.interrupt import take_ctrl_c
from sharegroup_source.spark_version import check_spark
from sharegroup_source.worker_python import check_worker_python, default_worker_python

if TYPE_CHECKING:  # the names the annotations use; at run time pyspark and the coordinator load on first use
    from pyspark.sql import DataFrame, SparkSession

    from sharegroup_source.coordinators.delta import DeltaShareConsumer
    from sharegroup_source.outcomes import Outcome
    from state_store import AckType

__all__ = ["AuthenticationError", "AuthorizationError", "BatchInterruptedError", "ClusterError", "DataLossError",
           "DeltaShareConsumer", "FencedError", "GroupConfigError", "GroupNotEmptyError", "GroupSettingsError",
           "OptionError", "OutcomeError", "SparkVersionError", "StateMismatchError", "StateStoreError", "TlsError",
           "WorkerPythonError", "acknowledge", "check_spark", "register"]

default_worker_python()
# Ctrl-C on the driver script stops its queries between two batches and says what they committed (interrupt.py)
take_ctrl_c()

def register(spark: SparkSession) -> None:
    """Register ``format("sharegroup")`` on ``spark``; idempotent, so every notebook cell may call it.

    Needed where Spark's discovery cannot see the package: a session that started before the
    install (Spark lists the ``pyspark_*`` modules once per session) or a package only on
    ``sys.path``. Ctrl-C on this (main) thread then stops the session's queries between two batches. A session
    that already has the format keeps the one it has. A local session whose
    Python workers would run a Python without the package is refused (:class:`WorkerPythonError`).
    """
    check_spark(spark.version)
    take_ctrl_c()
    from sharegroup_source.source import ShareGroupDataSource

    if not _is_connect(spark):
        check_worker_python(spark)
    if not _has_format(spark, ShareGroupDataSource.name()):
        with _workers_take_this_pool(spark):
            spark.dataSource.register(ShareGroupDataSource)


@contextmanager
def _workers_take_this_pool(spark: SparkSession) -> Iterator[None]:
    """While registering, the session's worker environment carries this process's Arrow pool.

    Spark gives the format's Python processes (the driver-side runner that keeps a query's state among them)
    the SparkContext's ``environment`` as it is when the format is registered; a JVM started before
    ``sharegroup_source`` was imported lacks the variable. Other Python functions of the session keep theirs.
    """
    if _is_connect(spark):  # the server starts the workers with its own environment
        yield
        return
    context = spark.sparkContext
    workers = context.environment
    context.environment = worker_environment(workers)
    try:
        yield
    finally:
        context.environment = workers


def _is_connect(spark: SparkSession) -> bool:
    """A Spark Connect session: its workers run at the server, which this process cannot look into."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _has_format(spark: SparkSession, name: str) -> bool:
    """Whether ``name`` resolves on ``spark``: registered, or found by Spark's discovery."""
    try:
        return bool(spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(name))
    except Exception:  # no JVM session (Spark Connect) or another Spark: registering again is harmless
        return False


def acknowledge(df: DataFrame, outcome: Outcome | AckType, reason: str | None = None, *,
                options: Mapping[str, Any]) -> int:
    """Record ``outcome`` for every row of ``df``: rows of the micro-batch ``foreachBatch`` is processing.

    ``outcome``: ``"ACCEPT"``, ``"RELEASE"`` (the record comes back in a later batch, its delivery count one
    higher) or ``"REJECT"`` (the broker archives it and the source keeps it in its dead letters); a
    ``state_store.AckType`` is taken too, and a name in any case. ``reason`` is kept with the decision (and
    in a dead letter's row). ``options`` are the source's options (at least ``stateLocation`` and
    ``kafka.group.id``, and the ``stateStorage.*`` credentials of an object store): a batch DataFrame
    carries no trace of where its source keeps state. ``df`` needs the source's columns topic, partition,
    offset and epoch. A row of the batch no call names is ACCEPTed after the batch commits.

    The decisions are written to the ``decisions`` table before the batch commits, so the
    acknowledgement after the commit applies them, even from a restarted driver. Returns the number
    of records recorded. Raises :class:`OutcomeError`, recording nothing, for an unknown outcome, a
    DataFrame without those columns, options that are not a source's, or rows of another batch.
    """
    from sharegroup_source.outcomes import acknowledge as record  # pyspark and the state tables: on first use

    return record(df, outcome, reason, options=options)


if not TYPE_CHECKING:  # for type checkers the module has the names above and no others

    def __getattr__(name: str) -> Any:
        # imported on first use: the CLI and the embedded broker need neither pyspark nor the Delta coordinator
        if name == "DeltaShareConsumer":
            from sharegroup_source.coordinators.delta import DeltaShareConsumer

            return DeltaShareConsumer
        raise AttributeError(f"module 'sharegroup_source' has no attribute {name!r}")
