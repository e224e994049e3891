"""A Google Cloud Storage endpoint on loopback for the state store's tests: fake-gcs-server behind an XML API front.

delta-rs reaches GCS through the Rust ``object_store`` crate, which speaks GCS's XML API: ``PUT /bucket/key``
to write, ``GET``/``HEAD`` of the same to read, ``GET /bucket?list-type=2`` to list, ``DELETE`` to delete.
A Delta commit is a ``PUT`` of ``_delta_log/N.json`` with ``x-goog-if-generation-match: 0`` (object_store's
put-if-absent), which GCS refuses with 412 when N exists: that precondition is what makes a commit on GCS
atomic, and what this server has to decide the way GCS does.

No GCS emulator here does all of it. fake-gcs-server (the field's standard one, a Go module) answers
the XML API's reads, lists and deletes, and honours ``ifGenerationMatch=0`` on its JSON API's upload in
one check-and-insert under its memory backend's lock; but it has no XML API object upload: its route
for ``PUT /bucket/key`` takes only signed-URL or JSON-API uploads, and answers object_store's commit
``400 invalid uploadType`` (fsouza/fake-gcs-server#331, open; the fork object_store's CI runs stores
the object with no precondition at all, so two writers of one version both win, and the Go module
proxy does not serve it). gcp-storage-emulator (PyPI) stores an XML ``PUT`` without reading any
precondition, and serves no XML list: a commit on it is not atomic either (docs/object-stores.md).

So this module runs fake-gcs-server (``-backend memory``) and, in front of it, a small proxy in a child
process, the endpoint delta-rs is given. The proxy passes every request through unchanged but these:

- ``PUT /bucket/key`` becomes the JSON API's media upload of the same bytes, with the request's
  ``x-goog-if-generation-match`` as ``ifGenerationMatch``: fake-gcs-server, not the proxy, decides
  whether a version exists, and the proxy answers as GCS's XML API does (200 with ``ETag`` and
  ``x-goog-generation``, 412 ``PreconditionFailed``, 404 ``NoSuchBucket``);
- a list with ``start-after`` (object_store's list with an offset) drops the keys up to it, which
  fake-gcs-server's XML list ignores, and a list of a bucket that does not exist answers 404
  ``NoSuchBucket`` as GCS does (fake-gcs-server: 500, which object_store retries for minutes);
- a multipart upload (``POST ?uploads``, ``PUT ?partNumber&uploadId``, ``POST ?uploadId``, ``DELETE
  ?uploadId``: delta-rs's ``DeltaStorageHandler`` writes every file so, the state store's whole-table rewrites
  among them) keeps its parts in the proxy and uploads the joined object when it completes.

It counts the commit PUTs it answered (:meth:`GcsServer.counts`) and can hold them back
(:meth:`GcsServer.commits_held`) to line two writers up, as the S3 server does. An outage
(:meth:`GcsServer.down`, :meth:`GcsServer.up`) closes the proxy's listener: fake-gcs-server and its
objects live on, and the port stays the same. The proxy answers one request per connection
(HTTP/1.0), so a closed listener is a whole outage.

What it does not emulate: authentication (object_store is told ``disable_oauth``; fake-gcs-server
checks no token, so a wrong credential is not refused), the XML API's copies (refused with 400
``NotImplemented``, not a 5xx object_store would retry for minutes), conditional reads, throttling (429),
latency.

Where it comes from: ``fake-gcs-server`` built from the Go module proxy by ``make gcs`` (``go install``,
the version the Makefile pins, into ``.venv/bin``); ``SHAREGROUP_FAKE_GCS`` names another binary.
Like the S3 server's, the proxy is a child process, not a thread: some deltalake calls hold the GIL
while they wait on the network, and a server in the same interpreter would never answer them.

A server's buckets are shared by every test that uses it: give each test its own bucket
(:meth:`GcsServer.create_bucket` with no name makes a unique one).

>>> with GcsServer() as gcs:
...     bucket = gcs.create_bucket()
...     write_deltalake(gcs.uri(bucket, "state"), table, storage_options=gcs.storage_options())
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from sharegroup_testing.apache_kafka import free_port, orphan_guard
from sharegroup_testing.store_server import ChildChannel, CommitCounts, StoreServer

__all__ = ["FAKE_GCS_ENV", "GcsServer", "GcsServerError", "GcsServerMissing", "fake_gcs_server"]

#: Overrides the ``fake-gcs-server`` executable (default: the one ``make gcs`` installs into .venv/bin).
FAKE_GCS_ENV = "SHAREGROUP_FAKE_GCS"
_REPO_FAKE_GCS = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "fake-gcs-server"

#: A Delta commit file's object name (``any/prefix/_delta_log/00000000000000000007.json``).
_COMMIT_NAME = re.compile(r"^(?:.+/)?_delta_log/\d{20}\.json$")
#: Headers that belong to one hop, not to the request or response passed on.
_HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade",
                          "host", "content-length", "server", "date"})


class GcsServerError(RuntimeError):
    """The GCS stand-in could not do what a test asked (start, come back up, create a bucket)."""


class GcsServerMissing(GcsServerError):
    """``fake-gcs-server`` is not installed: ``make gcs`` builds it."""


def fake_gcs_server() -> Path:
    """The ``fake-gcs-server`` executable; fails with the command that installs it."""
    path = Path(os.environ.get(FAKE_GCS_ENV) or _REPO_FAKE_GCS)
    if not os.access(path, os.X_OK):
        raise GcsServerMissing(f"no fake-gcs-server at {path}: run `make gcs` (go install from the Go module proxy, "
                               f"the version the Makefile pins; needs Go) or set {FAKE_GCS_ENV}")
    return path


# --- the child process: the XML API front ------------------------------------------------------------------------


class _FrontState:
    """What the front's request threads share: where fake-gcs-server is, held commits, and the counts."""

    def __init__(self, upstream_port: int):
        self.upstream = ("127.0.0.1", upstream_port)
        self.commits_open = threading.Event()  # cleared: commit PUTs wait (GcsServer.commits_held)
        self.commits_open.set()
        self.waiting = 0  # commit PUTs waiting for commits_open
        self.uploads = _Uploads()
        self._counts: dict[str, list[int]] = {}  # bucket -> [commits, conflicts]
        self._lock = threading.Lock()

    def hold(self) -> None:
        with self._lock:
            self.waiting += 1
        self.commits_open.wait()
        with self._lock:
            self.waiting -= 1

    def count(self, bucket: str, refused: bool) -> None:
        with self._lock:
            self._counts.setdefault(bucket, [0, 0])[refused] += 1

    def counts(self, bucket: str | None) -> CommitCounts:
        with self._lock:
            rows = [c for b, c in self._counts.items() if bucket is None or b == bucket]
        return CommitCounts(sum(c[0] for c in rows), sum(c[1] for c in rows))


