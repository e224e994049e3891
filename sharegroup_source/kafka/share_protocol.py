"""Kafka's share-group admin protocol, spoken through kafka-python: no JVM, no framing of our own.

confluent-kafka's AdminClient has no share-group call. kafka-python 3 builds every request from
Kafka's own JSON message definitions and brings connections, ApiVersions negotiation (each
request goes out at the highest version both sides have), SASL and TLS. It ships no definitions
for ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteShareGroupOffsets, so those are loaded from ``messages/`` (Kafka's own files).

What the admin needs of a cluster, batched as KIP-699 and KIP-709 want it: one ListGroups per
broker (each answers for the groups it coordinates, so those need no FindCoordinator), one
FindCoordinator for every other group, one request per coordinator for each group API (but
DescribeShareGroupOffsets: see :meth:`ShareGroupProtocol.start_offsets`), one ListOffsets per
partition leader; requests to different nodes are in flight together. Each group's error is that
group's; a retriable one (coordinator moving or loading) is retried within the timeout. Every request is counted in
:attr:`ShareGroupProtocol.requests`, so a describe's cost can be asserted and benchmarked.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
import time
from collections import Counter, defaultdict, deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

import kafka.errors as errors
from confluent_kafka import KafkaError
from kafka.admin import KafkaAdminClient
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin import ListGroupsRequest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest, MetadataRequest

from sharegroup_source.errors import AuthenticationError, ClusterError, TlsError
from sharegroup_source.kafka.errors import refusal
from sharegroup_source.kafka.metadata import Key, check_login
from sharegroup_source.kafka.settings import kafka_python_config
from sharegroup_source.kafka.share_requests import (
    SHARE_APIS,
    Coordinator,
    DescribedShareGroup,
    Failed,
    StartOffset,
    alter_request,
    delete_groups_request,
    delete_offsets_request,
    describe_request,
    list_offsets_request,
    offsets_request,
    parse_alter,
    parse_delete_groups,
    parse_delete_offsets,
    parse_describe,
    parse_offsets,
)

__all__ = ["KAFKA_TIMEOUT_S", "NO_SHARE_GROUP_ADMIN", "ShareGroupProtocol"]

T = TypeVar("T")

#: How a cluster without share-group admin APIs is named (librdkafka's embedded broker, Kafka before 4.1).
NO_SHARE_GROUP_ADMIN = "the Kafka cluster has no share-group admin API"
#: How long an admin request (the share-group protocol's or an admin client's) may take before its cluster counts as
#: unreachable.
KAFKA_TIMEOUT_S = 15.0
_BACKOFF_S = 0.2
#: Requests one connection keeps unanswered: kafka-python's max_in_flight_requests_per_connection (5).
_IN_FLIGHT = 5
#: How long one broker may take to answer a request any broker could answer, before the next is asked.
_ATTEMPT_S = 4.0
#: How long a first bootstrap attempt may take (a server that accepts connections and never answers: a frozen one);
#: each round over the servers doubles it, so a server slow on a busy machine still gets through.
_BOOTSTRAP_ATTEMPT_S = 3.0
#: Connections that log in or shake hands (``security.protocol``), whose refusal kafka-python may not read
_SECURED = re.compile(r"SASL|SSL", re.IGNORECASE)


class ShareGroupProtocol:
    """One conversation with a cluster about its share groups; never a member of any.

    Each call blocks until every answer is in or ``timeout_s`` passed; what did not answer in
    time is that group's (or partition's) error, so a dead coordinator costs its groups, not
    the call.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float):
        self.timeout_s = timeout_s
        self.requests: Counter[str] = Counter()
        self._servers = config.get("bootstrap.servers")
        self._config = config
        settings = kafka_python_config(config)
        logging.getLogger("kafka").setLevel(logging.CRITICAL)  # its errors come back to us as values
        self._admin = self._bootstrap(settings)
        self._manager = self._admin._manager
        self._coordinators: dict[str, int] = {}
        self._answered: dict[int, bool] = {}  # per node: whether it answered its last request of this conversation
        self.requests["ApiVersions+Metadata (bootstrap)"] += 1
        missing = [name for name, request in SHARE_APIS.items() if request.API_KEY not in self._api_versions()]
        if missing:
            self.close()
            raise ClusterError(f"{NO_SHARE_GROUP_ADMIN} at bootstrap.servers={self._servers} "
                               f"({', '.join(missing)}): share groups need Apache Kafka 4.1 or later with share "
                               "groups enabled")

    def _bootstrap(self, settings: Mapping[str, Any]) -> KafkaAdminClient:
        """kafka-python's client, bootstrapped: one bootstrap server per attempt, in turn from a random one, each
        round's attempts twice as long as the last's. A frozen server costs one short attempt (kafka-python's own
        pick is random per attempt, so one call could draw the frozen server every time), and a server slow on a
        busy machine gets a longer one in the next round. A server that answers ApiVersions in a form kafka-python
        cannot decode answers no ApiVersions v3+, which every Kafka since 2.4 does (librdkafka's embedded broker
        does not): it has no share-group API either, said at once."""
        deadline = time.monotonic() + self.timeout_s
        servers = [server.strip() for server in str(settings["bootstrap_servers"]).split(",")]
        first = random.randrange(len(servers))  # where the turns start: callers spread over the servers
        watcher = _BootstrapTrouble()
        with watcher.watching():
            for attempt in itertools.count():
                server = servers[(first + attempt) % len(servers)]
                round_s = _BOOTSTRAP_ATTEMPT_S * 2 ** (attempt // len(servers))
                attempt_s = max(0.5, min(round_s, deadline - time.monotonic()))
                try:
                    return _admin_client(**{**settings, "bootstrap_servers": server},
                                         request_timeout_ms=int(self.timeout_s * 1000),
                                         bootstrap_timeout_ms=int(attempt_s * 1000), reconnect_backoff_max_ms=1000)
                except errors.KafkaError as error:
                    failure = Failed.raised(error)
                except _Refused:
                    pass  # watcher.refused says what
                if watcher.refused is not None:  # a refused login or TLS handshake: asking again changes nothing
                    code, words = watcher.refused
                    raise refusal(KafkaError(code, words), self._config) or ClusterError(words)
                if _SECURED.search(str(self._config.get("security.protocol", ""))):
                    # kafka-python may never see a refusal (see _BootstrapTrouble): librdkafka does, and says it now
                    try:
                        check_login(self._config, max(1.0, min(_BOOTSTRAP_ATTEMPT_S, deadline - time.monotonic())))
                    except (AuthenticationError, TlsError):
                        raise
                    except ClusterError:
                        pass  # no broker answered it either: ask again until the deadline
                if watcher.undecodable:
                    raise ClusterError(f"{NO_SHARE_GROUP_ADMIN} at bootstrap.servers={self._servers}: it does not "
                                       "answer ApiVersions v3+, which every Kafka with share groups does (share "
                                       "groups need Apache Kafka 4.1 or later with share groups enabled)")
                if time.monotonic() >= deadline:
                    raise ClusterError(f"cannot reach Kafka at bootstrap.servers={self._servers} within "
                                       f"{self.timeout_s:.0f}s: {failure}")

    def _api_versions(self) -> Mapping[int, Any]:
        return self._manager.broker_version_data.api_versions or {}

    def close(self) -> None:
        self._admin.close()

    def __enter__(self) -> ShareGroupProtocol:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the calls -------------------------------------------------------------------------------------
    def brokers(self) -> dict[int, Coordinator]:
        return {b.node_id: Coordinator(b.node_id, b.host, b.port) for b in self._manager.cluster.brokers()}

    def coordinators(self) -> dict[str, int]:
        """The coordinator node of each group this conversation found one for."""
        return dict(self._coordinators)

    def list_share_groups(self) -> tuple[list[str], dict[int, Failed]]:
        """Every share group of the cluster, one ListGroups (type share) per broker; and the brokers that
        could not answer. Each listed group's coordinator is the broker that listed it."""
        return self._run(self._list_share_groups)

    def describe(self, group_ids: Sequence[str]) -> dict[str, DescribedShareGroup | Failed]:
        return self._run(self._grouped, group_ids, describe_request, parse_describe)

    def start_offsets(self, group_ids: Sequence[str], *,
                      group_per_request: bool = True) -> dict[str, dict[Key, StartOffset] | Failed]:
        """DescribeShareGroupOffsets, one request per group, all in flight together: Apache Kafka 4.3.1 answers a
        request naming several groups seconds late (measured 2026-11-27 on one broker, 200 groups: 2.4-7.3 s as
        one request, 9.3-9.6 s as four of 50, 0.6-1.3 s as 200 of one), so one round trip of single-group
        requests is the fast way; the wire format allows the batch, and a broker that answers it promptly
        would make it the better one. ``group_per_request=False`` sends the batch, one request per coordinator
        naming all its groups: the way the admin decided against, which bench/admin_broker_bench.py measures."""
        return self._run(partial(self._grouped, group_per_request=group_per_request), group_ids, offsets_request,
                         parse_offsets)

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, Failed | None]:
        return self._run(self._grouped, group_ids, delete_groups_request, parse_delete_groups)

    def alter_start_offsets(self, group_id: str, offsets: Mapping[Key, int]) -> Failed | dict[Key, Failed | None]:
        """AlterShareGroupOffsets: the group's error, or each partition's outcome."""
        result = self._run(self._grouped, [group_id], lambda _: alter_request(group_id, offsets),
                           lambda response, _: {group_id: parse_alter(response)})
        return result[group_id]

    def delete_start_offsets(self, group_id: str, topics: Sequence[str]) -> Failed | dict[str, Failed | None]:
        """DeleteShareGroupOffsets: the group's error, or each topic's outcome."""
        result = self._run(self._grouped, [group_id], lambda _: delete_offsets_request(group_id, topics),
                           lambda response, _: {group_id: parse_delete_offsets(response)})
        return result[group_id]

    def log_offsets(self, keys: Iterable[Key], timestamp: int) -> dict[Key, int | Failed]:
        """Per partition, the offset at ``timestamp`` (EARLIEST, LATEST, or ms: the first record at or after
        it, -1 if none): one Metadata request, then one ListOffsets per partition leader."""
        return self._run(self._log_offsets, sorted(set(keys)), timestamp)

    # -- how they are sent ------------------------------------------------------------------------------
    def _run(self, coroutine: Callable[..., Awaitable[T]], *args: Any) -> T:
        return self._manager.run(coroutine, *args)

    def _send(self, request: ApiMessage, node_id: int) -> Any:
        """Send now (counted); the answer is awaited with :meth:`_answer`, so requests to many nodes are in
        flight together and a node that does not answer delays only its own."""
        self.requests[request.name] += 1
        return self._manager.send(request, node_id=node_id)

    async def _answer(self, future: Any, deadline: float, node: int) -> Any:
        """``future``'s answer from ``node``; a node that failed to answer is asked last from then on."""
        remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            answer = await self._manager.wait_for(future, remaining_ms)
        except errors.KafkaError:
            self._answered[node] = False
            raise
        self._answered[node] = True
        return answer

    async def _windowed(self, node: int, requests: Sequence[tuple[list[str], ApiMessage]], deadline: float
                        ) -> list[tuple[list[str], Any]]:
        """Each request's answer (or KafkaError) from ``node``, with at most :data:`_IN_FLIGHT` unanswered at a
        time: kafka-python refuses more on one connection, and the broker answers a connection's requests one
        after another anyway."""
        answered: list[tuple[list[str], Any]] = []
        waiting: deque[tuple[list[str], Any]] = deque()

        async def oldest() -> None:
            groups, future = waiting.popleft()
            try:
                answered.append((groups, await self._answer(future, deadline, node)))
            except errors.KafkaError as error:
                answered.append((groups, error))

        for groups, request in requests:
            if len(waiting) >= _IN_FLIGHT:
                await oldest()
            waiting.append((groups, self._send(request, node)))
        while waiting:
            await oldest()
        return answered

    async def _ask_any(self, request: ApiMessage, deadline: float) -> Any:
        """A request any broker answers (FindCoordinator, Metadata): brokers in turn, each given a few seconds, those
        that answered in this conversation first and those that did not last, so a frozen broker costs a few
        seconds once, not the call."""
        rank = {True: 0, None: 1, False: 2}
        nodes = sorted(self.brokers(), key=lambda node: rank[self._answered.get(node)])
        failure: errors.KafkaError = errors.NodeNotReadyError("no broker known")
        for node in nodes:
            attempt_end = min(deadline, time.monotonic() + _ATTEMPT_S)
            try:
                return await self._answer(self._send(request, node), attempt_end, node)
            except errors.KafkaError as error:
                failure = error
            if time.monotonic() >= deadline:
                break
        raise failure

    async def _list_share_groups(self) -> tuple[list[str], dict[int, Failed]]:
        deadline = time.monotonic() + self.timeout_s
        request = ListGroupsRequest(types_filter=["share"], min_version=5)
        futures = {node: self._send(request, node) for node in self.brokers()}
        groups: list[str] = []
        failed: dict[int, Failed] = {}
        for node, future in futures.items():
            try:
                response = await self._answer(future, deadline, node)
            except errors.KafkaError as error:
                failed[node] = Failed.raised(error)
                continue
            refused = Failed.of(response.error_code)
            if refused is not None:
                failed[node] = refused
                continue
            for group in response.groups:
                if group.group_type.lower() == "share":
                    groups.append(group.group_id)
                    self._coordinators[group.group_id] = node
        return sorted(groups), failed

    async def _find_coordinators(self, group_ids: Sequence[str], deadline: float) -> dict[str, int | Failed]:
        """Each group's coordinator: cached, or one batched FindCoordinator (v4+, KIP-699) for the rest."""
        found: dict[str, int | Failed] = {g: self._coordinators[g] for g in group_ids if g in self._coordinators}
        unknown = [g for g in group_ids if g not in found]
        if not unknown:
            return found
        request = FindCoordinatorRequest(key_type=CoordinatorType.GROUP.value, coordinator_keys=unknown, min_version=4)
        try:
            response = await self._ask_any(request, deadline)
        except errors.KafkaError as error:
            return {**found, **dict.fromkeys(unknown, Failed.raised(error))}
        for coordinator in response.coordinators:
            refused = Failed.of(coordinator.error_code, coordinator.error_message)
            if refused is None:
                self._coordinators[coordinator.key] = coordinator.node_id
            found[coordinator.key] = refused if refused is not None else coordinator.node_id
        return found

    async def _grouped(self, group_ids: Sequence[str], build: Callable[[list[str]], ApiMessage],
                       parse: Callable[[Any, list[str]], Mapping[str, T]], *,
                       group_per_request: bool = False) -> dict[str, T | Failed]:
        """One request per coordinator for its groups (``group_per_request``: one per group), all in flight at
        once; groups whose answer is a retriable error (or whose coordinator did not answer) are asked again
        until the timeout."""
        deadline = time.monotonic() + self.timeout_s
        pending = list(dict.fromkeys(group_ids))
        results: dict[str, T | Failed] = {}
        while pending:
            retry: list[str] = []

            def settle(group: str, outcome: T | Failed, retry: list[str] = retry) -> None:
                if isinstance(outcome, Failed) and outcome.retriable and time.monotonic() + _BACKOFF_S < deadline:
                    self._coordinators.pop(group, None)
                    retry.append(group)
                results[group] = outcome

            by_node: dict[int, list[str]] = defaultdict(list)
            for group, coordinator in (await self._find_coordinators(pending, deadline)).items():
                if isinstance(coordinator, Failed):
                    settle(group, coordinator)
                else:
                    by_node[coordinator].append(group)
            batches = {node: [[group] for group in groups] if group_per_request else [groups]
                       for node, groups in by_node.items()}
            workers = {node: self._manager.call_soon(self._windowed, node, [(gs, build(gs)) for gs in batch], deadline)
                       for node, batch in batches.items()}  # every node's requests on their way at once
            for node, worker in workers.items():
                for groups, answer in await worker:
                    answers: Mapping[str, T | Failed] = (dict.fromkeys(groups, Failed.raised(answer))
                                                          if isinstance(answer, errors.KafkaError)
                                                          else parse(answer, groups))
                    for group in groups:
                        settle(group, answers.get(group, Failed("NO_ANSWER", f"coordinator {node} left it out")))
            pending = retry
            if pending:
                await self._manager._net.sleep(_BACKOFF_S)
        return results

    async def _log_offsets(self, keys: Sequence[Key], timestamp: int) -> dict[Key, int | Failed]:
        deadline = time.monotonic() + self.timeout_s
        topics = sorted({topic for topic, _ in keys})
        results: dict[Key, int | Failed] = {}
        try:
            metadata = await self._ask_any(MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics], allow_auto_topic_creation=False),
                deadline)
        except errors.KafkaError as error:
            return dict.fromkeys(keys, Failed.raised(error))
        leaders: dict[Key, int] = {}
        for topic in metadata.topics:
            for partition in topic.partitions:
                leaders[(topic.name, partition.partition_index)] = partition.leader_id
        by_leader: dict[int, list[Key]] = defaultdict(list)
        for key in keys:
            if key not in leaders:
                results[key] = Failed("UNKNOWN_TOPIC_OR_PARTITION", f"{key[0]}[{key[1]}] is not in the cluster")
            elif leaders[key] < 0:
                results[key] = Failed("LEADER_NOT_AVAILABLE", f"{key[0]}[{key[1]}] has no leader", True)
            else:
                by_leader[leaders[key]].append(key)
        futures = {leader: self._send(list_offsets_request(group, timestamp), leader)
                   for leader, group in by_leader.items()}
        for leader, future in futures.items():
            try:
                response = await self._answer(future, deadline, leader)
            except errors.KafkaError as error:
                results.update(dict.fromkeys(by_leader[leader], Failed.raised(error)))
                continue
            for topic in response.topics:
                for partition in topic.partitions:
                    refused = Failed.of(partition.error_code)
                    results[(topic.name, partition.partition_index)] = (
                        refused if refused is not None else partition.offset)
        return results


