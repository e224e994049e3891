"""The soak's verdict: faults by kind, and what became of every produced record.

A record is *lost* if it was produced (delivery confirmed) but is neither in the sink nor
accepted by an independent member of the group: KIP-932 gives at-least-once across members, so
a record another member took is accounted for, and so is one whose ACCEPT by that member went out
without an answer (a killed leader) and that never came back: inferred applied, since a record whose
lock ran out unacknowledged is delivered again. A record is *duplicated* if more than one sink row
holds it (same partition and offset). Records both in the sink and at an independent member
are listed apart: that is the at-least-once overlap between members, not a duplicate.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["SoakReport"]


@dataclass(frozen=True)
class SoakReport:
    seconds: float
    seed: int
    faults: Counter[str]
    produced: int
    in_sink: int
    accepted_by_independent: int
    in_both: int
    lost: int
    duplicated: int
    lost_examples: tuple[int, ...] = ()
    produce_failures: int = 0
    duplicate_batches: tuple[tuple[int, ...], ...] = ()
    query_starts: int = 0
    expected_failures: int = 0
    unexpected_failures: tuple[str, ...] = ()
    counters: dict[str, int] = field(default_factory=dict)
    #: records an independent member ACCEPTed without an answer (its leader killed under it) that never came back
    unanswered_at_independent: int = 0

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing duplicated, and no query failure that no fault caused."""
        return self.lost == 0 and self.duplicated == 0 and not self.unexpected_failures

    def table(self) -> str:
        lines = [f"soak: {self.seconds:.0f} s, seed {self.seed}", "", f"{'fault injected':<34}{'times':>8}"]
        lines += [f"{kind:<34}{count:>8}" for kind, count in sorted(self.faults.items())]
        lines += [f"{'total':<34}{sum(self.faults.values()):>8}", "", f"{'records':<34}{'count':>8}"]
        for label, value in (("produced (delivery confirmed)", self.produced),
                             ("  not produced (delivery failed)", self.produce_failures), ("in the sink", self.in_sink),
                             ("accepted by an independent member", self.accepted_by_independent),
                             ("  of which also in the sink", self.in_both),
                             ("ACCEPTed unanswered by a member", self.unanswered_at_independent), ("lost", self.lost),
                             ("duplicated in the sink", self.duplicated)):
            lines.append(f"{label:<34}{value:>8}")
        lines += ["", f"query starts {self.query_starts} (failures caused by faults {self.expected_failures}, "
                  f"other failures {len(self.unexpected_failures)})"]
        lines += [f"  other failure: {message}" for message in self.unexpected_failures]
        if self.counters:
            shown = ("acquired", "accepted", "released", "ack_failures", "redeliveries_deduped", "runs")
            lines.append("source counters: " + ", ".join(f"{k} {self.counters.get(k, 0)}" for k in shown))
        if self.lost_examples:
            lines.append(f"lost records, first ones: {list(self.lost_examples)}")
        if self.duplicate_batches:
            lines.append(f"batches holding the same records: {list(self.duplicate_batches)}")
        verdict = "OK, nothing lost or duplicated, no failure the soak did not inject" if self.ok else "FAILED"
        lines += ["", "verdict: " + verdict]
        return "\n".join(lines)
