"""Hostile input: random bytes everywhere, records at the producer's size limit, fuzzed option values.

Records must come out of format("sharegroup") byte for byte as they went in (null and empty
kept apart), and every wrong option must fail at ``load()`` with a message naming it, fast.
Random input is seeded, so a failure replays the same way.
"""

from __future__ import annotations

import hashlib
import random
import re
import string
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException, Producer
from pyspark.errors import PySparkException

from sharegroup_source.errors import OptionError
from sharegroup_source.option_names import LEGACY_GROUP_SETTINGS, OPTION_DOCS
from sharegroup_source.options import SourceOptions
from sharegroup_testing.kafka_peers import KafkaUnderTest
from tests.streams import StreamSetup

pytestmark = pytest.mark.spark

#: The producer's message.max.bytes (librdkafka's default, set explicitly so the limit is the one under test).
MESSAGE_MAX_BYTES = 1_000_000
#: Key, value and header bytes of one record, with the producer's delivery report filled in later.
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def _random_bytes(rng: random.Random, longest: int) -> bytes | None:
    roll = rng.random()
    if roll < 0.1:
        return None
    if roll < 0.2:
        return b""
    if roll < 0.3:
        return bytes([rng.choice((0x00, 0xFF))]) * rng.randint(1, 16)
    return rng.randbytes(rng.randint(1, longest))


def _random_text(rng: random.Random, longest: int, nul: bool = True) -> str:
    """Any Unicode scalar value (no surrogates), the empty string included, NUL unless ``nul`` is False."""
    def char() -> str:
        while True:
            point = rng.choice((rng.randint(0, 0x7F), rng.randint(0x80, 0xFFFF), rng.randint(0x10000, 0x10FFFF)))
            if not 0xD800 <= point <= 0xDFFF and (nul or point):
                return chr(point)

    return "".join(char() for _ in range(rng.randint(0, longest)))


def _produce(kafka: KafkaUnderTest, topic: str, partitions: int, records: list[Record],
             **config: object) -> dict[tuple[int, int], Record]:
    """Produce ``records`` round-robin; returns them by the (partition, offset) the broker gave them."""
    producer = Producer(kafka.config(**{"linger.ms": 5, **config}))
    placed: dict[tuple[int, int], Record] = {}
    failures: list[str] = []

    def delivered(error, message, record: Record) -> None:
        if error is not None:
            failures.append(str(error))
        else:
            placed[(message.partition(), message.offset())] = record

    for number, record in enumerate(records):
        key, value, headers = record
        producer.produce(topic, key=key, value=value, headers=headers, partition=number % partitions,
                         on_delivery=lambda error, message, record=record: delivered(error, message, record))
        producer.poll(0)
    assert producer.flush(60) == 0 and not failures, f"produce failed: {failures[:3]}"
    return placed


def _sink_records(spark, setup: StreamSetup) -> dict[tuple[int, int], Record]:
    rows = spark.read.parquet(str(setup.sink)).collect()
    out: dict[tuple[int, int], Record] = {}
    for row in rows:
        assert (row.partition, row.offset) not in out, f"record {row.partition}/{row.offset} came out twice"
        headers = [(h.key, None if h.value is None else bytes(h.value)) for h in row.headers]
        out[(row.partition, row.offset)] = (None if row.key is None else bytes(row.key),
                                            None if row.value is None else bytes(row.value), headers)
    return out


def _drain(spark, setup: StreamSetup) -> dict[tuple[int, int], Record]:
    query = setup.file_sink(spark, includeHeaders="true")
    query.awaitTermination(150)
    assert query.exception() is None, query.exception()
    return _sink_records(spark, setup)


@pytest.mark.timeout(240)
def test_random_keys_values_and_headers_pass_through_byte_for_byte(spark, kafka, tmp_path):
    rng = random.Random(932)
    setup = StreamSetup(kafka, kafka.new_topic(2, prefix="bytes"), kafka.new_group(), tmp_path)
    # Header keys carry no NUL: librdkafka keeps header names as C strings, so the producer itself cuts
    # "a\0b" to "a" (a plain consumer sees the same); everything else is any byte or character.
    records = [(_random_bytes(rng, 300), _random_bytes(rng, 3000),
                [(_random_text(rng, 12, nul=False), _random_bytes(rng, 200)) for _ in range(rng.randint(0, 4))])
               for _ in range(400)]
    records[:4] = [(None, None, []), (b"", b"", [("", b"")]), (None, b"", [("k", None), ("k", b"")]),
                   (b"\x00", None, [("\u00e9\U0001f642", b"\x00")])]  # the corner cases, whatever the seed draws
    produced = _produce(kafka, setup.topic, 2, records)
    got = _drain(spark, setup)
    assert got.keys() == produced.keys(), (f"missing {sorted(produced.keys() - got.keys())[:5]}, "
                                           f"unexpected {sorted(got.keys() - produced.keys())[:5]}")
    different = [position for position, record in produced.items() if got[position] != record]
    assert not different, f"{len(different)} records changed, e.g. {different[0]}: " \
                          f"sent {produced[different[0]]!r:.300}, got {got[different[0]]!r:.300}"


