"""Kafka share groups (KIP-932) as a Spark Structured Streaming source: ``format("sharegroup")``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Register ``format("sharegroup")`` on a session (needed only where the package is not pip-installed)."""
    from sharegroup_source.source import ShareGroupDataSource

    spark.dataSource.register(ShareGroupDataSource)
