"""Spark discovers top-level ``pyspark_*`` modules exposing ``DefaultSource``.

This shim makes ``spark.readStream.format("sharegroup")`` work right after ``pip install``,
with no ``spark.dataSource.register`` call.
"""

from sharegroup_source.source import ShareGroupDataSource as DefaultSource

__all__ = ["DefaultSource"]