@pytest.mark.timeout(240)
def test_records_at_the_producers_size_limit_pass_through(spark, kafka, tmp_path):
    setup = StreamSetup(kafka, kafka.new_topic(2, prefix="large"), kafka.new_group(), tmp_path)
    producer = Producer(kafka.config(**{"message.max.bytes": MESSAGE_MAX_BYTES}))
    with pytest.raises(KafkaException, match=r"MSG_SIZE_TOO_LARGE|too large"):
        producer.produce(setup.topic, value=b"x" * (MESSAGE_MAX_BYTES + 1), partition=0)
    del producer
    rng = random.Random(11)
    # the record framing takes a few dozen bytes; 64 leaves the records as large as the producer allows
    largest = MESSAGE_MAX_BYTES - 64
    records: list[Record] = [(b"big", rng.randbytes(largest - 3), []), (b"small", b"between", []),
                             (None, rng.randbytes(largest), []), (b"h", rng.randbytes(largest - 200), [("h", b"v")])]
    produced = _produce(kafka, setup.topic, 2, records, **{"message.max.bytes": MESSAGE_MAX_BYTES})
    got = _drain(spark, setup)

    def digest(record: Record) -> tuple[object, ...]:
        key, value, headers = record
        return key, None if value is None else (len(value), hashlib.sha256(value).hexdigest()), headers

    assert {p: digest(r) for p, r in got.items()} == {p: digest(r) for p, r in produced.items()}


# -- option fuzzing ------------------------------------------------------------------------------
#: Whether a value is valid: True, False, or None where both outcomes are acceptable (the value
#: is outside what the documentation promises either way), as long as a failure names the option.
Verdict = Callable[[str], bool | None]
INT32_MAX = 2**31 - 1


def _text(value: str) -> bool:
    return bool(value.strip())


def _topics(value: str) -> bool:
    return any(t.strip() for t in value.split(","))


def _positive(value: str, top: int = INT32_MAX) -> bool | None:
    text = value.strip()
    if not text:
        return True  # the default
    if re.fullmatch(r"\+?[0-9]+", text):
        return 0 < int(text) <= top  # Kafka's and Spark's integer settings are 32-bit
    try:
        int(text)  # Python's own spellings ("1_000", other scripts' digits): lenient, not promised
    except ValueError:
        return False
    return None if 0 < int(text) <= top else False


def _byte_count(value: str) -> bool | None:
    return _positive(value, top=2**63 - 1)  # bytes per trigger may exceed 2 GiB


def _poll_timeout(value: str) -> bool | None:
    return _positive(value, top=60_000)  # a longer poll would hold a trigger for minutes


def _group_id(value: str) -> bool:
    return bool(value.strip()) and value == value.strip() and "\x00" not in value


def _blank_is_unset(value: str) -> bool:
    return value == "" or bool(value.strip())


def _boolean(value: str) -> bool:
    return value.strip().lower() in ("true", "false")


def _coordinator(value: str) -> bool:
    return value.strip().lower() == "broker"  # "delta" needs groupLocation, which these options lack


def _delta_only(_value: str) -> bool:
    return False  # the fuzzed options use the broker coordinator, which refuses the Delta coordinator's options


def _anything(_value: str) -> bool:
    return True


def _starting_offsets(value: str) -> bool:
    return not value.strip() or value.strip().lower() in ("earliest", "latest")


#: Every documented option (the options page, generated from option_names.OPTION_DOCS) with its validity rule;
#: a family (kafka.*, stateStorage.*, groupConfig.*) by a member of it.
DOCUMENTED: dict[str, Verdict] = {
    "kafka.bootstrap.servers": _text, "kafka.group.id": _group_id, "subscribe": _topics, "stateLocation": _text,
    "maxRecordsPerTrigger": _positive, "maxRecordsPerPartition": _positive, "includeHeaders": _boolean,
    "maxBytesPerTrigger": _byte_count, "maxBytesPerPartition": _positive,
    "failOnDataLoss": _boolean, "pollTimeoutMs": _poll_timeout, "lockDurationMs": _positive,
    "coordinator": _coordinator, "maxDeliveries": _positive, "deadLetterLocation": _blank_is_unset,
    "checkpointLocation": _blank_is_unset, "stateStorage.x": _anything, "groupLocation": _delta_only,
    "share.record.lock.duration.ms": _delta_only, "share.delivery.count.limit": _delta_only,
    "share.partition.max.record.locks": _delta_only, "share.auto.offset.reset": _delta_only,
    "startingOffsets": _starting_offsets, "groupConfig.share.record.lock.duration.ms": _positive,
    "groupConfig.share.isolation.level": _anything,  # blank is unset; the broker checks a value when it is set
}
REQUIRED = {"kafka.bootstrap.servers": "127.0.0.1:9", "kafka.group.id": "fuzz", "subscribe": "fuzz",
            "stateLocation": "/tmp/sharegroup-fuzz-state"}


