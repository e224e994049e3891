"""Which Spark can host the source: checked where Spark is used, since pyspark is no install requirement."""

from __future__ import annotations

from sharegroup_source.errors import SparkVersionError

__all__ = ["MIN_SPARK", "check_spark"]

#: The first Spark whose Python data sources can stream (``DataSourceStreamReader``).
MIN_SPARK = (4, 0)


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
