"""Options and schema: what a user sees at load(), before any Kafka traffic."""

from __future__ import annotations

import re

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import StructType

from sharegroup_source.errors import OptionError
from sharegroup_source.kafka.settings import librdkafka_properties
from sharegroup_source.options import SourceOptions
from sharegroup_source.schema import arrow_schema, spark_schema

BASE = {"kafka.bootstrap.servers": "b:9092", "kafka.group.id": "g", "subscribe": "a, b", "stateLocation": "/s"}


def test_defaults_and_kafka_passthrough():
    options = SourceOptions.parse({**BASE, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
                                   "kafka.sasl.username": "u", "kafka.sasl.password": "pw"})
    assert options.topics == ("a", "b") and options.coordinator == "broker" and options.fail_on_data_loss
    assert options.client_config == {"bootstrap.servers": "b:9092", "group.id": "g", "security.protocol": "SASL_SSL",
                                     "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "pw"}
    assert "pw" not in repr(options)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("maxRecordsPerTrigger", "0", "option 'maxRecordsPerTrigger' must be a positive integer up to 2147483647"),
    ("maxRecordsPerTrigger", str(2**31), "option 'maxRecordsPerTrigger' must be a positive integer up to"),
    ("maxRecordsPerPartition", "ten", "option 'maxRecordsPerPartition' must be a positive integer up to"),
    ("includeHeaders", "yes", "option 'includeHeaders' must be true or false, got 'yes'"),
    ("coordinator", "zookeeper", "option 'coordinator' must be one of"),
    ("coordinator", "delta", "option 'groupLocation' is required with option 'coordinator'='delta'"),
    ("subscribe", " , ", "option 'subscribe' names no topic"),
    ("kafka.max.poll.records", "5", "option 'kafka.max.poll.records' is managed by the sharegroup source"),
    ("maxRecordPerTrigger", "5", "unknown option 'maxRecordPerTrigger' (did you mean maxRecordsPerTrigger?)"),
    ("StartingOffset", "earliest", "unknown option 'StartingOffset' (did you mean startingOffsets?)"),
    ("startingOffsets", "beginning", "option 'startingOffsets' must be earliest or latest, got 'beginning'"),
    ("startingOffsets", '{"t":{"0":5}}', "per-partition offsets are `sharegroup reset-offsets`"),
])
def test_wrong_values_name_the_option(key, value, message):
    with pytest.raises(OptionError) as error:
        SourceOptions.parse({**BASE, key: value})
    assert message in str(error.value)


def test_a_required_option_under_a_near_spelling_is_named():
    """kafka.bootstrap.server (no s) is a kafka.* key, passed through: missing the required one, say it was seen."""
    given = {k: v for k, v in BASE.items() if k != "kafka.bootstrap.servers"}
    with pytest.raises(OptionError) as error:
        SourceOptions.parse({**given, "kafka.bootstrap.server": "b:9092"})
    assert str(error.value) == ("option 'kafka.bootstrap.servers' is required (given: 'kafka.bootstrap.server', "
                                "a misspelling of it?)")
    with pytest.raises(OptionError) as error:
        SourceOptions.parse(given)
    assert str(error.value) == "option 'kafka.bootstrap.servers' is required"


def test_spark_and_arrow_schemas_agree():
    for headers in (False, True):
        spark_names = [f.name for f in spark_schema(headers).fields]
        assert spark_names == arrow_schema(headers).names
    assert spark_schema(False).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,deliveryCount:int,epoch:bigint>")
    assert isinstance(spark_schema(True)["headers"].dataType.elementType, StructType)


# -- rules of the reliability issue: each test below failed before its rule existed ---------------
@pytest.mark.parametrize(("key", "value", "message"), [
    ("kafka.group.id", "orders ", "option 'kafka.group.id' must not start or end with whitespace"),
    ("kafka.group.id", " orders", "option 'kafka.group.id' must not start or end with whitespace"),
    ("kafka.group.id", "a\x00b", "option 'kafka.group.id' must not contain a NUL character"),
    ("deadLetterLocation", "  ", "option 'deadLetterLocation' is blank"),
    ("pollTimeoutMs", "60001", "option 'pollTimeoutMs' must be a positive integer up to 60000"),
    ("stateStorage.", "x", "option 'stateStorage.' names no storage option"),
])
def test_silently_changed_values_are_refused(key, value, message):
    with pytest.raises(OptionError) as error:
        SourceOptions.parse({**BASE, key: value})
    assert message in str(error.value)


def test_poll_timeout_up_to_a_minute_is_accepted():
    assert SourceOptions.parse({**BASE, "pollTimeoutMs": "60000"}).poll_timeout_ms == 60_000