def _admin_client(**settings: Any) -> KafkaAdminClient:
    """A bootstrapped KafkaAdminClient; or its bootstrap's error, with nothing of that client left running.

    kafka-python 3.0.12's ``KafkaAdminClient.__init__`` (kafka/admin/client.py) makes its network client
    (``self._client = self.config['kafka_client'](...)``), starts that client's IO thread (``self._net.start()``: a
    daemon ``kafka-io-<client_id>`` running ``NetworkSelector.run_forever``) and only then bootstraps
    (``self._manager.bootstrap(...)``). A bootstrap that fails (a refused login, no server answering, a failed TLS
    handshake) raises out of ``__init__``: no client comes back to be closed, and its IO thread loops until the process
    ends, one per failed attempt. The ``kafka_client`` setting (what ``__init__`` makes its network client with) is
    the one handle on what it made: the client it made here is closed on any failure (``KafkaNetClient.close``: its
    connections, then its selector, whose ``close`` stops and joins the IO thread)."""
    made: list[KafkaNetClient] = []

    def network_client(**configs: Any) -> KafkaNetClient:
        made.append(KafkaNetClient(**configs))
        return made[-1]

    try:
        return KafkaAdminClient(**settings, kafka_client=network_client)
    except BaseException:
        for client in made:
            client.close()
        raise


