"""Kafka share groups (KIP-932) as a Spark Structured Streaming source: ``format("sharegroup")``.

``register(spark)`` registers the format where the package is not pip-installed;
``acknowledge(df, outcome, reason, options=...)`` records per-record outcomes in foreachBatch;
``DeltaShareConsumer(config)`` lets a plain Python worker share a ``coordinator=delta`` queue with queries.
The connector's exceptions (``sharegroup_source.errors``) are importable from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sharegroup_source.errors import (
    ClusterError,
    DataLossError,
    FencedError,
    OptionError,
    OutcomeError,
    StateMismatchError,
    StateStoreError,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sharegroup_source.coordinators.delta import DeltaShareConsumer

__all__ = ["ClusterError", "DataLossError", "DeltaShareConsumer", "FencedError", "OptionError", "OutcomeError",
           "StateMismatchError", "StateStoreError", "acknowledge", "register"]


def register(spark: SparkSession) -> None:
    """Register ``format("sharegroup")`` on a session."""
    from sharegroup_source.source import ShareGroupDataSource

    spark.dataSource.register(ShareGroupDataSource)


def __getattr__(name: str) -> Any:
    # imported on first use: the CLI and the embedded broker need neither pyspark nor Delta
    if name == "acknowledge":
        from sharegroup_source.outcomes import acknowledge

        return acknowledge
    if name == "DeltaShareConsumer":
        from sharegroup_source.coordinators.delta import DeltaShareConsumer

        return DeltaShareConsumer
    raise AttributeError(f"module 'sharegroup_source' has no attribute {name!r}")
