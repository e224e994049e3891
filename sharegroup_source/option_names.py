"""The options a user may write: each one's name, line of meaning and default, as the options page shows them,
and an unknown name refused with the known one it was probably meant to be.

The parser (``sharegroup_source/options.py``) reads the values; this module says which names exist, so the options
page, the parser's defaults and its "did you mean" come from one table.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sharegroup_source.errors import OptionError
from sharegroup_source.kafka.group_configs import DELTA_GROUP_CONFIGS, GROUP_CONFIG_PREFIX
from sharegroup_source.locations import STORAGE_PREFIX

__all__ = ["COORDINATORS", "DEFAULT_LOCK_DURATION_MS", "DEFAULT_MAX_BYTES_PER_PARTITION",
           "DEFAULT_MAX_RECORDS_PER_PARTITION", "DEFAULT_POLL_TIMEOUT_MS", "DOCUMENTED", "KAFKA_PREFIX",
           "LEGACY_GROUP_SETTINGS", "OPTION_DOCS", "POLL_TIMEOUT_MAX_MS", "STARTING_OFFSETS", "OptionDoc",
           "refuse_unknown"]

COORDINATORS = ("broker", "delta")
#: Where a new share group starts: Spark's Kafka source's option and values.
STARTING_OFFSETS = ("earliest", "latest")
#: The Delta coordinator's group settings as they were spelt before ``groupConfig.*``: still taken with
#: coordinator=delta (a query started by an earlier release keeps its options), refused with the new name otherwise.
LEGACY_GROUP_SETTINGS = DELTA_GROUP_CONFIGS
KAFKA_PREFIX = "kafka."
#: Spark warns of every task above 1000 KiB (TaskSetManager's TASK_SIZE_TO_WARN_KIB, not a setting); a task adds a few
#: KiB of its own to its partition's bytes (the reader's pickled read function)
DEFAULT_MAX_BYTES_PER_PARTITION = 960 * 1024
DEFAULT_MAX_RECORDS_PER_PARTITION = 50_000
DEFAULT_POLL_TIMEOUT_MS = 1_000
#: Kafka's default share.record.lock.duration.ms
DEFAULT_LOCK_DURATION_MS = 30_000
#: One poll blocks Spark's latestOffset call; longer than a minute the query looks hung, and the
#: previous epoch's locks (30 s by default) run out while the driver waits.
POLL_TIMEOUT_MAX_MS = 60_000


@dataclass(frozen=True)
class OptionDoc:
    """One option as the options page shows it: its name as a user writes it, one line of meaning, its default."""

    name: str
    meaning: str
    #: the value the option takes when it is left out, as parsed (None: no value)
    default: int | bool | str | None = None
    #: what leaving it out means, where ``default`` is None
    unset: str = "unset"
    required: bool = False
    #: the coordinator it applies to: "broker", "delta" or "both"
    coordinator: str = "both"
    #: the ``SourceOptions`` field the option fills
    attribute: str = ""

    @property
    def default_shown(self) -> str:
        """The default as the options page prints it."""
        if self.required:
            return "required"
        if self.default is None:
            return self.unset
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if isinstance(self.default, int) and self.default >= 1024 and self.default % 1024 == 0:
            return f"{self.default} ({self.default // 1024} KiB)"
        return str(self.default)


#: Every option of format("sharegroup"), in the order the options page lists them. One line of meaning each;
#: measurements belong on the benchmarks page. tests/test_docs.py fails when an option the parser reads is missing.
OPTION_DOCS: tuple[OptionDoc, ...] = (
    OptionDoc("kafka.bootstrap.servers", "The Kafka cluster, `host:port` pairs separated by commas (Kafka 4.2+ with "
              "share groups for `coordinator=broker`).", required=True, attribute="bootstrap_servers"),
    OptionDoc("kafka.group.id", "The share group; the query is one member of it. Taken exactly as written.",
              required=True, attribute="group_id"),
    OptionDoc("subscribe", "The topics, separated by commas.", required=True, attribute="topics"),
    OptionDoc("stateLocation", "Path or URI of this query's Delta state, one per checkpoint.", required=True,
              attribute="state_location"),
    OptionDoc("checkpointLocation", "The query's own checkpoint (the sink's): acknowledgements follow Spark's commits "
              "at once. Needed on Spark 4.0 and 4.1.", attribute="checkpoint_location"),
    OptionDoc("coordinator", "Who holds the locks: `broker` (the Kafka broker's share group) or `delta` (a Delta "
              "table at `groupLocation`).", default=COORDINATORS[0], attribute="coordinator"),
    OptionDoc("groupLocation", "Path or URI of the share group's Delta state, the same for every member. Required "
              "with `coordinator=delta`.", coordinator="delta", attribute="group_location"),
    OptionDoc("startingOffsets", "`earliest` or `latest`: where a group that never fetched starts. Changes nothing "
              "for a group that fetched.", unset="as the group is configured", attribute="starting_offsets"),
    OptionDoc(f"{GROUP_CONFIG_PREFIX}*", "A share group's config, such as "
              f"`{GROUP_CONFIG_PREFIX}share.delivery.count.limit`, set at start where the group's value differs.",
              unset="the group's", attribute="group_configs"),
    OptionDoc("maxRecordsPerTrigger", "Records per micro-batch, the rest acquired for the next ones; soft: a batch "
              "takes more rather than let records outlive their lock (below the table).",
              unset="what the in-flight windows hold",
              attribute="max_records_per_trigger"),
    OptionDoc("maxRecordsPerPartition", "Records per Spark task. Lower it for parallelism when each record costs "
              "the sink real work.", default=DEFAULT_MAX_RECORDS_PER_PARTITION, attribute="max_records_per_partition"),
    OptionDoc("maxBytesPerTrigger", "Key, value and header bytes per micro-batch; the rest stays acquired for the "
              "next ones. Soft, as `maxRecordsPerTrigger` is.",
              unset="unbounded", coordinator="broker", attribute="max_bytes_per_trigger"),
    OptionDoc("maxBytesPerPartition", "Compressed bytes of records per Spark task, below Spark's 1000 KiB task-size "
              "warning; a larger record gets a task alone.", default=DEFAULT_MAX_BYTES_PER_PARTITION,
              attribute="max_bytes_per_partition"),
    OptionDoc("includeHeaders", "Adds the `headers` column.", default=False, attribute="include_headers"),
    OptionDoc("failOnDataLoss", "Fail when retention or DeleteRecords removed records before the query read "
              "them; `false` goes on without them, logged once and counted in `lost_unread`.",
              default=True, attribute="fail_on_data_loss"),
    OptionDoc("pollTimeoutMs", f"How long one poll waits for records, at most {POLL_TIMEOUT_MAX_MS}.",
              default=DEFAULT_POLL_TIMEOUT_MS, attribute="poll_timeout_ms"),
    OptionDoc("lockDurationMs", "The group's lock duration where the cluster does not say it (a broker without "
              "group configurations): how long acquired records wait for a batch, and lock-headroom warnings.",
              default=DEFAULT_LOCK_DURATION_MS, coordinator="broker",
              attribute="lock_duration_ms"),
    OptionDoc("maxDeliveries", "A record delivered more often is rejected into the dead letters instead of "
              "emitted. Keep it below the group's `share.delivery.count.limit`.", attribute="max_deliveries"),
    OptionDoc("deadLetterLocation", "Path or URI of the `dead_letters` table.", unset="under stateLocation",
              attribute="dead_letter_location"),
    OptionDoc("stateStorage.*", "delta-rs storage options for the locations on object stores (credentials, "
              "endpoint). Never printed.", attribute="storage_options"),
    OptionDoc(f"{KAFKA_PREFIX}*", "librdkafka settings, passed to the Kafka client unchanged (security "
              "included). Never printed.", attribute="kafka"),
)
DOCUMENTED = tuple(doc.name for doc in OPTION_DOCS)
_KNOWN = {name.lower() for name in DOCUMENTED if not name.endswith(".*")}
#: What follows a family's prefix, as a suggestion names it
_PLACEHOLDER = {GROUP_CONFIG_PREFIX[:-1]: "<config>", KAFKA_PREFIX[:-1]: "<setting>"}
#: Spark's Kafka source's options (format("kafka")) a share group says another way, lower-cased: the way it says them
_SPARK_KAFKA_OPTIONS = {"maxoffsetspertrigger": "maxRecordsPerTrigger", "groupidprefix": "kafka.group.id",
                        "kafkaconsumer.polltimeoutms": "pollTimeoutMs", "subscribepattern": "subscribe",
                        "assign": "subscribe", "startingoffsetsbytimestamp": "startingOffsets",
                        "startingtimestamp": "startingOffsets"}


def refuse_unknown(options: Mapping[str, Any]) -> None:
    """An option the source does not know, named as it reached the source, with the closest known one in its
    documented spelling. Spark hands a Python data source its option names lower-cased (its CaseInsensitiveMap on the
    JVM, pyspark's CaseInsensitiveDict in the worker): the user's own spelling does not reach the source."""
    prefixes = (KAFKA_PREFIX, STORAGE_PREFIX, GROUP_CONFIG_PREFIX.lower(), *LEGACY_GROUP_SETTINGS)
    unknown = sorted(key for key in options if not key.lower().startswith(prefixes) and key.lower() not in _KNOWN)
    if not unknown:
        return
    closest = {key: _closest(key) for key in unknown}
    said = ", ".join(f"{key!r}" + (f" (did you mean {close}?)" if close else "") for key, close in closest.items())
    # every name lower-cased, the required stateLocation's too: the options came through Spark, so say why a name
    # is shown in another case than the one suggested
    spark = all(key == key.lower() for key in options) and any(closest.values())
    lowered = "; Spark passes option names lower-cased" if spark else ""
    raise OptionError(f"unknown option{'s' if len(unknown) > 1 else ''} {said}{lowered}; sharegroup options: "
                      f"{', '.join(sorted(DOCUMENTED))}")


def _closest(key: str) -> str | None:
    """The known option ``key`` was probably meant to be, as the documentation spells it (None: nothing close)."""
    lowered = key.lower()
    if lowered in _SPARK_KAFKA_OPTIONS:
        return _SPARK_KAFKA_OPTIONS[lowered]
    names = {name.lower(): name for name in DOCUMENTED if not name.endswith(".*")}
    close = difflib.get_close_matches(lowered, names, n=1, cutoff=0.75)
    if close:
        return names[close[0]]
    # a family's prefix misspelt or without its dot: groupconfigs.share.delivery.count.limit, statestorage
    head, dot, rest = key.partition(".")
    for family in (name[:-2] for name in DOCUMENTED if name.endswith(".*")):
        if difflib.SequenceMatcher(None, head.lower(), family.lower()).ratio() >= 0.8:
            return f"{family}.{rest if dot else _PLACEHOLDER.get(family, '<key>')}"
    return None
