"""An Azure Blob Storage endpoint on loopback for the state store's tests: Azurite, Microsoft's own emulator.

Azurite is what Azure's SDKs test against, and it answers the one request a Delta commit on Azure depends
on the way Azure does: delta-rs commits ``_delta_log/N.json`` with Put Blob and ``If-None-Match: *``, and
Azurite refuses it when the blob exists (409 BlobAlreadyExists) in one synchronous check-and-insert on
Node's single thread, so exactly one writer wins a version, with no lock of ours around it (unlike moto,
see :mod:`~sharegroup_testing.s3_server`). It checks the shared key of every request: a wrong key
gets 403 AuthorizationFailure, so there is no switch to turn authentication on.

What it does not emulate: ADLS Gen2's hierarchical namespace (the dfs endpoint, atomic rename, ACLs;
delta-rs needs none of them, and ``abfss://`` URIs reach the blob endpoint here), Entra ID (OAuth) and
managed identities (use the account key or a SAS), throttling (no 503 ServerBusy), latency, geo-replication.
It counts commits and conflicts (:meth:`Azurite.counts`) from its own request log (``--debug``): the Put
Blob of each ``_delta_log/N.json`` and whether it was stored (201) or refused (409).

Where it comes from: ``azurite-blob`` from ``tools/node_modules``, which ``make tools`` installs with
``npm ci`` at the exact version ``tools/package-lock.json`` pins (``SHAREGROUP_AZURITE`` names another).
Its data lives in a temporary folder (``--location``), not in memory, so an outage (:meth:`Azurite.down`,
:meth:`Azurite.up`) restarts the process on the same port with the blobs of before. Azurite saves its
metadata (LokiJS) every 5 s and when it closes, so :meth:`Azurite.down` stops it with SIGTERM and waits
until it says it closed: a SIGKILL right after a commit lost the container and the table.
:meth:`Azurite.stop` kills it with SIGKILL (a SIGTERMed Azurite can wait forever on keep-alive
connections) and deletes the data. Its output goes to ``azurite.log`` in the temporary folder.

>>> with Azurite() as azure:
...     container = azure.create_container()
...     write_deltalake(azure.uri(container, "state"), table, storage_options=azure.storage_options())
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import IO

from azure.storage.blob import BlobServiceClient

from sharegroup_testing.apache_kafka import free_port, orphan_guard
from sharegroup_testing.store_server import CommitCounts, StoreServer

__all__ = ["ACCOUNT", "ACCOUNT_KEY", "AZURITE_ENV", "Azurite", "AzuriteError", "AzuriteMissing"]

#: Azurite's one account and its well-known key (published in Azurite's README; not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: Overrides the ``azurite-blob`` executable (default: the repo's tools/node_modules/.bin/azurite-blob).
AZURITE_ENV = "SHAREGROUP_AZURITE"
_REPO_AZURITE = Path(__file__).resolve().parents[2] / "tools" / "node_modules" / ".bin" / "azurite-blob"
#: What Azurite prints once it has saved its metadata on SIGTERM.
_CLOSED = b"Azurite Blob service successfully closed"


_REQUEST_LINE = re.compile(r"^\S+ (?P<id>[0-9a-f-]{36}) ")
#: The line naming a request's blob: a Delta commit file, with its container.
_COMMIT_BLOB = re.compile(r"BlobStorageContextMiddleware: Account=\S+ Container=(?P<container>\S+) "
                          r"Blob=(?:\S+/)?_delta_log/\d{20}\.json$")
_END_STATUS = re.compile(r"EndMiddleware: End response\. .*StatusCode=(?P<code>\d+)")


class AzuriteError(RuntimeError):
    """Azurite did not start, stop or come back as asked; the message names its log."""


class AzuriteMissing(AzuriteError):
    """``azurite-blob`` is not installed: ``make tools`` installs it."""


def azurite_blob() -> Path:
    """The ``azurite-blob`` executable; fails with the command that installs it."""
    path = Path(os.environ.get(AZURITE_ENV) or _REPO_AZURITE)
    if not os.access(path, os.X_OK):
        raise AzuriteMissing(f"no Azurite at {path}: run `make tools` (npm ci --prefix tools installs the version "
                             f"tools/package-lock.json pins; needs Node.js 20+) or set {AZURITE_ENV}")
    return path


class Azurite(StoreServer):
    """Azurite's Blob service on ``127.0.0.1`` and a free port, its data in a temporary folder (module doc).

    The process dies with the thread that started it (``setpriv --pdeathsig``): start it, and bring it
    back with :meth:`up`, from a thread that lives as long as it should (pytest's main thread).
    """

    def __init__(self, *, startup_timeout_s: float = 60.0):
        self.startup_timeout_s = startup_timeout_s
        self.host = "127.0.0.1"
        self.port = 0
        self.directory: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._argv: list[str] = []

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT/devstoreaccount1``: the blob endpoint, delta-rs's ``azure_endpoint``."""
        if not self.port:
            raise AzuriteError("Azurite was never started")
        return f"http://{self.host}:{self.port}/{ACCOUNT}"

    @property
    def log_path(self) -> Path:
        if self.directory is None:
            raise AzuriteError("Azurite was never started")
        return self.directory / "azurite.log"

    def start(self) -> Azurite:
        if self._process is not None:
            return self
        binary = azurite_blob()
        self.directory = Path(tempfile.mkdtemp(prefix="sharegroup-azurite-"))
        (self.directory / "data").mkdir()
        self.port = free_port()
        self._log = self.log_path.open("ab")
        self._argv = [str(binary), "--blobHost", self.host, "--blobPort", str(self.port),
                         "--location", str(self.directory / "data"), "--skipApiVersionCheck", "--silent",
                         "--disableTelemetry",  # telemetry: Azurite reports to Microsoft unless told not to
                         "--debug", str(self.directory / "requests.log")]  # read by counts()
        try:
            self.up()
        except BaseException:
            self.stop()
            raise
        return self

    def up(self) -> None:
        """Start the process (again, after :meth:`down`) on the same port, and wait until it accepts connections."""
        if self._process is not None and self._process.poll() is None:
            return
        if not self._argv:
            raise AzuriteError("Azurite was never started")
        self._process = subprocess.Popen([*orphan_guard(), *self._argv], stdout=self._log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise AzuriteError(f"Azurite exited while starting (exit {self._process.returncode}); "
                                   f"see {self.log_path}")
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:  # not listening yet
                time.sleep(0.05)
        raise AzuriteError(f"Azurite did not listen on {self.host}:{self.port} within "
                           f"{self.startup_timeout_s:.0f}s; see {self.log_path}")

    def down(self, timeout_s: float = 30.0) -> None:
        """An outage: Azurite saves its metadata and exits (SIGTERM; SIGKILL once it said it closed).

        Clients meet a refused connection until :meth:`up`. Fails if Azurite did not close within
        ``timeout_s``: the blobs written since its last save (5 s) would then be lost.
        """
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        closed_before = self.log_path.read_bytes().count(_CLOSED)
        process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while process.poll() is None and time.monotonic() < deadline:
            if self.log_path.read_bytes().count(_CLOSED) > closed_before:
                break  # saved; what keeps it alive now is a client's idle keep-alive connection
            time.sleep(0.05)
        saved = process.poll() is not None or self.log_path.read_bytes().count(_CLOSED) > closed_before
        process.kill()
        process.wait(10)
        if not saved:
            raise AzuriteError(f"Azurite did not close within {timeout_s:.0f}s of SIGTERM, killed: "
                               f"its latest writes may be lost; see {self.log_path}")

    def stop(self) -> None:
        """SIGKILL (the data is not needed again) and delete the data; the log stays."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.directory is not None:
            shutil.rmtree(self.directory / "data", ignore_errors=True)

    def blob_service(self, account_key: str = ACCOUNT_KEY) -> BlobServiceClient:
        """Azure's own client for this Azurite (delta-rs does not create containers; this does)."""
        return BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={account_key};"
            f"BlobEndpoint={self.endpoint};")

    def create_container(self, name: str | None = None) -> str:
        """Create a container and return its name; ``None``: a new unique one (tests share one Azurite)."""
        name = name or f"sharegroup-{uuid.uuid4().hex[:12]}"
        with self.blob_service() as service:
            service.create_container(name)
        return name

    @staticmethod
    def uri(container: str, path: str = "") -> str:
        """``abfss://container@devstoreaccount1.dfs.core.windows.net/path``: the form a real ADLS location takes.

        delta-rs sends it to :attr:`endpoint` (``azure_endpoint`` in :meth:`storage_options`), not to Azure.
        """
        return f"abfss://{container}@{ACCOUNT}.dfs.core.windows.net/{path.lstrip('/')}"

    @staticmethod
    def wrong_key() -> str:
        """A well-formed account key (base64 of 64 bytes) that is not the account's: Azurite answers 403."""
        return base64.b64encode(b"not the key of devstoreaccount1".ljust(64, b".")).decode()

    def storage_options(self, **overrides: str) -> dict[str, str]:
        """delta-rs storage options for this Azurite, ``overrides`` on top (``azure_storage_account_key=...``).

        The endpoint form, not ``azure_storage_use_emulator``: that one takes the address from the
        environment variable ``AZURITE_BLOB_STORAGE_URL`` (default port 10000), process-wide.
        """
        return {"azure_storage_account_name": ACCOUNT, "azure_storage_account_key": ACCOUNT_KEY,
                "azure_endpoint": self.endpoint, "azure_allow_http": "true", **overrides}

    def counts(self, container: str | None = None) -> CommitCounts:
        """Delta commit Put Blobs answered so far, in one container or all: stored (201), and refused as
        conflicts (409: the version existed). Read from Azurite's request log, which it writes as it answers."""
        if self.directory is None:
            raise AzuriteError("Azurite was never started")
        commits: dict[str, bool] = {}  # request id -> in the container asked about
        counts = [0, 0]
        with (self.directory / "requests.log").open(encoding="utf-8", errors="replace") as log:
            for line in log:
                request = _REQUEST_LINE.match(line)
                if request is None:
                    continue
                commit = _COMMIT_BLOB.search(line)
                if commit is not None:
                    commits[request["id"]] = container is None or commit["container"] == container
                    continue
                status = _END_STATUS.search(line)
                if status is not None and commits.pop(request["id"], False) and status["code"] in ("201", "409"):
                    counts[status["code"] == "409"] += 1
        return CommitCounts(*counts)
