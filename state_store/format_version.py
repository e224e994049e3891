"""Format versions: how a release tells what it can read from what another release wrote.

A query's state, its checkpoint and its group outlive the release that wrote them: an upgrade
resumes them, months later. So every persisted format says which version of itself it is (a
state table in its table property, the source's offset in Spark's checkpoint in its ``"v"``
field, a ledger row in its ``ranges_encoding`` column), and a reader takes only the versions it
knows. Anything else is refused, in one line naming both versions and the way out, before a run
acquires anything: read as something it is not, a format would lose or repeat records silently.

Everything written before versions were carries none: it is version 1, the format of those
releases, which a release keeps reading until its refusal says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from state_store.errors import StateStoreError

__all__ = ["FormatVersion"]

#: The distribution whose releases the refusals name.
_PROJECT = "sharegroup-source"


@dataclass(frozen=True)
class FormatVersion:
    """The versions of one persisted format this release knows: it writes ``current`` and reads ``oldest`` to
    ``current``. ``name`` is what the stored number is called ("format version", "ranges encoding").

    A format takes a new version for a change the releases before it cannot read as they always
    did, so that they refuse it by its version rather than misread it; a format that stays as they
    read it keeps its version, and they can still run on it.
    """

    current: int
    oldest: int = 1
    name: str = "format version"

    def read(self, found: object, subject: str, way_out: str, error: type[Exception] = StateStoreError) -> int:
        """``found`` as a version this release reads (None, absent: 1), or ``error`` saying in one line why not.

        ``subject`` names what carries the version ("the ledger table at ..."); ``way_out`` is what a
        user can do without another release ("start afresh on a new location").
        """
        version = _as_version(found)
        if version is not None and self.oldest <= version <= self.current:
            return version
        if version is not None and version > self.current:
            why = f"a newer release wrote it; upgrade to that release or a later one, or {way_out}"
        elif version is not None:
            why = f"an older release wrote it, which this one no longer reads; finish with that release, or {way_out}"
        else:
            why = f"no release of {_PROJECT} writes that; {way_out}"
        reads = (f"{self.name} {self.current} only" if self.oldest == self.current
                 else f"{self.name}s {self.oldest} to {self.current}")
        shown = found if version is None else version
        raise error(f"{subject} is {self.name} {shown}, but this release of {_PROJECT} reads {reads}: {why}")


def _as_version(found: object) -> int | None:
    """A stored version as a number: absent is 1; a table property holds it as text. None: no version at all."""
    if found is None:
        return 1
    if isinstance(found, str) and found.strip().isdigit():
        found = int(found)
    if isinstance(found, int) and not isinstance(found, bool) and found >= 1:
        return found
    return None
