"""``format("sharegroup")``: the DataSource Spark instantiates from ``load()`` options."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from sharegroup_source.options import SourceOptions
from sharegroup_source.schema import spark_schema
from sharegroup_source.stream_reader import ShareGroupStreamReader

__all__ = ["ShareGroupDataSource"]


class ShareGroupDataSource(DataSource):
    """Kafka share groups (KIP-932) as a Structured Streaming source.

    Options are validated when Spark asks for the schema, which it does in ``load()``, so
    a missing or wrong option fails there with its name in the message.
    """

    def __init__(self, options: dict[str, str]):
        super().__init__(options)
        self._parsed = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "sharegroup"

    def schema(self) -> StructType:
        return spark_schema(self._parsed.include_headers)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ShareGroupStreamReader(self._parsed)

    def __repr__(self) -> str:
        return f"ShareGroupDataSource({self._parsed!r})"
