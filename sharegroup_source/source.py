"""``format("sharegroup")``: the DataSource Spark instantiates from ``load()`` options."""

from __future__ import annotations

from sharegroup_source.spark_version import check_spark

# before pyspark.sql.datasource, which a Spark without Python data sources (3.5) lacks: one line naming the versions
SPARK_VERSION = check_spark()

from pyspark.sql.datasource import DataSource, DataSourceStreamReader  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from sharegroup_source.driver.stream_reader import ADMISSION_CONTROL, reader_class  # noqa: E402
from sharegroup_source.error_report import reported  # noqa: E402
from sharegroup_source.errors import OptionError  # noqa: E402
from sharegroup_source.options import SourceOptions  # noqa: E402
from sharegroup_source.schema import spark_schema  # noqa: E402

__all__ = ["ShareGroupDataSource"]


class ShareGroupDataSource(DataSource):
    """Kafka share groups (KIP-932) as a Structured Streaming source.

    Options are validated when Spark asks for the schema, which it does in ``load()``, so
    a missing or wrong option fails there with its name in the message.
    """

    @reported
    def __init__(self, options: dict[str, str]):
        super().__init__(options)
        self._parsed = SourceOptions.parse(options)
        if not ADMISSION_CONTROL and self._parsed.checkpoint_location is None:
            # Spark 4.0/4.1 do not tell the source where a batch starts; the checkpoint does (stream_reader.py)
            raise OptionError(
                f"option 'checkpointLocation' is required on Spark {SPARK_VERSION}: Spark before 4.2 does not tell a "
                "Python source where a batch starts, so the source reads it from the query's checkpoint. Set it to "
                "the checkpointLocation the query writes with")

    @classmethod
    def name(cls) -> str:
        return "sharegroup"

    def schema(self) -> StructType:
        return spark_schema(self._parsed.include_headers)

    @reported
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return reader_class()(self._parsed)

    def __repr__(self) -> str:
        return f"ShareGroupDataSource({self._parsed!r})"