def test_empty_dead_letter_location_means_none():
    """An empty value is how a job parameter says "not set"; only a blank one is a mistake."""
    assert SourceOptions.parse({**BASE, "deadLetterLocation": ""}).dead_letter_location is None


def test_state_storage_options_reach_delta_and_are_never_printed():
    options = SourceOptions.parse({**BASE, "stateStorage.AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
                                   "statestorage.aws_secret_access_key": "hunter2", "stateStorage.AWS_REGION": "eu"})
    assert options.storage_options == {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "aws_secret_access_key": "hunter2",
                                       "AWS_REGION": "eu"}
    with pytest.raises(OptionError, match=r"sharegroup options: .*stateStorage\.\*"):
        SourceOptions.parse({**BASE, "stateStorag.region": "eu"})  # a misspelt prefix lists the right one
    assert not {"AKIAEXAMPLE", "hunter2"} & {word.strip("'{},=") for word in repr(options).split()}
    assert "hunter2" not in repr(options) and "AKIAEXAMPLE" not in repr(options)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("kafka.security.protocol", "bogus", "option 'kafka.security.protocol': Invalid value"),
    ("kafka.socket.timeout.ms", "0", "option 'kafka.socket.timeout.ms'"),
    ("kafka.auto.offset.reset", "earliest", "option 'kafka.auto.offset.reset'"),  # a share consumer refuses it
    ("kafka.isolation.level", "snapshot", "option 'kafka.isolation.level': Invalid value"),
    ("kafka.fetch.max.bytes", "1", "option 'kafka.fetch.max.bytes'"),  # the replay consumer refuses it
    ("kafka.security.protocol", "SASL_SSL", "option 'kafka.sasl.mechanism'"),  # GSSAPI, not in this build
])
def test_kafka_options_are_checked_by_the_client_at_load(key, value, message):
    with pytest.raises(OptionError) as error:
        SourceOptions.parse({**BASE, key: value})
    assert message in str(error.value)


@pytest.mark.parametrize(("key", "message"), [
    ("kafka.securty.protocol", "unknown Kafka setting 'kafka.securty.protocol' (did you mean "
                               "'kafka.security.protocol'?)"),
    ("kafka.bootstrap.server", "unknown Kafka setting 'kafka.bootstrap.server' (did you mean "
                               "'kafka.bootstrap.servers'?)"),
    ("kafka.sasl.mechanisim", "unknown Kafka setting 'kafka.sasl.mechanisim' (did you mean 'kafka.sasl.mechanism'?)"),
    ("kafka.linger.m", "unknown Kafka setting 'kafka.linger.m' (did you mean 'kafka.linger.ms'?)"),
    ("kafka.no.such.thing", "unknown Kafka setting 'kafka.no.such.thing' (librdkafka, the Kafka client, has no such "
                            "setting)"),
])
def test_a_kafka_setting_librdkafka_lacks_is_named_with_the_nearest_it_has(key, message):
    """librdkafka says only "No such configuration property": the line names the option and the setting meant,
    found among librdkafka's own properties (a topic's too, such as linger.ms)."""
    with pytest.raises(OptionError) as error:
        SourceOptions.parse({**BASE, key: "SSL"})
    assert str(error.value) == message


def test_librdkafka_lists_its_own_properties():
    """The list suggestions come from is the running librdkafka's, settings and topic settings alike, without the
    callbacks and pointers only its C API sets."""
    properties = librdkafka_properties()
    assert {"bootstrap.servers", "security.protocol", "sasl.mechanism", "linger.ms", "acks",
            "share.acknowledgement.mode"} <= set(properties)
    assert not {"error_cb", "opaque", "dr_msg_cb"} & set(properties)
    assert len(properties) == len(set(properties)) > 150


def test_a_refused_kafka_value_is_not_printed_when_secret():
    """librdkafka quotes the refused value; a secret one must not reach the message."""
    with pytest.raises(OptionError) as error:
        SourceOptions.parse({**BASE, "kafka.sasl.password": "hunter2", "kafka.security.protocol": "hunter2",
                             "kafka.ssl.key.pem": "hunter2-pem", "kafka.sasl.mechanism": "PLAIN"})
    assert "hunter2" not in str(error.value) and "option 'kafka." in str(error.value)


def test_kafka_check_does_not_connect():
    """The check builds clients without brokers: a load() must not wait on, or reach, the cluster."""
    import time

    started = time.monotonic()
    SourceOptions.parse({**BASE, "kafka.bootstrap.servers": "10.255.255.1:9092", "kafka.security.protocol": "SSL"})
    assert time.monotonic() - started < 2


