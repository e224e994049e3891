"""Where the source keeps Delta tables: which locations are accepted, and checking them early.

A location option (``stateLocation``, ``deadLetterLocation``, and any later one such as
``groupLocation``) is a local path, a ``file://`` URI, or a URI whose scheme delta-rs opens
(S3, GCS, Azure, HDFS). Anything else used to be taken as a relative local path: on
Databricks, ``dbfs:/tmp/state`` became a folder named ``dbfs:`` on the driver's disk, which
vanishes with the cluster, and exactly-once silently broke. So:

- ``dbfs:/x`` is read through Databricks' FUSE mount as ``/dbfs/x`` where that mount exists
  (a Databricks driver), and refused elsewhere: delta-rs cannot open ``dbfs:`` itself.
- ``/dbfs/...`` and ``/Volumes/...`` are local paths (the FUSE mount, Unity Catalog volumes).
- any other scheme, or ``s3:/x`` without ``//``, is refused at ``load()``, naming the option.

:func:`check_location` then proves, before the source joins the share group, that the
location can be created and written (local) or reached with the storage options (object
stores), so a bad location never takes records from the group first.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from sharegroup_source.errors import OptionError
from sharegroup_source.redaction import redact_location
from state_store.commit_probe import NonAtomicStoreError, check_commits
from state_store.storage_errors import storage_detail, storage_problem

__all__ = ["DBFS_MOUNT", "DELTA_SCHEMES", "STORAGE_PREFIX", "check_location", "check_source_locations",
           "resolve_location", "storage_options_of"]

#: Schemes delta-rs (object_store) opens; ``hdfs``/``viewfs`` need its HDFS support at run time.
#: ``https`` is there for stores addressed by their endpoint (``https://<account>.blob.core.windows.net/...``).
DELTA_SCHEMES = frozenset({"file", "s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure", "hdfs",
                           "viewfs", "https"})
#: Where Databricks mounts DBFS on the driver and workers.
DBFS_MOUNT = Path("/dbfs")
#: The prefix of the locations' delta-rs storage options, in any case: stateStorage.<key>.
STORAGE_PREFIX = "statestorage."
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):(?P<rest>.*)$", re.DOTALL)


def storage_options_of(options: Mapping[str, Any]) -> dict[str, str]:
    """delta-rs storage options from ``stateStorage.<key>`` options (any case), ``<key>`` as written."""
    storage = {key[len(STORAGE_PREFIX):]: str(value) for key, value in options.items()
               if key.lower().startswith(STORAGE_PREFIX)}
    if "" in storage:
        raise OptionError("option 'stateStorage.' names no storage option: write stateStorage.<key>")
    return storage


def resolve_location(option: str, value: str, dbfs_mount: Path = DBFS_MOUNT) -> str:
    """``value`` as the state store will open it, or OptionError naming ``option``.

    ``dbfs_mount`` is where the DBFS FUSE mount would be (a parameter so tests can stand one up).
    """
    match = _SCHEME.match(value)
    if match is None:
        return value  # a local path: /dbfs/... and /Volumes/... included
    scheme, rest = match["scheme"].lower(), match["rest"]
    shown = redact_location(value)
    if scheme == "dbfs":
        return _dbfs(option, shown, rest, dbfs_mount)
    if scheme == "gcs":  # delta-rs opens it, but not as gs://: refused by name, with the URI to write instead
        raise OptionError(f"option '{option}': {shown}: write gs{shown[len(scheme):]} for Google Cloud Storage; "
                          "delta-rs opens gcs:// with another client, which ignores the stateStorage.* credentials "
                          "and whose commits were not checked to be atomic")
    if scheme not in DELTA_SCHEMES:
        supported = ", ".join(f"{s}://" for s in sorted(DELTA_SCHEMES))
        local = "" if rest.startswith("//") else f" (write ./{shown} for a folder with a colon in its name)"
        raise OptionError(f"option '{option}': {shown} has the scheme '{scheme}:', which the state store cannot "
                          f"open; give a local path{local}, or a URI with one of {supported}")
    if scheme == "file" and not rest.startswith("//"):
        return rest  # file:/x, as Hadoop prints local paths
    if not rest.startswith("//") or not rest[2:].strip("/"):
        raise OptionError(f"option '{option}': {shown} is not a complete URI: write {scheme}://bucket-or-host/path")
    return value


def _dbfs(option: str, shown: str, rest: str, dbfs_mount: Path) -> str:
    """``dbfs:/x`` (or ``dbfs:///x``) as ``<mount>/x``: delta-rs reads DBFS only through the FUSE mount."""
    if rest.startswith("//") and not rest.startswith("///"):
        raise OptionError(f"option '{option}': {shown} names a DBFS host; write dbfs:/path (the workspace's DBFS)")
    path = rest.lstrip("/")
    if not path:
        raise OptionError(f"option '{option}': {shown} is the DBFS root; give a folder under it")
    if not dbfs_mount.is_dir():
        raise OptionError(f"option '{option}': {shown} is a DBFS path, read through the {dbfs_mount} mount, which "
                          f"this machine does not have (it is not a Databricks cluster); give a local path or an "
                          f"object-store URI (s3://, abfss://, gs://)")
    return str(dbfs_mount / path)


def check_location(option: str, location: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Fail with OptionError naming ``option`` unless ``location`` can hold the source's tables.

    Local: the folder is created and a probe file written and deleted in it. Object stores and
    HDFS: the location is looked up with ``storage_options`` (a missing table is fine, a refused
    credential, a missing bucket or an unreachable endpoint is not), and a scratch table proves that
    the state can be committed there, put-if-absent (:func:`check_commits`). Nothing is joined or acquired
    before this.
    """
    shown = redact_location(location)
    local = _local_path(location)
    if local is not None:
        _check_local(option, shown, local)
        return
    try:
        DeltaTable(location, storage_options=dict(storage_options or {}))
    except TableNotFoundError:
        pass  # reachable; the first write creates the table
    except (OSError, ValueError, RuntimeError) as exc:
        raise _unusable(option, location, exc, "it cannot be opened") from None
    try:
        check_commits(location, storage_options)
    except NonAtomicStoreError as exc:
        raise OptionError(f"option '{option}': {exc}") from None
    except (OSError, ValueError, RuntimeError) as exc:
        raise _unusable(option, location, exc, "it can be read but not written") from None


def _unusable(option: str, location: str, exc: BaseException, otherwise: str) -> OptionError:
    shown = redact_location(location)
    detail = storage_detail(exc).replace(location, shown)
    return OptionError(f"option '{option}': {shown}: {storage_problem(exc) or otherwise} ({detail})")


def check_source_locations(locations: Mapping[str, str], storage_options: Mapping[str, str]) -> None:
    """Every location of a source (option name -> location) checked, with its storage options, before the driver
    joins the group."""
    for option, location in locations.items():
        check_location(option, location, storage_options)


def _check_local(option: str, shown: str, path: str) -> None:
    probe = os.path.join(path, f".sharegroup-probe-{uuid.uuid4().hex}")
    try:
        os.makedirs(path, exist_ok=True)
        with open(probe, "wb") as handle:
            handle.write(b"probe")
        os.remove(probe)
    except OSError as exc:
        why = "permission denied" if isinstance(exc, PermissionError) else (exc.strerror or str(exc))
        raise OptionError(f"option '{option}': cannot create and write {shown}: {why}"
                          f"{'' if exc.filename is None else f' ({exc.filename})'}") from None


def _local_path(location: str) -> str | None:
    if "://" not in location:
        return os.path.abspath(location)
    parsed = urlparse(location)
    return parsed.path if parsed.scheme.lower() == "file" else None

