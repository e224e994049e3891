"""An S3 endpoint on loopback for the state store's tests: moto's server in a child process, its writes serialised.

moto (``moto[server]``) is the field's standard S3 stand-in, and here the place where delta-rs meets S3's
protocol: SigV4, path-style requests, ListObjectsV2, and the commit itself, a PUT of ``_delta_log/N.json``
with ``If-None-Match: *`` that S3 answers 412 when N exists (delta-rs's default on S3; no DynamoDB, no
option). moto checks that header and then stores the object in two steps with no lock between them, so two
concurrent PUTs of one key can both win: raw races over 300-1,000 contested keys from 2-4 processes gave 1 to
8 keys with two winners (and moto 500s), none once the writes went through one lock. This server wraps moto's
WSGI app so that every request but GET and HEAD holds that lock: the conditional PUT is then atomic, as
S3's is, and "two writers won one version" in a test is the project's bug, never moto's. The wrapper also
counts the commit PUTs it answers (:meth:`S3Server.counts`), so a contention test can say how many
conflicts delta-rs retried, and can hold commits back (:meth:`S3Server.commits_held`) to line two up.

What it does not emulate: S3's consistency model beyond one server's serialised writes (S3 is strongly
consistent for reads after writes and so is moto: nothing here stands for a weaker store), IAM beyond "any
key" or "this user's key" (:meth:`S3Server.require_credentials`: the user may do everything; no policies,
no bucket policies, no STS), throttling (no 503 SlowDown), latency, keep-alive connections (werkzeug
closes each after its response), multipart edge cases, S3 Express.

Why a child process, not a thread of the test's: some deltalake calls hold the GIL while their Rust code
waits on the network (``DeltaTable.alter.set_table_properties`` in deltalake 1.6, which the state store
uses), and a server in the same interpreter then never answers: the call times out (180 s by default)
against a server that is fine. The child is ``python -m sharegroup_testing.s3_server``; the test
process drives it over its stdin and stdout (one JSON line each way), and it exits when that pipe closes,
so an interrupted test run leaves no server behind. An outage (:meth:`S3Server.down`, :meth:`S3Server.up`)
closes only the listener: the child, and moto's buckets in it, live on, and the port stays the same.

A server's buckets are shared by every test that uses it: give each test its own bucket
(:meth:`S3Server.create_bucket` with no name makes a unique one).

>>> with S3Server() as s3:
...     bucket = s3.create_bucket()
...     write_deltalake(s3.uri(bucket, "state"), table, storage_options=s3.storage_options())
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sharegroup_testing.store_server import ChildChannel, CommitCounts, StoreServer

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment
    from werkzeug.serving import ThreadedWSGIServer

__all__ = ["S3Server", "S3ServerError"]

#: A Delta commit file, path-style (``/bucket/any/prefix/_delta_log/00000000000000000007.json``).
_COMMIT_PATH = re.compile(r"^/(?P<bucket>[^/]+)/(?:.+/)?_delta_log/\d{20}\.json$")


class S3ServerError(RuntimeError):
    """The S3 stand-in could not do what a test asked (start, come back up, create a bucket)."""


# --- the child process: moto behind the write lock --------------------------------------------------------------


class _SerialisedWrites:
    """WSGI middleware around moto: every request but GET and HEAD runs alone, and commit PUTs are counted.

    A write's response body is read inside the lock: the check-then-store of ``If-None-Match: *`` has to
    happen as one step, whenever moto does the storing.
    """

    def __init__(self, app: WSGIApplication):
        self.app = app
        self.lock = threading.Lock()
        self.commits_open = threading.Event()  # cleared: commit PUTs wait (S3Server.commits_held)
        self.commits_open.set()
        self.waiting = 0  # commit PUTs waiting for commits_open
        self.ignore_conditions = False  # a store without conditional writes (S3Server.conditional_writes_ignored)
        self._counts: dict[str, list[int]] = {}  # bucket -> [commits, conflicts]
        self._state_lock = threading.Lock()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        if method in ("GET", "HEAD"):
            return self.app(environ, start_response)
        statuses: list[str] = []

        def recording_start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
            statuses.append(status)
            return start_response(status, headers, exc_info)

        commit = _COMMIT_PATH.match(environ.get("PATH_INFO", "")) if method == "PUT" else None
        if commit and self.ignore_conditions:
            environ.pop("HTTP_IF_NONE_MATCH", None)  # stored over whatever is there, as such a store does
        if commit and not self.commits_open.is_set():
            with self._state_lock:
                self.waiting += 1
            self.commits_open.wait()
            with self._state_lock:
                self.waiting -= 1
        with self.lock:
            body = list(self.app(environ, recording_start_response))
        code = statuses[-1].split(" ", 1)[0] if statuses else ""
        if commit and code in ("200", "412"):
            with self._state_lock:
                self._counts.setdefault(commit["bucket"], [0, 0])[code == "412"] += 1
        return body

    def counts(self, bucket: str | None) -> CommitCounts:
        with self._state_lock:
            rows = [c for b, c in self._counts.items() if bucket is None or b == bucket]
        return CommitCounts(sum(c[0] for c in rows), sum(c[1] for c in rows))


def _listener(host: str, port: int, app: WSGIApplication) -> ThreadedWSGIServer:
    """werkzeug's threaded server with moto's request handler, without its line per request.

    werkzeug answers every response with ``Connection: close`` (no keep-alive), so closing this listener
    is a whole outage: no client holds a connection that would go on being answered.
    """
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import ThreadedWSGIServer

    class QuietHandler(MotoRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            pass  # a Delta commit is about 7 requests

    # bound here, not by werkzeug, which answers a port in use with sys.exit(1)
    listening = socket.create_server((host, port))
    try:
        return ThreadedWSGIServer(host, port, app, handler=QuietHandler, fd=listening.fileno())
    finally:
        listening.close()  # werkzeug holds a duplicate


class _Child:
    """The child's side: the listener, and the commands the test process sends."""

    def __init__(self, host: str, port: int):
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        self.host, self.port = host, port
        self.app = _SerialisedWrites(DomainDispatcherApplication(create_backend_app))
        self.server: ThreadedWSGIServer | None = None

    def up(self) -> int:
        if self.server is None:
            self.server = _listener(self.host, self.port, self.app)
            self.port = self.server.server_address[1]
            threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self.port

    def down(self) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()  # requests in flight are still answered; connections close after each response

    def command(self, name: str, argument: Any) -> Any:
        if name == "up":
            return self.up()
        if name == "down":
            return self.down()
        if name == "counts":
            return self.app.counts(argument)
        if name == "hold":
            self.app.commits_open.clear()
        elif name == "release":
            self.app.commits_open.set()
        elif name == "waiting":
            return self.app.waiting
        elif name == "conditions":
            self.app.ignore_conditions = not argument
        return None