def test_every_documented_option_is_fuzzed():
    """The options page's options (OPTION_DOCS) and the earlier spellings it names each have a rule above, a family
    (kafka.*, stateStorage.*, groupConfig.*) by one of its members."""
    fuzzed = {name.lower() for name in DOCUMENTED}
    missing = [doc.name for doc in OPTION_DOCS if not any(
        name == doc.name.lower() or (doc.name.endswith(".*") and name.startswith(doc.name[:-1].lower()))
        for name in fuzzed)]
    missing += [name for name in LEGACY_GROUP_SETTINGS if name not in fuzzed]
    assert not missing, f"documented options without a rule in DOCUMENTED: {missing}"


def _fuzz_value(rng: random.Random) -> str:
    """One value from a mix of shapes: blanks, numbers of every kind, booleans, junk, huge, control characters."""
    shapes: list[Callable[[], str]] = [
        lambda: rng.choice(["", " ", "\t\n", "\x00", "a\x00b"]),
        lambda: str(rng.randint(-10**6, 10**6)),
        lambda: rng.choice(["0", "-1", "+5", " 42 ", "1.5", "1e3", "0x10", "1_000", "\uff11\uff12", "NaN"]),
        lambda: str(rng.randint(2**31, 2**70)),
        lambda: rng.choice(["true", "FALSE", " True ", "yes", "1", "t", "broker", "BROKER ", "delta", "kafka"]),
        lambda: "".join(rng.choices(string.printable, k=rng.randint(1, 30))),
        lambda: _random_text(rng, 20),
        lambda: rng.choice(string.ascii_letters) * rng.randint(1_000, 20_000),
        lambda: ",".join(rng.choice(["", " ", "t1", "t-2"]) for _ in range(rng.randint(1, 4))),
    ]
    return rng.choice(shapes)()


def _outcome(load: Callable[[dict[str, str]], object], name: str, value: str) -> str | None:
    """None if loading succeeded, else the error message (which must name the option)."""
    try:
        load({**REQUIRED, name: value})
    except (OptionError, PySparkException) as error:
        return str(error)
    return None


def _check(name: str, value: str, error: str | None) -> None:
    verdict = DOCUMENTED[name](value)
    if error is None:
        assert verdict is not False, f"option {name}={value!r:.80} is invalid but was accepted"
    else:
        assert f"'{name}'" in error, f"the error for {name}={value!r:.80} does not name the option: {error[:500]}"
        assert verdict is not True, f"option {name}={value!r:.80} is valid but was refused: {error[:500]}"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_fuzzed_option_values_fail_naming_the_option_or_load(name):
    """Many values per option through the parser that ``load()`` runs (fast: no Spark round trip)."""
    rng = random.Random(f"parse-{name}")
    for value in [_fuzz_value(rng) for _ in range(300)]:
        _check(name, value, _outcome(SourceOptions.parse, name, value))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_fuzzed_option_values_through_spark_load(spark, name):
    """One value per option through ``spark.readStream...load()`` itself: the error reaches the user intact. (Each
    load is a round trip to a Python worker, 1-3 s; the parser ``load()`` runs takes 300 values per option above.)"""
    value = _fuzz_value(random.Random(f"load-{name}"))
    _check(name, value, _outcome(lambda options: spark.readStream.format("sharegroup").options(**options).load(),
                                 name, value))


@pytest.mark.timeout(30)
def test_fuzzed_option_names_are_refused_naming_them():
    rng = random.Random("names")
    reserved = ["kafka.share.acknowledgement.mode", "KAFKA.MAX.POLL.RECORDS", "kafka.enable.auto.commit"]
    junk = ["".join(rng.choices(string.ascii_letters + "._-", k=rng.randint(1, 20))) for _ in range(200)]
    for name in reserved + junk:
        if name.lower().startswith("kafka.") and name.lower() not in {r.lower() for r in reserved}:
            continue  # passed to the Kafka client unchanged, by design
        if name.lower() in {k.lower() for k in DOCUMENTED}:
            continue
        with pytest.raises(OptionError, match=re.compile(re.escape(f"'{name}'"), re.IGNORECASE)):
            SourceOptions.parse({**REQUIRED, name: "x"})


@pytest.mark.timeout(60)
def test_max_records_per_trigger_beyond_one_poll_fails_at_load(spark):
    """max.poll.records is a 32-bit setting: a larger value must fail at load(), not at start naming it."""
    with pytest.raises(PySparkException, match="'maxRecordsPerTrigger'"):
        spark.readStream.format("sharegroup").options(**REQUIRED, maxRecordsPerTrigger=str(2**31)).load()
