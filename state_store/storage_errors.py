"""What a storage failure means for the user: no access, no store, or something else.

delta-rs reports a refused credential on S3 as an OSError about "privileges", and an endpoint
that does not answer as a "Generic S3 error ... error sending request". Both used to surface as
"the table is corrupt", which sends a user looking at a healthy table instead of at the
storage options; these phrases tell the two causes apart so the message can say which.
"""

from __future__ import annotations

import re

__all__ = ["ACCESS_DENIED", "NO_SUCH_STORE", "UNREACHABLE", "storage_detail", "storage_problem"]

ACCESS_DENIED = "access denied or no credentials: check the storage options (stateStorage.*)"
UNREACHABLE = "the store cannot be reached: check its address and the storage options (stateStorage.*)"
NO_SUCH_STORE = "the bucket or container does not exist: create it, or correct the location's bucket or container"

#: Phrases of object_store (S3, GCS, Azure), HDFS and the OS for a refused or missing credential.
_ACCESS_PHRASES = ("lacked the necessary privileges", "403 forbidden", "401 unauthorized", "accessdenied",
                   "access denied", "invalidaccesskeyid", "signaturedoesnotmatch", "expiredtoken",
                   "authorizationpermissionmismatch", "authenticationfailed", "authorizationfailure",
                   "permission denied", "permissiondenied", "no credentials", "missing credentials",
                   "credentials not found", "unable to load credential", "invalid_grant", "not authorized")
#: Phrases for an endpoint that never answered: refused, unresolvable, or timed out.
_UNREACHABLE_PHRASES = ("error sending request", "tcp connect error", "connection refused", "dns error",
                        "failed to lookup address", "name or service not known", "timed out",
                        "connection reset", "no route to host", "network is unreachable")

#: The error codes of S3, Azure and GCS for a bucket or container that is not there (delta-rs does not create one).
_NO_STORE_PHRASES = ("nosuchbucket", "containernotfound", "the specified bucket does not exist",
                     "the specified container does not exist")


def storage_problem(exc: BaseException) -> str | None:
    """``ACCESS_DENIED``, ``NO_SUCH_STORE``, ``UNREACHABLE`` or None (another failure: the caller's words apply)."""
    text = str(exc).lower()
    if isinstance(exc, PermissionError) or any(phrase in text for phrase in _ACCESS_PHRASES):
        return ACCESS_DENIED
    if any(phrase in text for phrase in _NO_STORE_PHRASES):
        return NO_SUCH_STORE
    if any(phrase in text for phrase in _UNREACHABLE_PHRASES):
        return UNREACHABLE
    return None


#: delta-kernel's first line for a store it could not open, whatever the cause: the cause is further down.
_GENERIC_FIRST_LINE = "kernel error -> operation not supported"


def storage_detail(exc: BaseException) -> str:
    """The one line of a store's error worth showing beside :func:`storage_problem`'s words.

    Its first line, unless that is delta-kernel's generic one: an S3 location without credentials
    says "Operation not supported" first and "no credentials found in chain" below, as a tree.
    """
    lines = [re.sub(r"\x1b\[[0-9;]*m|↳", "", line).strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return type(exc).__name__
    if lines[0].lower() == _GENERIC_FIRST_LINE:
        for line in lines[1:]:
            if "no credentials found" in line.lower():
                return "no credentials found in the store's credential chain"
        return lines[-1]
    return lines[0]
