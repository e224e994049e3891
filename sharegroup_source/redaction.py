"""Keep secrets out of logs, errors and reprs.

Kafka security settings and delta-rs storage options travel inside the options map;
anything that prints options goes through :func:`redact` first, and anything that prints a
state or dead-letter location goes through :func:`redact_location`, because object-store
URIs carry credentials too (``user:password@host``, pre-signed query strings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TextIO

from state_store.redaction import REDACTED, redact_location

__all__ = ["NAMED_BY_ERRORS", "REDACTED", "ScrubbedStream", "is_scrubbed", "is_secret", "redact", "redact_location"]

_SECRET_MARKERS = ("password", "secret", "sasl.jaas.config", "sasl.oauthbearer.config", "ssl.key.pem",
                   "ssl.keystore", "ssl.key", "token", "credential", "api.key")
#: Every ``stateStorage.*`` option is secret: which delta-rs keys hold credentials depends on the store.
_SECRET_PREFIXES = ("kafka.sasl.", "sasl.", "statestorage.")
#: Options whose value is a location: printed with :func:`redact_location`.
_LOCATION_KEYS = {"statelocation", "deadletterlocation", "checkpointlocation", "grouplocation", "path"}


#: Settings redacted where options are shown, yet not scrubbed out of messages: a refused login names the user and
#: the mechanism (who tried, and how; never how to get in), and their values are words a broker's message uses for
#: other things (the mechanism's name is in every SASL error; a short user name hides inside other words).
NAMED_BY_ERRORS = frozenset({"sasl.username", "sasl.mechanism", "sasl.mechanisms"})


def is_scrubbed(key: str) -> bool:
    """Whether a setting's value is cut out of every text printed: a secret, unless errors name it on purpose."""
    return is_secret(key) and key.lower().removeprefix("kafka.") not in NAMED_BY_ERRORS


def is_secret(key: str) -> bool:
    """Whether an option's value must never be printed (``kafka.`` prefix or not)."""
    lowered = key.lower()
    return lowered.startswith(_SECRET_PREFIXES) or any(marker in lowered for marker in _SECRET_MARKERS)


def redact(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options as they may be printed: secrets replaced, locations stripped of credentials."""
    return {key: _shown(key, value) for key, value in options.items()}


def _shown(key: str, value: Any) -> Any:
    if is_secret(key):
        return REDACTED
    if key.lower() in _LOCATION_KEYS and isinstance(value, str):
        return redact_location(value)
    return value


class ScrubbedStream:
    """A text stream that writes everything but the secrets: the last guard of 'never printed', whatever
    message (a store's, a client's) carries a credential."""

    def __init__(self, target: TextIO, secrets: set[str]):
        self._target = target
        self._secrets = sorted(secrets, key=len, reverse=True)  # a secret inside a longer one: the longer first

    def write(self, text: str) -> int:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return self._target.write(text)

    def flush(self) -> None:
        self._target.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self._target, name)
