"""Keep secrets out of logs, errors and reprs.

Kafka security settings travel inside the options map; anything that prints options
goes through :func:`redact` first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["REDACTED", "is_secret", "redact"]

REDACTED = "*****(redacted)"
_SECRET_MARKERS = ("password", "secret", "sasl.jaas.config", "sasl.oauthbearer.config", "ssl.key.pem",
                   "ssl.keystore", "ssl.key", "token", "credential", "api.key")


def is_secret(key: str) -> bool:
    """Whether an option's value must never be printed (``kafka.`` prefix or not)."""
    lowered = key.lower()
    return lowered.startswith(("kafka.sasl.", "sasl.")) or any(marker in lowered for marker in _SECRET_MARKERS)


def redact(options: Mapping[str, Any]) -> dict[str, Any]:
    return {key: (REDACTED if is_secret(key) else value) for key, value in options.items()}