class _Uploads:
    """Multipart uploads begun and not yet completed or aborted: their parts, in the front's memory."""

    def __init__(self) -> None:
        self._parts: dict[tuple[str, str, str], dict[int, bytes]] = {}
        self._lock = threading.Lock()

    def begin(self, bucket: str, name: str) -> str:
        upload_id = uuid.uuid4().hex
        with self._lock:
            self._parts[(bucket, name, upload_id)] = {}
        return upload_id

    def part(self, bucket: str, name: str, upload_id: str, number: int, body: bytes) -> str | None:
        """Keep a part; its ETag, or None when no such upload was begun."""
        with self._lock:
            parts = self._parts.get((bucket, name, upload_id))
            if parts is None:
                return None
            parts[number] = body
        return hashlib.md5(body).hexdigest()

    def complete(self, bucket: str, name: str, upload_id: str, numbers: list[int] | None) -> bytes | None:
        """End an upload: the listed parts joined in order (None: aborted), or None when no such upload was begun."""
        with self._lock:
            parts = self._parts.pop((bucket, name, upload_id), None)
        if parts is None or numbers is None:
            return None
        return b"".join(parts[n] for n in numbers)


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    #: delta-rs reads a table's commit files many at once; socketserver's backlog of 5 overflowed, and the
    #: dropped connections came back a second later (a table of 30 commits took 4 s to open instead of 0.1)
    request_queue_size = 1024
    state: _FrontState


def _error_body(code: str, message: str) -> bytes:
    """An XML API error, as GCS words it (object_store puts the body into its error's text)."""
    return (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message>"
            f"</Error>").encode()


def _after(listing: bytes, start_after: str) -> bytes:
    """A ``ListBucketResult`` without the keys and prefixes up to ``start_after`` (GCS's ``start-after``)."""
    root = ElementTree.fromstring(listing)
    dropped = [child for child in root
               if (child.tag == "Contents" and (child.findtext("Key") or "") <= start_after)
               or (child.tag == "CommonPrefixes" and (child.findtext("Prefix") or "") <= start_after)]
    for child in dropped:
        root.remove(child)
    key_count = root.find("KeyCount")
    if key_count is not None:
        key_count.text = str(len(root.findall("Contents")))
    return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)


