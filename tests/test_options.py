"""Options and schema: what a user sees at load(), before any Kafka traffic."""

from __future__ import annotations

import pytest
from pyspark.sql.types import StructType

from sharegroup_source.options import OptionError, SourceOptions
from sharegroup_source.schema import arrow_schema, spark_schema

BASE = {"kafka.bootstrap.servers": "b:9092", "kafka.group.id": "g", "subscribe": "a, b", "stateLocation": "/s"}


def test_defaults_and_kafka_passthrough():
    options = SourceOptions.parse({**BASE, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.password": "pw"})
    assert options.topics == ("a", "b") and options.coordinator == "broker" and options.fail_on_data_loss
    assert options.client_config == {"bootstrap.servers": "b:9092", "group.id": "g",
                                     "security.protocol": "SASL_SSL", "sasl.password": "pw"}
    assert "pw" not in repr(options)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("maxRecordsPerTrigger", "0", "option 'maxRecordsPerTrigger' must be a positive integer up to 2147483647"),
    ("maxRecordsPerTrigger", str(2**31), "option 'maxRecordsPerTrigger' must be a positive integer up to"),
    ("maxRecordsPerPartition", "ten", "option 'maxRecordsPerPartition' must be a positive integer up to"),
    ("includeHeaders", "yes", "option 'includeHeaders' must be true or false, got 'yes'"),
    ("coordinator", "zookeeper", "option 'coordinator' must be one of"),
    ("coordinator", "delta", "option 'coordinator'='delta' is not available yet"),
    ("subscribe", " , ", "option 'subscribe' names no topic"),
    ("kafka.max.poll.records", "5", "option 'kafka.max.poll.records' is managed by the sharegroup source"),
    ("maxRecordPerTrigger", "5", "unknown option(s) 'maxRecordPerTrigger'"),
])
def test_wrong_values_name_the_option(key, value, message):
    with pytest.raises(OptionError) as error:
        SourceOptions.parse({**BASE, key: value})
    assert message in str(error.value)


def test_spark_and_arrow_schemas_agree():
    for headers in (False, True):
        spark_names = [f.name for f in spark_schema(headers).fields]
        assert spark_names == arrow_schema(headers).names
    assert spark_schema(False).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,deliveryCount:int,epoch:bigint>")
    assert isinstance(spark_schema(True)["headers"].dataType.elementType, StructType)
