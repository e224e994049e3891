"""Proof, before a query or worker takes records, that its state can be committed under a location.

Every guarantee of the state rests on one property of the store: a Delta commit writes
``_delta_log/<version>.json`` only if no other writer wrote that version first (put-if-absent).
The group's compare-and-swap (no record held by two members), a query's fencing (one driver per
``stateLocation``) and the ledger's exactly-once all need it. Local and HDFS-like file systems,
Azure Blob / ADLS Gen2 (``If-None-Match: *`` on Put Blob), Google Cloud Storage
(``ifGenerationMatch=0``) and S3 (conditional writes, ``If-None-Match: *``) give it, and delta-rs
1.x asks for it on each without an option; it has no other way left (``aws_s3_locking_provider=
dynamodb`` is ignored, with an error in its log).

:func:`check_commits` creates a scratch table under the location (a put-if-absent commit) and
deletes it, so two things fail at start instead of at the first state write, after records were
taken: ``stateStorage.aws_conditional_put=disabled``, with which delta-rs cannot commit to S3 at
all, and credentials that may read but not write.

What it cannot see: an S3-compatible server that ignores ``If-None-Match`` and overwrites. One
process cannot provoke a second writer's PUT of a version that exists (delta-rs lists the log
before its PUT and gives up when the version is taken), and only writers racing within that window
win twice. tests/test_object_store_servers.py shows the race on such a server; the documentation's
object-stores page names the stores that honour the condition.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Mapping
from urllib.parse import urlparse

import pyarrow as pa
from deltalake import write_deltalake
from deltalake.exceptions import DeltaError
from deltalake.fs import DeltaStorageHandler

from state_store.errors import StateStoreError
from state_store.redaction import redact_location

__all__ = ["NonAtomicStoreError", "check_commits"]

_PROBE = pa.table({"probe": pa.array([1], pa.int8())})
_proven: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
_lock = threading.Lock()
#: object_store's words when the S3 client was told not to send conditional writes.
_DISABLED = "conditional put is disabled"


class NonAtomicStoreError(StateStoreError):
    """The storage options leave delta-rs no atomic commit on the store."""


def check_commits(location: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Raise :class:`NonAtomicStoreError` if the options forbid delta-rs's put-if-absent commit under ``location``.

    Local paths are not probed: a local file system's rename-if-absent is atomic. Other failures
    of the write (no access, no bucket, unreachable) are raised as delta-rs raised them, for the
    caller to word: a location that can be read but not written fails here, before any record is taken.
    """
    parsed = urlparse(location)
    if len(parsed.scheme) <= 1 or parsed.scheme == "file":  # a path, a Windows drive letter, file://
        return
    options = dict(storage_options or {})
    key = (f"{parsed.scheme}://{parsed.netloc}", tuple(sorted(options.items())))
    with _lock:
        if key in _proven:
            return
    uri = f"{location.rstrip('/')}/_sharegroup_commit_probe_{uuid.uuid4().hex}"
    try:
        write_deltalake(uri, _PROBE, storage_options=options)
    except (DeltaError, OSError) as exc:
        if _DISABLED in str(exc):
            raise NonAtomicStoreError(
                f"{redact_location(location)}: stateStorage.aws_conditional_put=disabled leaves delta-rs no atomic "
                "commit on S3, so every state write would fail; remove that option (etag, S3's conditional "
                "writes, is the default)") from None
        raise
    finally:
        with contextlib.suppress(DeltaError, OSError):  # a leftover scratch table is harmless
            DeltaStorageHandler(uri, options).delete_dir("")
    with _lock:
        _proven.add(key)