class _Front(BaseHTTPRequestHandler):
    """One request: passed on to fake-gcs-server, or translated (module doc)."""

    server: _Listener
    protocol_version = "HTTP/1.0"  # one request per connection: an outage leaves no connection being answered

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a Delta commit is about 7 requests

    # -- the requests object_store sends

    def do_GET(self) -> None:
        bucket, name, query = self._target()
        if name is None:
            self._list(bucket, query)
        else:
            self._relay(*self._upstream("GET", self.path, headers=self._passed_headers()))

    def do_HEAD(self) -> None:
        self._relay(*self._upstream("HEAD", self.path, headers=self._passed_headers()), head=True)

    def do_POST(self) -> None:
        bucket, name, query = self._target()
        asked = parse_qs(query, keep_blank_values=True)
        uploads = self.server.state.uploads
        if name is not None and "uploads" in asked:  # a multipart upload begins
            self._discard_body()
            upload_id = uploads.begin(bucket, name)
            self._respond(200, [("Content-Type", "application/xml")], (
                f"<?xml version='1.0' encoding='UTF-8'?><InitiateMultipartUploadResult><Bucket>{bucket}</Bucket>"
                f"<Key>{name}</Key><UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>").encode())
        elif name is not None and "uploadId" in asked:  # and completes: the parts become the object
            body = self._body()
            parts = uploads.complete(bucket, name, asked["uploadId"][0],
                                     [int(p.findtext("PartNumber") or 0) for p in ElementTree.fromstring(body)])
            if parts is None:
                self._error(404, "NoSuchUpload", "The specified multipart upload does not exist.")
            else:
                self._store(bucket, name, parts, None, complete=True)
        else:
            self._discard_body()
            self._error(400, "NotImplemented", "The suite's GCS front emulates no other XML API POST.")

    def do_PUT(self) -> None:
        bucket, name, query = self._target()
        if name is None or "x-goog-copy-source" in self.headers:
            self._discard_body()
            self._error(400, "NotImplemented", "The suite's GCS front emulates object uploads only (no copies).")
            return
        if "Content-Length" not in self.headers:
            self._error(411, "MissingContentLength", "You must provide the Content-Length HTTP header.")
            return
        body = self._body()
        asked = parse_qs(query)
        if "uploadId" in asked:  # a part of a multipart upload
            etag = self.server.state.uploads.part(bucket, name, asked["uploadId"][0], int(asked["partNumber"][0]), body)
            if etag is None:
                self._error(404, "NoSuchUpload", "The specified multipart upload does not exist.")
            else:
                self._respond(200, [("ETag", f'"{etag}"')])
            return
        self._store(bucket, name, body, self.headers.get("x-goog-if-generation-match"))

    def do_DELETE(self) -> None:
        bucket, name, query = self._target()
        upload_id = parse_qs(query).get("uploadId")
        if name is not None and upload_id:  # a multipart upload aborted
            self.server.state.uploads.complete(bucket, name, upload_id[0], None)
            self._respond(204, [])
        else:
            self._relay(*self._upstream("DELETE", self.path, headers=self._passed_headers()))

    # -- the parts

    def _store(self, bucket: str, name: str, body: bytes, match: str | None, complete: bool = False) -> None:
        """Upload an object through the JSON API, ``match`` its ``ifGenerationMatch``, and answer as the XML API."""
        state = self.server.state
        commit = _COMMIT_NAME.match(name) is not None
        if commit and not state.commits_open.is_set():
            state.hold()
        query = {"uploadType": "media", "name": name}
        if match is not None:
            query["ifGenerationMatch"] = match
        status, _, data = self._upstream(
            "POST", f"/upload/storage/v1/b/{quote(bucket, safe='')}/o?{urlencode(query)}", body,
            {"Content-Type": self.headers.get("Content-Type", "application/octet-stream")})
        if commit and status in (200, 412):
            state.count(bucket, refused=status == 412)
        if status == 200:
            stored = json.loads(data)
            etag = f'"{stored["etag"]}"'
            result = b""
            if complete:
                result = (f"<?xml version='1.0' encoding='UTF-8'?><CompleteMultipartUploadResult><Bucket>{bucket}"
                          f"</Bucket><Key>{name}</Key><ETag>{etag}</ETag></CompleteMultipartUploadResult>").encode()
            self._respond(200, [("ETag", etag), ("x-goog-generation", str(stored["generation"]))], result)
        elif status == 412:
            self._error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold.")
        elif status == 404:
            self._error(404, "NoSuchBucket", "The specified bucket does not exist.")
        else:
            self._error(status, "InternalError", data.decode("utf-8", "replace"))

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _target(self) -> tuple[str, str | None, str]:
        """The bucket, the object name (None: the bucket itself) and the query of the request."""
        split = urlsplit(self.path)
        bucket, _, name = split.path.lstrip("/").partition("/")
        return unquote(bucket), (unquote(name) if name else None), split.query

    def _list(self, bucket: str, query: str) -> None:
        status, headers, data = self._upstream("GET", self.path, headers=self._passed_headers())
        if status != 200:
            exists, _, _ = self._upstream("GET", f"/storage/v1/b/{quote(bucket, safe='')}")
            if exists == 404:
                self._error(404, "NoSuchBucket", "The specified bucket does not exist.")
                return
        start_after = parse_qs(query).get("start-after")
        if status == 200 and start_after:
            data = _after(data, start_after[0])
        self._relay(status, headers, data)

    def _passed_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}

    def _upstream(self, method: str, path: str, body: bytes | None = None,
                  headers: dict[str, str] | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*self.server.state.upstream, timeout=120)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    def _relay(self, status: int, headers: list[tuple[str, str]], data: bytes, head: bool = False) -> None:
        passed = [(k, v) for k, v in headers if k.lower() not in _HOP_HEADERS]
        if head:  # a HEAD's Content-Length is the object's size, not this empty body's
            passed += [(k, v) for k, v in headers if k.lower() == "content-length"]
        self._respond(status, passed, b"" if head else data, length=not head)

    def _error(self, status: int, code: str, message: str) -> None:
        self._respond(status, [("Content-Type", "application/xml; charset=UTF-8")], _error_body(code, message))

    def _respond(self, status: int, headers: list[tuple[str, str]], data: bytes = b"", length: bool = True) -> None:
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        if length:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _discard_body(self) -> None:
        with suppress(ValueError):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))


