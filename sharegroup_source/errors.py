"""Every exception the connector raises on purpose, in one place (as ``deltalake.exceptions``).

Each message names the option, location or record at fault. State-table trouble comes from
the state store as :class:`StateStoreError` (a run another run took over from: :class:`FencedError`;
a member whose group settings disagree with its group's: :class:`GroupSettingsError`). The state
store never imports the connector, so its errors are defined there and re-exported here.
"""

from __future__ import annotations

from state_store.errors import FencedError, GroupSettingsError, StateStoreError

__all__ = ["CONNECTOR_ERRORS", "AuthenticationError", "AuthorizationError", "BatchInterruptedError", "ClusterError",
           "DataLossError", "FencedError", "GroupConfigError", "GroupNotEmptyError", "GroupSettingsError",
           "OptionError", "OutcomeError", "SparkVersionError", "StateMismatchError", "StateStoreError", "TlsError",
           "WorkerPythonError"]


class OptionError(ValueError):
    """An option is missing or has a wrong value; the message names it."""


class ClusterError(RuntimeError):
    """The Kafka cluster is unreachable or lacks what the options name."""


class AuthenticationError(ClusterError):
    """The cluster refused the client's login: its user, password or SASL mechanism. Never retried."""


class TlsError(ClusterError):
    """The TLS handshake failed: the broker's certificate is not trusted, or does not name the host. Never retried."""


class AuthorizationError(ClusterError):
    """An ACL refused an operation; the message names the principal, the operation and the resource. Never
    retried: it lasts until an administrator grants the ACL."""


class StateMismatchError(RuntimeError):
    """The state location belongs to another checkpoint, or the checkpoint to another release: its offsets are of a
    format version this release does not read (a newer release wrote them)."""


class DataLossError(RuntimeError):
    """Offsets recorded in the ledger are no longer in the log."""


class OutcomeError(ValueError):
    """An outcome that cannot be recorded; nothing was recorded."""


class GroupConfigError(ValueError):
    """Kafka refused a share group's config: the message names each setting and the broker's reason, and
    ``refused`` holds one line per setting. Nothing was changed."""

    def __init__(self, message: str, refused: tuple[str, ...] = ()):
        super().__init__(message)
        self.refused = refused or (message,)


class GroupNotEmptyError(RuntimeError):
    """A reset or delete of a share group's offsets (``sharegroup_source.admin``) was refused: members of the group
    hold records or were seen lately; the message names them. Nothing was changed."""


class SparkVersionError(ImportError):
    """The running Spark (or its absence) cannot host the source; the message names what was found and what is needed.

    An ImportError, so that importing the source on such a Spark fails the way a missing module does.
    """


class BatchInterruptedError(RuntimeError):
    """``query.stop()`` interrupted a Spark call of the connector's foreachBatch code (``DeltaBatchWriter``,
    ``acknowledge``): one line that Spark recognises as a stop, instead of a JVM stack trace long enough to
    overflow the pattern Spark matches it with."""


class WorkerPythonError(RuntimeError):
    """Spark's Python workers run a Python without this package; the message names it and the one to run instead."""


#: Every error above, each a one-line message that names what is at fault (subclasses included through their bases).
CONNECTOR_ERRORS: tuple[type[Exception], ...] = (
    BatchInterruptedError, ClusterError, DataLossError, GroupConfigError, GroupNotEmptyError, OptionError, OutcomeError,
    SparkVersionError, StateMismatchError, StateStoreError, WorkerPythonError)