def test_isolation_level_goes_to_the_replay_reader_only():
    """A share consumer refuses isolation.level (the group's share.isolation.level decides); the
    replay reader reads what the group delivers: read_uncommitted unless the user says otherwise."""
    plain = SourceOptions.parse(BASE)
    assert plain.replay_config["isolation.level"] == "read_uncommitted"
    committed = SourceOptions.parse({**BASE, "kafka.isolation.level": "read_committed"})
    assert "isolation.level" not in committed.client_config
    assert committed.replay_config["isolation.level"] == "read_committed"


def test_repr_hides_location_credentials():
    options = SourceOptions.parse({**BASE, "stateLocation": "s3://AKIA:hunter2@bucket/state?X-Amz-Signature=abc",
                                   "deadLetterLocation": "https://acct.blob.core.windows.net/c/dl?sv=1&sig=s3cr3t"})
    shown = repr(options)
    assert "hunter2" not in shown and "abc" not in shown and "s3cr3t" not in shown and "AKIA" not in shown
    assert "bucket/state" in shown and "acct.blob.core.windows.net/c/dl" in shown
    assert options.state_location_shown == "s3://*****(redacted)@bucket/state?*****(redacted)"


DELTA = {**BASE, "coordinator": "delta", "groupLocation": "/group"}


def test_delta_coordinator_takes_its_group_location_and_settings():
    options = SourceOptions.parse({**DELTA, "groupConfig.share.delivery.count.limit": " 3",
                                   "groupconfig.share.auto.offset.reset": " Earliest"})
    assert options.coordinator == "delta" and options.group_location == "/group"
    assert options.group_configs == {"share.delivery.count.limit": "3", "share.auto.offset.reset": "earliest"}
    assert "groupLocation=/group" in repr(options)


def test_the_delta_settings_old_spelling_still_works_with_the_delta_coordinator():
    """Queries started by an earlier release set the Delta group's settings without the prefix: they keep working."""
    options = SourceOptions.parse({**DELTA, "share.record.lock.duration.ms": "20000", "startingOffsets": "Earliest"})
    assert options.group_configs == {"share.record.lock.duration.ms": "20000"}
    assert options.starting_offsets == "earliest"


def test_the_broker_group_configs_go_to_kafka_as_given():
    """Kafka checks the values against its bounds when the query sets them: every share-group config passes here."""
    options = SourceOptions.parse({**BASE, "groupConfig.share.record.lock.duration.ms": "60000",
                                   "groupConfig.share.isolation.level": "read_committed",
                                   "groupConfig.errors.deadletterqueue.topic.name": "dlq.orders",
                                   "startingOffsets": "latest"})
    assert options.group_configs == {"share.record.lock.duration.ms": "60000",
                                     "share.isolation.level": "read_committed",
                                     "errors.deadletterqueue.topic.name": "dlq.orders"}
    assert options.starting_offsets == "latest"
    assert SourceOptions.parse(BASE).group_configs == {} and SourceOptions.parse(BASE).starting_offsets is None
    blank = SourceOptions.parse({**BASE, "groupConfig.share.isolation.level": " ", "startingOffsets": ""})
    assert blank.group_configs == {} and blank.starting_offsets is None, "a blank value is unset, as for every option"


