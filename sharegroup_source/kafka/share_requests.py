"""What the share-group admin asks Kafka and what it learns: each request built, each answer read into values.

kafka-python builds every message from Kafka's own JSON definitions; the four share-group admin ones it
does not ship are loaded from ``messages/`` (Kafka's own files). Answers become plain values here, an
error per group, partition or topic as :class:`Failed`, so :mod:`.protocol` only routes and retries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kafka.errors as errors
from kafka.protocol.admin import DeleteGroupsRequest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import ListOffsetsRequest

import sharegroup_source.kafka.messages as messages
from sharegroup_source.kafka.metadata import Key

__all__ = ["EARLIEST", "LATEST", "SHARE_APIS", "Coordinator", "DescribedShareGroup", "Failed", "ShareMember",
           "StartOffset", "alter_request", "delete_groups_request", "delete_offsets_request", "describe_request",
           "list_offsets_request", "offsets_request", "parse_alter", "parse_delete_groups", "parse_delete_offsets",
           "parse_describe", "parse_offsets"]

#: ListOffsets timestamps: the log start and the log end.
EARLIEST, LATEST = -2, -1
#: Errors that mean "ask again shortly": the coordinator moved, is loading, or its node is away.
_RETRIABLE = (errors.NotCoordinatorError, errors.CoordinatorNotAvailableError, errors.CoordinatorLoadInProgressError)


# kafka-python's way to add messages: classes named as Kafka's definitions, loaded from our package
class ShareGroupDescribeRequest(ApiMessage, load_json=messages): pass  # type: ignore[call-arg]  # noqa: E701
class ShareGroupDescribeResponse(ApiMessage, load_json=messages): pass  # type: ignore[call-arg]  # noqa: E701
class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=messages): pass  # type: ignore[call-arg]  # noqa: E701
class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=messages): pass  # type: ignore[call-arg]  # noqa: E701
class AlterShareGroupOffsetsRequest(ApiMessage, load_json=messages): pass  # type: ignore[call-arg]  # noqa: E701
class AlterShareGroupOffsetsResponse(ApiMessage, load_json=messages): pass  # type: ignore[call-arg]  # noqa: E701
class DeleteShareGroupOffsetsRequest(ApiMessage, load_json=messages): pass  # type: ignore[call-arg]  # noqa: E701
class DeleteShareGroupOffsetsResponse(ApiMessage, load_json=messages): pass  # type: ignore[call-arg]  # noqa: E701


@dataclass(frozen=True)
class Failed:
    """A group's, partition's or topic's error as the broker (or the connection) gave it."""

    code: str  # Kafka's name of the error, e.g. GROUP_ID_NOT_FOUND
    message: str | None = None
    retriable: bool = False

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.message else self.code

    @classmethod
    def of(cls, code: int, message: str | None = None) -> Failed | None:
        """None for no error (code 0)."""
        if code == 0:
            return None
        error = errors.for_code(code)
        return cls(getattr(error, "message", f"ERROR_{code}"), message or None, issubclass(error, _RETRIABLE))

    @classmethod
    def raised(cls, error: Exception) -> Failed:
        name = getattr(error, "message", None) or type(error).__name__
        text = str(error.args[0]) if error.args else None
        return cls(name, text, isinstance(error, (*_RETRIABLE, errors.KafkaConnectionError,
                                                  errors.NodeNotReadyError, errors.RequestTimedOutError)))


@dataclass(frozen=True)
class Coordinator:
    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port} ({self.node_id})"


@dataclass(frozen=True)
class ShareMember:
    member_id: str
    client_id: str
    host: str
    member_epoch: int
    subscribed: tuple[str, ...]
    assignment: tuple[Key, ...]


