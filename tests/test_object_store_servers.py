"""The object-store servers of tests/object_stores.py do what the state store's tests rely on, with real delta-rs:
tables written and read, one winner per version, outages the state store reads as unreachable, and refused
credentials it reads as access denied."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import pyarrow as pa
import pytest
from azure.core.exceptions import ResourceExistsError
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from sharegroup_testing.azurite import Azurite
from sharegroup_testing.gcs_server import GcsServer
from sharegroup_testing.s3_server import S3Server
from sharegroup_testing.store_server import CommitCounts
from state_store.storage_errors import ACCESS_DENIED, UNREACHABLE, storage_problem
from tests.object_stores import azurite, gcs_server, s3_server  # noqa: F401

pytestmark = pytest.mark.object_store

#: One attempt per request: a store that is down fails a write at once instead of after object_store's backoff.
NO_RETRIES = {"max_retries": "0"}
ONE_ATTEMPT = CommitProperties(max_commit_retries=0)


@dataclass
class Store:
    """One server behind the few calls these tests make of either."""

    name: str
    uri: str  # a fresh table location in a fresh bucket or container
    options: dict[str, str]
    outage: Callable[[], AbstractContextManager[None]]
    credentials_required: Callable[[], AbstractContextManager[None]]
    #: None: the server checks no credential (fake-gcs-server)
    wrong_credentials: dict[str, str] | None


@pytest.fixture(params=["s3", "azure", "gcs"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "s3":
        s3: S3Server = request.getfixturevalue("s3_server")
        yield Store("s3", s3.uri(s3.create_bucket(), "state/t"), s3.storage_options(), s3.outage,
                    s3.credentials_required, {"aws_secret_access_key": "wrong-secret"})
    elif request.param == "azure":
        azure: Azurite = request.getfixturevalue("azurite")
        # Azurite always checks the account key: nothing to switch on
        yield Store("azure", azure.uri(azure.create_container(), "state/t"), azure.storage_options(),
                    azure.outage, nullcontext, {"azure_storage_account_key": azure.wrong_key()})
    else:
        gcs: GcsServer = request.getfixturevalue("gcs_server")
        yield Store("gcs", gcs.uri(gcs.create_bucket(), "state/t"), gcs.storage_options(), gcs.outage,
                    nullcontext, None)


@pytest.fixture(params=["s3", "gcs"])
def held_store(request: pytest.FixtureRequest) -> S3Server | GcsServer:
    """A server that can hold commit PUTs back until two writers have sent theirs (Azurite cannot)."""
    return request.getfixturevalue("s3_server" if request.param == "s3" else "gcs_server")


def rows(uri: str, options: dict[str, str]) -> list[int]:
    return sorted(DeltaTable(uri, storage_options=options).to_pyarrow_table().column("k").to_pylist())


def keys(*values: int) -> pa.Table:
    return pa.table({"k": pa.array(values, pa.int64())})


def _race(server: S3Server | GcsServer, uri: str, options: dict[str, str], values: tuple[int, int],
          commit_properties: CommitProperties | None) -> dict[int, str]:
    """Two writers append at once, their commit PUTs held until both reached the store: who "won" and who "lost"."""
    outcomes: dict[int, str] = {}

    def append(value: int) -> None:
        try:
            write_deltalake(uri, keys(value), mode="append", storage_options=options,
                            commit_properties=commit_properties)
            outcomes[value] = "won"
        except CommitFailedError:
            outcomes[value] = "lost"

    with server.commits_held():
        writers = [threading.Thread(target=append, args=(v,)) for v in values]
        for writer in writers:
            writer.start()
        deadline = time.monotonic() + 30
        while server.commits_waiting() < 2:
            assert time.monotonic() < deadline, "the two commits never both reached the store"
            time.sleep(0.01)
    for writer in writers:
        writer.join(30)
    return outcomes


def test_a_table_is_written_and_read_back(store: Store) -> None:
    write_deltalake(store.uri, keys(1, 2), storage_options=store.options)
    write_deltalake(store.uri, keys(3), mode="append", storage_options=store.options)
    assert DeltaTable(store.uri, storage_options=store.options).version() == 1
    assert rows(store.uri, store.options) == [1, 2, 3]


def test_a_second_writer_of_a_version_loses(store: Store) -> None:
    write_deltalake(store.uri, keys(0), storage_options=store.options)
    first, second = (DeltaTable(store.uri, storage_options=store.options) for _ in range(2))
    write_deltalake(first, keys(1), mode="append")
    with pytest.raises(CommitFailedError):
        write_deltalake(second, keys(2), mode="append", commit_properties=ONE_ATTEMPT)
    write_deltalake(second, keys(2), mode="append")  # with retries (the default): version 2
    assert DeltaTable(store.uri, storage_options=store.options).version() == 2
    assert rows(store.uri, store.options) == [0, 1, 2]


def test_the_store_decides_a_commit_race(held_store: S3Server | GcsServer) -> None:
    """Both writers list version 0 and PUT version 1 at once: the store takes one and 412s the other (moto behind
    the write lock: If-None-Match; fake-gcs-server: ifGenerationMatch=0).

    delta-rs checks the latest version before its PUT; holding the PUTs makes the store's compare-and-swap,
    not that check, decide. The retried conflict is counted, and no version has two winners.
    """
    bucket = held_store.create_bucket()
    uri, options = held_store.uri(bucket, "t"), held_store.storage_options()
    write_deltalake(uri, keys(0), storage_options=options)
    outcomes: dict[int, str] = {}
    for round_, properties in enumerate((ONE_ATTEMPT, None)):
        values = (10 * round_ + 1, 10 * round_ + 2)
        outcomes.update(_race(held_store, uri, options, values, properties))
        if properties is ONE_ATTEMPT:
            assert sorted(outcomes[v] for v in values) == ["lost", "won"]
        else:  # the loser retried at the next version
            assert [outcomes[v] for v in values] == ["won", "won"]
    assert held_store.counts(bucket) == CommitCounts(commits=4, conflicts=2)
    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 3
    winner = next(v for v in (1, 2) if outcomes[v] == "won")
    assert rows(uri, options) == sorted([0, winner, 11, 12])


def test_a_store_without_conditional_writes_lets_two_writers_win_one_version(s3_server: S3Server) -> None:  # noqa: F811
    """Why a store must honour If-None-Match: on one that overwrites, two writers that both saw version 1
    both "commit" version 2, and one writer's rows are gone. A writer that saw version 2 exists gives up
    without a PUT (delta-rs lists the log first), so only such a race shows it, and no check at start can."""
    bucket = s3_server.create_bucket()
    uri, options = s3_server.uri(bucket, "t"), s3_server.storage_options()
    write_deltalake(uri, keys(0), storage_options=options)
    with s3_server.conditional_writes_ignored():
        stale = DeltaTable(uri, storage_options=options)
        write_deltalake(uri, keys(1), mode="append", storage_options=options)
        with pytest.raises(CommitFailedError):
            write_deltalake(stale, keys(2), mode="append", commit_properties=ONE_ATTEMPT)
        outcomes = _race(s3_server, uri, options, (11, 12), ONE_ATTEMPT)
    assert outcomes == {11: "won", 12: "won"}
    assert s3_server.counts(bucket) == CommitCounts(commits=4, conflicts=0)
    assert DeltaTable(uri, storage_options=options).version() == 2
    assert len(rows(uri, options)) == 3, "both writers won version 2, and one of them lost its row"


def test_azurite_refuses_a_second_put_if_absent(azurite: Azurite) -> None:  # noqa: F811
    """The request a Delta commit on Azure is (Put Blob, If-None-Match: *): the second one of a blob is refused."""
    container = azurite.create_container()
    with azurite.blob_service() as service:
        blob = service.get_blob_client(container, "t/_delta_log/00000000000000000000.json")
        blob.upload_blob(b"first", overwrite=False)
        with pytest.raises(ResourceExistsError):
            blob.upload_blob(b"second", overwrite=False)
        assert blob.download_blob().readall() == b"first"


def test_the_gcs_server_refuses_a_second_put_if_absent(gcs_server: GcsServer) -> None:  # noqa: F811
    """The request a Delta commit on GCS is (XML API PUT, x-goog-if-generation-match: 0): the second one of an
    object is refused with 412, and the object keeps the first one's bytes."""
    bucket = gcs_server.create_bucket()
    host, port = gcs_server.endpoint.removeprefix("http://").split(":")
    statuses = []
    for body in (b"first", b"second"):
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        connection.request("PUT", f"/{bucket}/t%2F_delta_log%2F00000000000000000000.json", body=body,
                           headers={"x-goog-if-generation-match": "0", "Content-Type": "application/json"})
        response = connection.getresponse()
        statuses.append((response.status, response.read().decode()))
        connection.close()
    assert statuses[0][0] == 200, statuses
    assert statuses[1][0] == 412 and "PreconditionFailed" in statuses[1][1], statuses
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", f"/{bucket}/t%2F_delta_log%2F00000000000000000000.json")
    assert connection.getresponse().read() == b"first"
    connection.close()
    assert gcs_server.counts(bucket) == CommitCounts(commits=1, conflicts=1)


