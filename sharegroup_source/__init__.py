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
from typing import TYPE_CHECKING, Any

# delta-rs logs from Rust at WARN unless RUST_LOG says otherwise, read once when deltalake loads: on an s3://
# location without a region or credentials the AWS SDK warns three times (IMDS lookups) before the store's own
# error, which the connector reports as one line (locations.py). A user's RUST_LOG wins.
os.environ.setdefault("RUST_LOG", "warn,aws_config=error")

from sharegroup_source.errors import (
    AuthenticationError,
    AuthorizationError,
    ClusterError,
    DataLossError,
    FencedError,
    GroupConfigError,
    OptionError,
    OutcomeError,
    StateMismatchError,
    StateStoreError,
    TlsError,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sharegroup_source.coordinators.delta import DeltaShareConsumer

__all__ = ["AuthenticationError", "AuthorizationError", "ClusterError", "DataLossError", "DeltaShareConsumer",
           "FencedError", "GroupConfigError", "OptionError", "OutcomeError", "SparkVersionError", "StateMismatchError",
           "StateStoreError", "TlsError", "acknowledge", "check_spark", "register"]

#: The first Spark whose Python data sources can stream (``DataSourceStreamReader``).
MIN_SPARK = (4, 0)


class SparkVersionError(ImportError):
    """The running Spark (or its absence) cannot host the source; the message names what was found and what is needed.

    An ImportError, so that importing the source on such a Spark fails the way a missing module does.
    """


def check_spark(version: str | None = None) -> str:
    """The running Spark's version, checked: ``version`` (a session's ``spark.version``) or pyspark's own.

    pyspark is no install requirement (Databricks and spark-submit bring their own Spark, and a
    second one from an index would shadow it), so the check happens here, where Spark is used.
    """
    if version is None:
        try:
            import pyspark
        except ImportError as error:
            raise SparkVersionError("sharegroup-source needs Spark 4.0 or newer and found no pyspark: install "
                                    "'sharegroup-source[spark]' for a local Spark, or run where Spark is provided") \
                from error
        version = str(pyspark.__version__)
    try:
        found = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return version  # a vendor's version string: let Spark's own API decide
    if found < MIN_SPARK:
        raise SparkVersionError(f"sharegroup-source needs Spark 4.0 or newer (Python streaming data sources); this is "
                                f"Spark {version}")
    return version


def register(spark: SparkSession) -> None:
    """Register ``format("sharegroup")`` on ``spark``; idempotent, so every notebook cell may call it.

    Needed where Spark's discovery cannot see the package: a session that started before the
    install (Spark lists the ``pyspark_*`` modules once per session) or a package only on
    ``sys.path``. A session that already has the format keeps the one it has.
    """
    check_spark(spark.version)
    from sharegroup_source.source import ShareGroupDataSource

    if not _has_format(spark, ShareGroupDataSource.name()):
        spark.dataSource.register(ShareGroupDataSource)


def _has_format(spark: SparkSession, name: str) -> bool:
    """Whether ``name`` resolves on ``spark``: registered, or found by Spark's discovery."""
    try:
        return bool(spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(name))
    except Exception:  # no JVM session (Spark Connect) or another Spark: registering again is harmless
        return False


def __getattr__(name: str) -> Any:
    # imported on first use: the CLI and the embedded broker need neither pyspark nor Delta
    if name == "acknowledge":
        from sharegroup_source.outcomes import acknowledge

        return acknowledge
    if name == "DeltaShareConsumer":
        from sharegroup_source.coordinators.delta import DeltaShareConsumer

        return DeltaShareConsumer
    raise AttributeError(f"module 'sharegroup_source' has no attribute {name!r}")
