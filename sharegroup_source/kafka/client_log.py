"""Where every Kafka client of the connector logs: Python ``logging``, less librdkafka's storms.

librdkafka writes its log to stderr by itself: an unreachable bootstrap server printed about
19 ``FAIL ... Connection refused`` lines a second until the one clear error 30 s later, and every
run printed the share consumer's "Preview" notice at WARNING. Here the clients' log goes through
Python ``logging`` under the ``sharegroup_source.kafka`` logger (librdkafka's ``logger`` setting),
complaints about one broker collapse to one line per broker per 30 s with a count, and the preview
notice is shown once at INFO.

Turn client debug logs on with ``kafka.debug`` (librdkafka's debug contexts, for example
``broker,protocol,cgrp``): the logger then passes DEBUG, to stderr unless a handler is
configured. The clients run in Spark's driver-side Python worker, where nobody configures
logging, so the option is the one switch a user can reach.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["KAFKA_LOGGER", "REPEAT_INTERVAL_S", "ClientLog", "client_log", "follow_debug"]

KAFKA_LOGGER = "sharegroup_source.kafka"
#: How long further complaints about one broker are counted instead of printed.
REPEAT_INTERVAL_S = 30.0
_PREVIEW = '"Preview"'
#: "FAIL [rdkafka#consumer-1] [thrd:...]: sasl_ssl://host:9092/1: Connect to ..." -> host:9092, and
#: "... [thrd:GroupCoordinator]: GroupCoordinator: host:9092: Connect to ..." -> host:9092 as well
_BROKER = re.compile(r"\]: (?:GroupCoordinator: )?(?:[A-Za-z_]+://)?(?P<broker>[\w.\-]+:\d+)(?:/\w*)?: ")


@dataclass
class _Quiet:
    since: float
    count: int = 0


class ClientLog:
    """Where librdkafka's log lines go (the clients' ``logger`` setting): a Python logger, less the storms.

    The first complaint (WARNING or worse) about a broker is logged; more about the same broker
    within ``interval_s`` are counted, and the next one after that says how many were held back.
    ``clock`` is the time source (seconds, monotonic).
    """

    def __init__(self, logger: logging.Logger | None = None, interval_s: float = REPEAT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic):
        self._logger = logger or logging.getLogger(KAFKA_LOGGER)
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()  # clients of many threads log here; never called from a signal handler
        self._quiet: dict[str, _Quiet] = {}
        self._preview_shown = False

    def log(self, level: int, msg: str, *args: Any) -> None:
        """librdkafka's call: ``logger.log(level, "%s [%s] %s", facility, client, text)``."""
        text = msg % args if args else msg
        if _PREVIEW in text:
            with self._lock:
                shown, self._preview_shown = self._preview_shown, True
            if not shown:
                self._logger.info("%s", text)
            return
        match = _BROKER.search(text) if level >= logging.WARNING else None
        if match is None:
            self._logger.log(level, "%s", text)
            return
        broker, now = match["broker"], self._clock()
        with self._lock:
            quiet = self._quiet.get(broker)
            if quiet is not None and now - quiet.since < self._interval_s:
                quiet.count += 1
                return
            held_back = quiet.count if quiet is not None else 0
            self._quiet[broker] = _Quiet(now)
        more = f" ({held_back} more about {broker} in the last {self._interval_s:.0f}s)" if held_back else ""
        self._logger.log(level, "%s%s", text, more)


_CLIENT_LOG = ClientLog()


def client_log() -> ClientLog:
    """The process's one ClientLog, so the storm of every client about one broker collapses together."""
    return _CLIENT_LOG


def follow_debug(config: Mapping[str, Any]) -> None:
    """``debug`` set: let the client's debug lines through, to stderr if logging is not configured."""
    if not str(config.get("debug", "")).strip():
        return
    logger = logging.getLogger(KAFKA_LOGGER)
    logger.setLevel(logging.DEBUG)
    if not logger.hasHandlers():  # Python's last-resort handler shows warnings only
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