def test_an_outage_is_unreachable_and_the_data_survives_it(store: Store) -> None:
    options = {**store.options, **NO_RETRIES}
    write_deltalake(store.uri, keys(1), storage_options=options)
    table = DeltaTable(store.uri, storage_options=options)
    with store.outage():
        with pytest.raises((OSError, DeltaError)) as raised:
            write_deltalake(table, keys(2), mode="append")
        assert storage_problem(raised.value) == UNREACHABLE, raised.value
    write_deltalake(table, keys(3), mode="append")
    assert rows(store.uri, store.options) == [1, 3]


def test_wrong_credentials_are_access_denied(store: Store) -> None:
    if store.wrong_credentials is None:
        pytest.skip(f"{store.name}: the server checks no credential (object_store is told disable_oauth)")
    write_deltalake(store.uri, keys(1), storage_options=store.options)
    with store.credentials_required():
        with pytest.raises((OSError, DeltaError)) as raised:
            write_deltalake(store.uri, keys(2), mode="append", storage_options={**store.options,
                                                                                **store.wrong_credentials})
        assert storage_problem(raised.value) == ACCESS_DENIED, raised.value
        write_deltalake(store.uri, keys(3), mode="append", storage_options=store.options)
    assert rows(store.uri, store.options) == [1, 3]
