"""Locations of the source's Delta tables: accepted forms, refused forms, and checks made before joining.

Object-store failures are staged with a local HTTP endpoint that answers every S3 request 403
(a refused credential), and with a closed port (a store that cannot be reached).
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sharegroup_source.driver.micro_batch import MicroBatchDriver
from sharegroup_source.errors import OptionError
from sharegroup_source.locations import check_location, resolve_location
from sharegroup_source.options import SourceOptions, StateOptions
from sharegroup_testing.apache_kafka import free_port
from state_store import StateStore, StateStoreError

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "kafka.group.id": "g", "subscribe": "t"}


class _Deny(http.server.BaseHTTPRequestHandler):
    """Every S3 request refused, as S3 answers a wrong or missing credential."""

    def _deny(self) -> None:
        body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
                b"<Message>Access Denied</Message></Error>")
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            with contextlib.suppress(OSError):  # the client gave up first
                self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _deny

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def denying_s3() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Deny)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def s3_options(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": SECRET}


# -- forms accepted and refused at load() ----------------------------------------------------------
@pytest.mark.parametrize("value", ["/lake/state", "relative/state", "/dbfs/tmp/state", "/Volumes/main/sg/state",
                                   "s3://bucket/state", "s3a://bucket/state", "gs://bucket/state",
                                   "abfss://container@account.dfs.core.windows.net/state", "hdfs://nn:8020/state",
                                   "file:///tmp/state"])
def test_local_paths_and_delta_rs_uris_are_kept(value: str) -> None:
    assert resolve_location("stateLocation", value) == value


def test_file_uri_without_authority_is_a_local_path() -> None:
    assert resolve_location("stateLocation", "file:/tmp/state") == "/tmp/state"


def test_dbfs_is_refused_where_there_is_no_dbfs_mount(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"option 'stateLocation': dbfs:/tmp/sg-state is a DBFS path.*mount"):
        SourceOptions.parse({**BASE, "stateLocation": "dbfs:/tmp/sg-state"})
    with pytest.raises(OptionError, match="option 'deadLetterLocation'"):
        resolve_location("deadLetterLocation", "dbfs:/tmp/dead", dbfs_mount=tmp_path / "no-mount")


def test_dbfs_maps_to_the_fuse_mount_where_it_exists(tmp_path: Path) -> None:
    mount = tmp_path / "dbfs"
    mount.mkdir()
    assert resolve_location("stateLocation", "dbfs:/tmp/sg-state", dbfs_mount=mount) == str(mount / "tmp/sg-state")
    assert resolve_location("stateLocation", "dbfs:///tmp/sg-state", dbfs_mount=mount) == str(mount / "tmp/sg-state")


@pytest.mark.parametrize(("value", "problem"), [("gopher://host/state", "scheme 'gopher:'"),
                                                ("s3:/bucket/state", "not a complete URI"),
                                                ("state:v1", "scheme 'state:'"),
                                                ("s3://", "not a complete URI"),
                                                ("gcs://bucket/state", r"write gs://bucket/state for Google Cloud")])
def test_other_schemes_are_refused_at_load_naming_the_option(value: str, problem: str) -> None:
    with pytest.raises(OptionError, match=rf"option 'stateLocation': .*{problem}"):
        SourceOptions.parse({**BASE, "stateLocation": value})
    with pytest.raises(OptionError, match=rf"option 'deadLetterLocation': .*{problem}"):
        SourceOptions.parse({**BASE, "stateLocation": "/tmp/s", "deadLetterLocation": value})
    with pytest.raises(OptionError, match="option 'stateLocation'"):
        StateOptions.parse({**BASE, "stateLocation": value})  # acknowledge(..., options=...) parses the same way


def test_the_group_location_follows_the_same_rules(tmp_path: Path) -> None:
    delta = {**BASE, "stateLocation": str(tmp_path / "state"), "coordinator": "delta"}
    with pytest.raises(OptionError, match=r"option 'groupLocation': dbfs:/tmp/group is a DBFS path"):
        SourceOptions.parse({**delta, "groupLocation": "dbfs:/tmp/group"})
    with pytest.raises(OptionError, match=r"option 'groupLocation': .*scheme 'gopher:'"):
        SourceOptions.parse({**delta, "groupLocation": "gopher://host/group"})
    options = SourceOptions.parse({**delta, "groupLocation": "/proc/nope/group"})
    with pytest.raises(OptionError, match=r"option 'groupLocation': cannot create and write /proc/nope/group"):
        MicroBatchDriver(options)


# -- checked before the source joins the share group -----------------------------------------------
def test_an_unwritable_state_location_fails_before_joining(tmp_path: Path) -> None:
    """The bootstrap server is a closed port: any contact with Kafka first would take the metadata timeout."""
    options = SourceOptions.parse({**BASE, "stateLocation": "/proc/nope/state"})
    started = time.monotonic()
    with pytest.raises(OptionError, match=r"option 'stateLocation': cannot create and write /proc/nope/state"):
        MicroBatchDriver(options)
    assert time.monotonic() - started < 5


def test_an_unwritable_dead_letter_location_fails_before_joining(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    options = SourceOptions.parse({**BASE, "stateLocation": str(tmp_path / "state"),
                                   "deadLetterLocation": str(blocker / "dead_letters")})
    with pytest.raises(OptionError, match=r"option 'deadLetterLocation': cannot create and write"):
        MicroBatchDriver(options)


def test_a_writable_location_is_left_as_it_was(tmp_path: Path) -> None:
    check_location("stateLocation", str(tmp_path / "state"))
    assert [p.name for p in (tmp_path / "state").iterdir()] == []  # the probe file is gone


def test_refused_credentials_fail_before_joining_naming_the_option(denying_s3: str) -> None:
    storage = {f"stateStorage.{k}": v for k, v in s3_options(denying_s3).items()}
    options = SourceOptions.parse({**BASE, "stateLocation": "s3://bucket/state", **storage})
    with pytest.raises(OptionError) as refused:
        MicroBatchDriver(options)
    message = str(refused.value)
    assert "option 'stateLocation': s3://bucket/state: access denied or no credentials: check the storage " \
           "options (stateStorage.*)" in message
    assert SECRET not in message and "corrupt" not in message


def test_dead_letter_location_uses_the_storage_options(tmp_path: Path, denying_s3: str) -> None:
    storage = {f"stateStorage.{k}": v for k, v in s3_options(denying_s3).items()}
    options = SourceOptions.parse({**BASE, "stateLocation": str(tmp_path / "state"),
                                   "deadLetterLocation": "s3://bucket/dead_letters", **storage})
    with pytest.raises(OptionError, match=r"option 'deadLetterLocation': .*access denied or no credentials"):
        MicroBatchDriver(options)


def test_an_unreachable_store_is_called_unreachable() -> None:
    options = s3_options(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(OptionError, match=r"option 'stateLocation': .*the store cannot be reached") as refused:
        check_location("stateLocation", "s3://bucket/state", options)
    assert SECRET not in str(refused.value)


def test_the_state_store_never_calls_refused_access_corrupt(denying_s3: str) -> None:
    store = StateStore("s3://bucket/state", storage_options=s3_options(denying_s3))
    with pytest.raises(StateStoreError) as refused:
        store.ledger.get("g", 1)
    message = str(refused.value)
    assert "access denied or no credentials: check the storage options (stateStorage.*)" in message
    assert "corrupt" not in message and SECRET not in message