def _serve(host: str, port: int) -> None:
    """The child's main: answer commands from stdin, one JSON line each, until stdin closes."""
    import logging

    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything moto prints goes to the log, not into the protocol
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    child = _Child(host, port)
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


class S3Server(StoreServer):
    """moto's S3 (and IAM) on ``host`` and a free port (or ``port``), in a child process, writes serialised.

    Credentials: the server makes an IAM user at start; :meth:`storage_options` gives its access key, which
    moto accepts like any other key until :meth:`require_credentials` switches checking on.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, region: str = "us-east-1", *,
                 startup_timeout_s: float = 60.0):
        self.host = host
        self.port = port
        self.region = region
        self.startup_timeout_s = startup_timeout_s
        self.directory: Path | None = None
        self._channel: ChildChannel | None = None
        self._log: IO[bytes] | None = None
        self._access_key: tuple[str, str] = ("", "")

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: delta-rs's ``aws_endpoint_url``, boto3's ``endpoint_url``."""
        if not self.port:
            raise S3ServerError("the S3 server was never started")
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        """The child's log (moto's warnings and tracebacks; no line per request)."""
        if self.directory is None:
            raise S3ServerError("the S3 server was never started")
        return self.directory / "s3-server.log"

    def start(self) -> S3Server:
        if self._channel is not None:
            return self
        self.directory = Path(tempfile.mkdtemp(prefix="sharegroup-s3-"))
        self._log = self.log_path.open("ab")
        self._channel = ChildChannel("the S3 server", S3ServerError, self.log_path)
        self._channel.process = subprocess.Popen(
            [sys.executable, "-m", "sharegroup_testing.s3_server", self.host, str(self.port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
        try:
            self.port = self._channel.reply(self.startup_timeout_s)
            self._access_key = self._make_user()
        except BaseException:
            self.stop()
            raise
        return self

    def _command(self, name: str, argument: Any = None) -> Any:
        if self._channel is None:
            raise S3ServerError("the S3 server is not running")
        return self._channel.command(name, argument)

    def _make_user(self) -> tuple[str, str]:
        """An IAM user allowed everything, and its access key (moto makes the key; it cannot be chosen)."""
        name = f"sharegroup-tests-{uuid.uuid4().hex[:8]}"
        iam = self._client("iam", ("sharegroup-setup", "sharegroup-setup"))
        iam.create_user(UserName=name)
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName=name, PolicyName="everything", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def _client(self, service: str, key: tuple[str, str] | None = None) -> Any:
        import boto3  # type: ignore[import-untyped]

        key_id, secret = key or self._access_key
        return boto3.client(service, endpoint_url=self.endpoint, region_name=self.region,
                            aws_access_key_id=key_id, aws_secret_access_key=secret)

    def down(self) -> None:
        """An outage: the listener closes, so clients meet a refused connection.

        The buckets stay (the child lives on); :meth:`up` listens on the same port again.
        """
        self._command("down")

    def up(self) -> None:
        """The end of an outage: the same port, the same buckets. Fails if another process took the port."""
        self._command("up")

    @contextmanager
    def commits_held(self) -> Iterator[None]:
        """Delta commit PUTs (``_delta_log/N.json``) wait inside the block and go on after it; all else is served.

        Lines commits up: two writers that both saw version N wait here with their PUTs of N+1
        (:meth:`commits_waiting` says when both are in), and after the block one wins and one gets 412,
        the store's compare-and-swap and not delta-rs's own check of the latest version deciding.
        """
        self._command("hold")
        try:
            yield
        finally:
            self._command("release")

    def commits_waiting(self) -> int:
        """How many commit PUTs wait inside :meth:`commits_held`."""
        return int(self._command("waiting"))

    @contextmanager
    def conditional_writes_ignored(self) -> Iterator[None]:
        """Inside the block the server is an S3-compatible store without conditional writes: a commit PUT's
        ``If-None-Match: *`` is dropped, so the PUT overwrites a version that exists instead of getting 412."""
        self._command("conditions", False)
        try:
            yield
        finally:
            self._command("conditions", True)

    def counts(self, bucket: str | None = None) -> CommitCounts:
        """Delta commit PUTs answered so far, in one bucket or all: stored, and refused as conflicts (412)."""
        return CommitCounts(*self._command("counts", bucket))

    def stop(self) -> None:
        """End the child (its buckets go with it); its log stays unless empty."""
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
        if self._log is not None:
            self._log.close()
            self._log = None
            if self.directory is not None and not self.log_path.stat().st_size:
                shutil.rmtree(self.directory, ignore_errors=True)  # nothing to read afterwards

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket and return its name; ``None``: a new unique one."""
        name = name or f"sharegroup-{uuid.uuid4().hex[:12]}"
        try:
            self._client("s3").create_bucket(Bucket=name)
        except Exception as exc:  # botocore's: the bucket exists, or the server is down
            raise S3ServerError(f"cannot create bucket {name!r} at {self.endpoint}: {exc}") from exc
        return name

    @staticmethod
    def uri(bucket: str, path: str = "") -> str:
        """``s3://bucket/path``, the location delta-rs opens with :meth:`storage_options`."""
        return f"s3://{bucket}/{path.lstrip('/')}"

    def storage_options(self, **overrides: str) -> dict[str, str]:
        """delta-rs storage options for this server, ``overrides`` on top (``aws_secret_access_key="wrong"``).

        Nothing about commits: delta-rs 1.6 sends ``If-None-Match: *`` on S3 by default
        (``aws_conditional_put=etag``), which this server answers atomically.
        """
        key_id, secret = self._access_key
        return {"aws_endpoint_url": self.endpoint, "aws_allow_http": "true", "aws_region": self.region,
                "aws_access_key_id": key_id, "aws_secret_access_key": secret, **overrides}

    def require_credentials(self, required: bool = True) -> None:
        """Switch moto's authentication on (only :meth:`storage_options`'s key is accepted) or off (any key)."""
        # moto's server-mode switch, the number of requests before authentication starts (0: at once;
        # inf: never), as a text body; moto answers 500 without the Content-Type
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth", method="POST",
                                         data=b"0" if required else b"inf", headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=30) as response:
            if response.status != 200:
                raise S3ServerError(f"moto refused to switch authentication: HTTP {response.status}")

    @contextmanager
    def credentials_required(self) -> Iterator[None]:
        """``with s3.credentials_required():`` authentication on inside the block, off again after it."""
        self.require_credentials(True)
        try:
            yield
        finally:
            self.require_credentials(False)


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