@pytest.mark.parametrize(("options", "message"), [
    ({"groupConfig.share.lock.duration.ms": "1"}, "option 'groupConfig.share.lock.duration.ms': 'share.lock.duration."
                                                  "ms' is not a share group's config (did you mean share.record.lock."
                                                  "duration.ms?)"),
    ({"groupConfig.consumer.session.timeout.ms": "1"}, "'consumer.session.timeout.ms' is not a share group's config"),
    ({"groupConfig.share.delivery.count.limit": "0"}, "option 'groupConfig.share.delivery.count.limit' must be a "
                                                      "positive integer"),
    ({"groupConfig.share.auto.offset.reset": "earliest", "startingOffsets": "earliest"},
     "options 'startingOffsets' and 'groupConfig.share.auto.offset.reset' both set where the group starts"),
    ({"share.record.lock.duration.ms": "5000"}, "option 'share.record.lock.duration.ms' is now spelt "
                                                "'groupConfig.share.record.lock.duration.ms'"),
    ({"groupLocation": "/g"}, "option 'groupLocation' belongs to coordinator=delta"),
])
def test_group_config_mistakes_name_the_option(options, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        SourceOptions.parse({**BASE, **options})


@pytest.mark.parametrize(("extra", "message"), [
    ({"share.delivery.count.limit": "0"}, "option 'share.delivery.count.limit' must be a positive integer"),
    ({"share.record.lock.duration.ms": "soon"}, "option 'share.record.lock.duration.ms' must be a positive integer"),
    ({"share.auto.offset.reset": "none"}, "option 'share.auto.offset.reset' must be latest or earliest"),
    ({"lockDurationMs": "5000"}, "option 'lockDurationMs' does not apply with coordinator=delta: the group's lock "
                                 "duration is the option groupConfig.share.record.lock.duration.ms"),
    ({"groupConfig.share.isolation.level": "read_committed"}, "option 'groupConfig.share.isolation.level' does not "
                                                              "apply with coordinator=delta: a Delta group's settings"),
    ({"groupConfig.share.auto.offset.reset": "by_duration:PT1H"}, "option 'groupConfig.share.auto.offset.reset' must "
                                                                  "be latest or earliest"),
    ({"share.delivery.count.limit": "3", "groupConfig.share.delivery.count.limit": "4"},
     "sets share.delivery.count.limit a second time, to another value"),
    ({"maxBytesPerTrigger": "5000"}, "option 'maxBytesPerTrigger' does not apply with coordinator=delta"),
    ({"kafka.auto.offset.reset": "earliest"}, "where a new share group starts is the option startingOffsets"),
    ({"groupLocation": "  "}, "option 'groupLocation' is blank"),
])
def test_delta_option_mistakes_name_the_option(extra, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        SourceOptions.parse({**DELTA, **extra})



# -- an unknown option as Spark hands it over: lower-cased ----------------------------------------------------------
def _as_spark_passes(options: dict[str, str]) -> CaseInsensitiveDict:
    """The options as DataSource.__init__ receives them from Spark: pyspark's worker fills a CaseInsensitiveDict,
    whose keys are lower-cased (and the JVM's CaseInsensitiveMap sent them lower-cased already)."""
    return CaseInsensitiveDict(options)


@pytest.mark.parametrize(("written", "said"), [
    ("maxRecordPerTrigger", "unknown option 'maxrecordpertrigger' (did you mean maxRecordsPerTrigger?)"),
    ("StartingOffset", "unknown option 'startingoffset' (did you mean startingOffsets?)"),
    ("checkpointLocaton", "unknown option 'checkpointlocaton' (did you mean checkpointLocation?)"),
    ("failOnDataLos", "unknown option 'failondatalos' (did you mean failOnDataLoss?)"),
    # Spark's Kafka source's own names point to this source's
    ("maxOffsetsPerTrigger", "unknown option 'maxoffsetspertrigger' (did you mean maxRecordsPerTrigger?)"),
    ("subscribePattern", "unknown option 'subscribepattern' (did you mean subscribe?)"),
    # a family's prefix misspelt or without its dot
    ("groupConfigs.share.delivery.count.limit",
     "unknown option 'groupconfigs.share.delivery.count.limit' (did you mean groupConfig.share.delivery.count.limit?)"),
    ("stateStorage", "unknown option 'statestorage' (did you mean stateStorage.<key>?)"),
])
def test_an_unknown_option_from_spark_gets_the_closest_one_in_its_documented_spelling(written, said):
    options = _as_spark_passes({**BASE, written: "1"})
    assert written.lower() in options.data, "pyspark no longer lower-cases the names: name the option as written"
    with pytest.raises(OptionError) as error:
        SourceOptions.parse(options)
    assert str(error.value).startswith(f"{said}; Spark passes option names lower-cased; sharegroup options: ")


def test_unknown_options_are_each_named_and_the_spelling_kept_where_it_reaches_the_source():
    with pytest.raises(OptionError) as error:
        SourceOptions.parse({**BASE, "pollTimeOut": "5", "maxRecordPerTrigger": "5", "zzz": "1"})
    said = str(error.value)
    assert said.startswith("unknown options 'maxRecordPerTrigger' (did you mean maxRecordsPerTrigger?), 'pollTimeOut' "
                           "(did you mean pollTimeoutMs?), 'zzz'; sharegroup options: "), said
    assert "lower-cased" not in said  # the names came as written: nothing to explain
    with pytest.raises(OptionError) as error:
        SourceOptions.parse(_as_spark_passes({**BASE, "zzz": "1"}))
    assert str(error.value).startswith("unknown option 'zzz'; sharegroup options: checkpointLocation, "), error.value


def test_the_checkpoint_reader_without_checkpoint_location_names_the_option_and_the_spark_rule():
    """Spark 4.0/4.1's reader needs the option; ``load()`` refuses its absence first, and the reader itself says the
    same, as the connector's ValueError for options."""
    from sharegroup_source.driver.stream_reader import CheckpointStartReader

    with pytest.raises(OptionError, match=r"option 'checkpointLocation' is required on Spark 4\.0 and 4\.1 "
                                          r"\(Spark 4\.2 and newer need none\)") as error:
        CheckpointStartReader(SourceOptions.parse(BASE))
    assert isinstance(error.value, ValueError)
