"""Locations as they may be printed: object-store URIs carry credentials (``user:password@host``,
pre-signed query strings), and state-table errors name their table's location.

Here rather than in the connector because the state store prints locations too and imports
nothing of the connector; ``sharegroup_source.redaction`` re-exports it beside the option rules.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "redact_location"]

REDACTED = "*****(redacted)"
#: Azure's ``container@account`` names a container, not a user: kept, as it tells locations apart.
_CONTAINER_SCHEMES = {"abfs", "abfss", "wasb", "wasbs"}
_AUTHORITY = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<userinfo>[^/?#]*)@")


def redact_location(uri: str) -> str:
    """``uri`` as it may be printed: user info, query string and fragment replaced by a marker.

    A query string on a storage location is a pre-signed URL or a SAS token (``sig=``,
    ``X-Amz-Signature``, ``X-Amz-Credential``) more often than anything harmless, so it is
    never shown; a user name alone is shown only where it is an Azure container.
    """
    shown = _redact_userinfo(uri)
    for separator in ("?", "#"):
        head, found, _ = shown.partition(separator)
        if found:
            shown = f"{head}{separator}{REDACTED}"
    return shown


def _redact_userinfo(uri: str) -> str:
    match = _AUTHORITY.match(uri)
    if match is None:
        return uri
    userinfo = match["userinfo"]
    if ":" not in userinfo and match["scheme"].lower() in _CONTAINER_SCHEMES:
        return uri
    return f"{match['scheme']}://{REDACTED}@{uri[match.end():]}"