#: kafka-python's errors for a login the broker refused.
_REFUSED_LOGINS = (errors.SaslAuthenticationFailedError, errors.UnsupportedSaslMechanismError,
                   errors.IllegalSaslStateError)


class _Refused(Exception):
    """Ends kafka-python's bootstrap at a refused login or TLS handshake (see :class:`_BootstrapTrouble`)."""


class _BootstrapTrouble(logging.Handler):
    """What kafka-python logged about bootstrap connections that failed, its only report of why (the bootstrap itself
    just times out): an answer it could not decode, or a refused login or TLS handshake (librdkafka's code for it,
    and the words).

    kafka-python's bootstrap retries a refused login until its timeout. Asking again changes nothing, so once its
    bootstrap loop reports a refusal, this handler raises :class:`_Refused` out of that loop's log call: the loop
    has closed the connection by then, and the bootstrap ends in under a second instead of an attempt. It may also
    never report one: Kafka closes the connection right after its refusal, and kafka-python's transport drops bytes
    read together with the close (the refusal among them), more often the busier the machine. So an attempt that
    failed for no reason it saw is asked of librdkafka, which reads the refusal (:meth:`ShareGroupProtocol._bootstrap`).
    """

    _LOGGERS = ("kafka.net.manager", "kafka.net.connection", "kafka.net.transport")
    #: kafka-python's bootstrap loop's message for a failed connection (kafka/net/manager.py), after its cleanup
    _BOOTSTRAP_FAILED = "Bootstrap connection to"

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.undecodable = False
        self.refused: tuple[int, str] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        for arg in record.args if isinstance(record.args, tuple) else ():
            self.undecodable = self.undecodable or isinstance(arg, errors.KafkaProtocolError)
            if self.refused is None and isinstance(arg, _REFUSED_LOGINS):
                self.refused = (KafkaError._AUTHENTICATION, str(arg))
            elif self.refused is None and isinstance(arg, errors.KafkaConnectionError) and "[SSL" in str(arg):
                self.refused = (KafkaError._SSL, str(arg))
        if self.refused is not None and str(record.msg).startswith(self._BOOTSTRAP_FAILED):
            raise _Refused(self.refused[1])

    @contextmanager
    def watching(self) -> Iterator[None]:
        loggers = [logging.getLogger(name) for name in self._LOGGERS]
        saved = [(logger.level, logger.propagate) for logger in loggers]
        for logger in loggers:
            logger.setLevel(logging.WARNING)
            logger.propagate = False  # seen here only, never printed
            logger.addHandler(self)
        try:
            yield
        finally:
            for logger, (level, propagate) in zip(loggers, saved, strict=True):
                logger.removeHandler(self)
                logger.setLevel(level)
                logger.propagate = propagate