class _Child:
    """The child's side: the front's listener, and the commands the test process sends."""

    def __init__(self, host: str, port: int, upstream_port: int):
        self.host, self.port = host, port
        self.state = _FrontState(upstream_port)
        self.server: _Listener | None = None

    def up(self) -> int:
        if self.server is None:
            self.server = _Listener((self.host, self.port), _Front)
            self.server.state = self.state
            self.port = self.server.server_address[1]
            threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self.port

    def down(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()  # requests in flight are still answered; each connection closes after its response

    def command(self, name: str, argument: Any) -> Any:
        if name == "up":
            return self.up()
        if name == "down":
            return self.down()
        if name == "counts":
            return self.state.counts(argument)
        if name == "hold":
            self.state.commits_open.clear()
        elif name == "release":
            self.state.commits_open.set()
        elif name == "waiting":
            return self.state.waiting
        return None


def _serve(host: str, port: int, upstream_port: int) -> None:
    """The child's main: answer commands from stdin, one JSON line each, until stdin closes."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed goes to the log, not into the protocol
    child = _Child(host, port, upstream_port)
    protocol.write(json.dumps({"ok": child.up()}) + "\n")
    for line in sys.stdin:
        name, argument = json.loads(line)
        try:
            reply = {"ok": child.command(name, argument)}
        except Exception as exc:  # reported to the test process, which raises it there
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        protocol.write(json.dumps(reply) + "\n")
    child.down()


# --- the test process's side ------------------------------------------------------------------------------------


class GcsServer(StoreServer):
    """fake-gcs-server and its XML API front on ``127.0.0.1`` and free ports (module doc).

    fake-gcs-server dies with the thread that started it (``setpriv --pdeathsig``), the front when the
    test process closes its stdin or dies: start it from a thread that lives as long as it should.
    """

    def __init__(self, *, startup_timeout_s: float = 60.0):
        self.host = "127.0.0.1"
        self.port = 0  # the front's: the endpoint delta-rs is given
        self.upstream_port = 0  # fake-gcs-server's
        self.startup_timeout_s = startup_timeout_s
        self.directory: Path | None = None
        self._upstream: subprocess.Popen[bytes] | None = None
        self._front: ChildChannel | None = None
        self._log: IO[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: the front, object_store's ``gcs_base_url``."""
        if not self.port:
            raise GcsServerError("the GCS server was never started")
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        """fake-gcs-server's and the front's log (warnings and tracebacks; no line per request)."""
        if self.directory is None:
            raise GcsServerError("the GCS server was never started")
        return self.directory / "gcs-server.log"

    def start(self) -> GcsServer:
        if self._front is not None:
            return self
        binary = fake_gcs_server()
        self.directory = Path(tempfile.mkdtemp(prefix="sharegroup-gcs-"))
        (self.directory / "seed").mkdir()
        self._log = self.log_path.open("ab")
        self.upstream_port = free_port()
        try:
            self._upstream = subprocess.Popen(
                [*orphan_guard(), str(binary), "-scheme", "http", "-host", self.host, "-port", str(self.upstream_port),
                 "-public-host", f"{self.host}:{self.upstream_port}", "-backend", "memory",
                 "-data", str(self.directory / "seed"), "-log-level", "warn"],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
            self._wait_for_upstream()
            self._front = ChildChannel("the GCS front", GcsServerError, self.log_path)
            self._front.process = subprocess.Popen(
                [sys.executable, "-m", "sharegroup_testing.gcs_server", self.host, "0",
                 str(self.upstream_port)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
            self.port = self._front.reply(self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_for_upstream(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._upstream is None or self._upstream.poll() is not None:
                raise GcsServerError(f"fake-gcs-server exited while starting; see {self.log_path}")
            try:
                socket.create_connection((self.host, self.upstream_port), timeout=1).close()
                return
            except OSError:  # not listening yet
                time.sleep(0.05)
        raise GcsServerError(f"fake-gcs-server did not listen on {self.host}:{self.upstream_port} within "
                             f"{self.startup_timeout_s:.0f}s; see {self.log_path}")

    def _command(self, name: str, argument: Any = None) -> Any:
        if self._front is None:
            raise GcsServerError("the GCS front is not running")
        return self._front.command(name, argument)

    def down(self) -> None:
        """An outage: the front's listener closes, so clients meet a refused connection.

        fake-gcs-server and its objects stay; :meth:`up` listens on the same port again.
        """
        self._command("down")

    def up(self) -> None:
        """The end of an outage: the same port, the same objects. Fails if another process took the port."""
        self._command("up")

    @contextmanager
    def commits_held(self) -> Iterator[None]:
        """Delta commit PUTs (``_delta_log/N.json``) wait inside the block and go on after it; all else is served.

        Two writers that both saw version N wait here with their PUTs of N+1 (:meth:`commits_waiting`
        says when both are in); after the block fake-gcs-server stores one and refuses the other (412).
        """
        self._command("hold")
        try:
            yield
        finally:
            self._command("release")

    def commits_waiting(self) -> int:
        """How many commit PUTs wait inside :meth:`commits_held`."""
        return int(self._command("waiting"))

    def counts(self, bucket: str | None = None) -> CommitCounts:
        """Delta commit PUTs answered so far, in one bucket or all: stored, and refused as conflicts (412)."""
        return CommitCounts(*self._command("counts", bucket))

    def stop(self) -> None:
        """End the front and fake-gcs-server (the objects go with it); the log stays unless empty."""
        front, self._front = self._front, None
        if front is not None:
            front.close()
        upstream, self._upstream = self._upstream, None
        if upstream is not None and upstream.poll() is None:
            upstream.kill()
            upstream.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None
            if self.directory is not None and not self.log_path.stat().st_size:
                shutil.rmtree(self.directory, ignore_errors=True)  # nothing to read afterwards

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (JSON API, straight to fake-gcs-server) and return its name; ``None``: a new unique one."""
        name = name or f"sharegroup-{uuid.uuid4().hex[:12]}"
        connection = http.client.HTTPConnection(self.host, self.upstream_port, timeout=30)
        try:
            connection.request("POST", "/storage/v1/b", body=json.dumps({"name": name}),
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            body = response.read()
        except OSError as exc:
            raise GcsServerError(f"cannot create bucket {name!r}: {exc}") from exc
        finally:
            connection.close()
        if response.status != 200:
            raise GcsServerError(f"cannot create bucket {name!r}: HTTP {response.status} {body[:200]!r}")
        return name

    @staticmethod
    def uri(bucket: str, path: str = "") -> str:
        """``gs://bucket/path``, the location delta-rs opens with :meth:`storage_options`."""
        return f"gs://{bucket}/{path.lstrip('/')}"

    def storage_options(self, **overrides: str) -> dict[str, str]:
        """delta-rs storage options for this server, ``overrides`` on top.

        One option: a service-account key (inline JSON) whose ``gcs_base_url`` is the front and whose
        ``disable_oauth`` leaves out the token exchange. Its key fields are empty: nothing checks them.
        Nothing about commits: object_store sends ``x-goog-if-generation-match: 0`` on every commit.
        """
        key = {"gcs_base_url": self.endpoint, "disable_oauth": True, "client_email": "", "private_key": "",
               "private_key_id": ""}
        return {"google_service_account_key": json.dumps(key), **overrides}


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
