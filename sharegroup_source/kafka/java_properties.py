"""Java properties files, read as Java reads them: the format of the ``--command-config`` files Kafka's tools take.

Why a parser of its own: Python has none for the format, and a client properties file uses more of it than
``key=value`` lines. A ``sasl.jaas.config`` often spans lines ended by a backslash, and keys and values carry
Java's escapes. What the settings read mean to librdkafka is java_settings.py's job, beside this one.
"""

from __future__ import annotations

from sharegroup_source.kafka.java_settings import unescape_java

__all__ = ["read_properties"]

_BLANK = " \t\f"


def read_properties(text: str) -> dict[str, str]:
    """Entries of a Java properties file as ``java.util.Properties.load`` reads them: ``#`` and ``!``
    comments, ``key=value``, ``key: value`` or ``key value``, a line ending in an odd number of
    backslashes continued on the next, and the escapes (``\\uXXXX``, ``\\t``, ``\\=`` ...).
    Kafka's tools read ``--command-config`` that way, and a ``sasl.jaas.config`` often spans lines."""
    entries: dict[str, str] = {}
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(_BLANK)
        if pending is None and (not line or line[0] in "#!"):
            continue
        continued = (len(line) - len(line.rstrip("\\"))) % 2 == 1
        pending = (pending or "") + (line[:-1] if continued else line)
        if continued:
            continue
        key, value = _entry(pending)
        entries[key] = value
        pending = None
    if pending is not None:
        key, value = _entry(pending)
        entries[key] = value
    return entries


def _entry(line: str) -> tuple[str, str]:
    """A logical line as (key, value): the key ends at the first unescaped ``=``, ``:`` or blank."""
    end = 0
    while end < len(line) and line[end] not in "=:" + _BLANK:
        end += 2 if line[end] == "\\" else 1
    rest = line[end:].lstrip(_BLANK)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANK)
    return unescape_java(line[:end]), unescape_java(rest)