@dataclass(frozen=True)
class DescribedShareGroup:
    """ShareGroupDescribe's answer for one group (Kafka's states: Empty, Stable, Dead)."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    members: tuple[ShareMember, ...]


@dataclass(frozen=True)
class StartOffset:
    """DescribeShareGroupOffsets' answer for one share-partition: the SPSO (None: not initialized) and,
    from version 1 (KIP-1226), the lag (None: the broker does not say)."""

    start_offset: int | None
    lag: int | None
    error: Failed | None = None


SHARE_APIS: dict[str, Any] = {"ShareGroupDescribe": ShareGroupDescribeRequest,
               "DescribeShareGroupOffsets": DescribeShareGroupOffsetsRequest,
               "AlterShareGroupOffsets": AlterShareGroupOffsetsRequest,
               "DeleteShareGroupOffsets": DeleteShareGroupOffsetsRequest}


# -- requests and their answers ---------------------------------------------------------------------------
def describe_request(groups: list[str]) -> ApiMessage:
    return ShareGroupDescribeRequest(group_ids=groups, include_authorized_operations=False)


def parse_describe(response: Any, _groups: list[str]) -> dict[str, DescribedShareGroup | Failed]:
    out: dict[str, DescribedShareGroup | Failed] = {}
    for group in response.groups:
        error = Failed.of(group.error_code, group.error_message)
        out[group.group_id] = error if error is not None else DescribedShareGroup(
            group.group_id, group.group_state, group.group_epoch, group.assignment_epoch,
            tuple(ShareMember(m.member_id, m.client_id, m.client_host, m.member_epoch, tuple(m.subscribed_topic_names),
                              tuple(sorted((t.topic_name, p) for t in m.assignment.topic_partitions
                                           for p in t.partitions)))
                  for m in group.members))
    return out


def offsets_request(groups: list[str]) -> ApiMessage:
    group = DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
    return DescribeShareGroupOffsetsRequest(groups=[group(group_id=g, topics=None) for g in groups])


def parse_offsets(response: Any, _groups: list[str]) -> dict[str, dict[Key, StartOffset] | Failed]:
    out: dict[str, dict[Key, StartOffset] | Failed] = {}
    for group in response.groups:
        error = Failed.of(group.error_code, group.error_message)
        if error is not None:
            out[group.group_id] = error
            continue
        out[group.group_id] = {
            (topic.topic_name, p.partition_index): StartOffset(
                p.start_offset if p.start_offset >= 0 else None,
                getattr(p, "lag", -1) if getattr(p, "lag", -1) >= 0 else None, Failed.of(p.error_code, p.error_message))
            for topic in group.topics for p in topic.partitions}
    return out


def delete_groups_request(groups: list[str]) -> ApiMessage:
    return DeleteGroupsRequest(groups_names=groups)


def parse_delete_groups(response: Any, _groups: list[str]) -> dict[str, Failed | None]:
    return {r.group_id: Failed.of(r.error_code) for r in response.results}


def alter_request(group_id: str, offsets: Mapping[Key, int]) -> ApiMessage:
    topic_type = AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic
    partition_type = topic_type.AlterShareGroupOffsetsRequestPartition
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic[topic].append(partition_type(partition_index=partition, start_offset=offset))
    return AlterShareGroupOffsetsRequest(group_id=group_id, topics=[
        topic_type(topic_name=t, partitions=ps) for t, ps in by_topic.items()])


def parse_alter(response: Any) -> Failed | dict[Key, Failed | None]:
    error = Failed.of(response.error_code, response.error_message)
    if error is not None:
        return error
    return {(t.topic_name, p.partition_index): Failed.of(p.error_code, p.error_message)
            for t in response.responses for p in t.partitions}


def delete_offsets_request(group_id: str, topics: Sequence[str]) -> ApiMessage:
    topic_type = DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic
    return DeleteShareGroupOffsetsRequest(group_id=group_id, topics=[topic_type(topic_name=t) for t in topics])


def parse_delete_offsets(response: Any) -> Failed | dict[str, Failed | None]:
    error = Failed.of(response.error_code, response.error_message)
    if error is not None:
        return error
    return {t.topic_name: Failed.of(t.error_code, t.error_message) for t in response.responses}


def list_offsets_request(keys: Sequence[Key], timestamp: int) -> ApiMessage:
    topic_type = ListOffsetsRequest.ListOffsetsTopic
    partition_type = topic_type.ListOffsetsPartition
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for topic, partition in keys:
        by_topic[topic].append(partition_type(partition_index=partition, timestamp=timestamp))
    return ListOffsetsRequest(replica_id=-1, isolation_level=0,
                              topics=[topic_type(name=t, partitions=ps) for t, ps in by_topic.items()])
