"""The broker coordinator's reading of a commit's answer, through the acknowledger, against a real state store.

The broker's answer is given by a stand-in for the share consumer: an answer that leaves a
partition out cannot be provoked on demand from either broker.
"""

from __future__ import annotations

from sharegroup_source.acks import AckRun
from sharegroup_source.coordinators.broker import BrokerCoordinator
from sharegroup_source.coordinators.broker.share_client import AckResult
from sharegroup_source.driver.acknowledger import Acknowledger
from sharegroup_source.driver.epoch_book import settled_statuses
from state_store import LedgerEntry, OffsetRange, SourceCounters, StateStore
from state_store.group import GroupSettings
from tests.driver_parts import run_context


class _Answering:
    """Takes acknowledgements and answers the commit for the partitions it is told to."""

    def __init__(self, answered: set[tuple[str, int]]):
        self.answered = answered
        self.staged: list[AckRun] = []

    def acknowledge_runs(self, runs: list[AckRun]) -> None:
        self.staged += runs

    def commit(self) -> list[AckResult]:
        return [AckResult(t, p, None) for t, p in sorted({(a.topic, a.partition) for a in self.staged})
                if (t, p) in self.answered]


def test_a_partition_missing_from_the_commit_results_counts_as_failed(tmp_path):
    store = StateStore(str(tmp_path / "state"))
    entry = LedgerEntry("q", 1, (OffsetRange("t", 0, 0, 9), OffsetRange("t", 1, 0, 4)), "run", 0, 30_000, "EMITTED")
    store.ledger.write_epoch(entry)
    counters = SourceCounters()
    client = _Answering(answered={("t", 0)})
    coordinator = BrokerCoordinator(client, "run", GroupSettings())  # type: ignore[arg-type]  # a stand-in ShareClient
    no_read = lambda positions: positions.slice(0, 0)  # noqa: E731  # nothing is rejected: never read back
    acknowledger = Acknowledger(coordinator, run_context(store, counters, run_id="run"), no_read)
    acknowledger.settle([entry], {})
    outcomes = list(acknowledger.outcomes())
    assert sum(run.size for run in client.staged) == 15
    assert outcomes == [{1: 5}]
    unacknowledged = outcomes[0]
    assert settled_statuses(unacknowledged) == {1: "ACK_FAILED"}
    assert (counters.accepted, counters.ack_failures) == (10, 5)
