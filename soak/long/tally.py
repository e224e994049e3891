"""What became of each lane's records so far, read as they settle: the long soak's per-interval accounting.

The soak's own accounting (soak.run.account) reads the whole sink at the end; done every interval,
that would read hours of batches each time and build Python sets of millions of numbers in the
process whose memory the soak measures. Here each committed batch's folder is read once, a
worker's file from where the last read stopped, and numbers are kept in NumberSets (a byte each).

Only batches in Spark's commit log are read: a batch not committed yet may run again and rewrite
its folder. Spark keeps only its newest commit files, so every batch id up to the newest commit
counts as committed (ids are consecutive, and a batch commits only after the one before it).
"""

from __future__ import annotations

from pathlib import Path

from soak.long.intervals import RecordFigures
from soak.long.worker import UNKNOWN_MARK
from soak.numbers import NumberSet
from soak.sink import BatchSink

__all__ = ["SinkTally", "WorkerTally", "last_commit", "record_figures"]


def last_commit(checkpoint: Path) -> int:
    """The newest batch id in Spark's commit log (-1 before the first)."""
    commits = checkpoint / "commits"
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return max(ids, default=-1)


class SinkTally:
    """The record numbers in a BatchSink's committed batches; ``duplicated`` counts numbers read a second time."""

    def __init__(self, sink: BatchSink, checkpoint: Path):
        self._sink, self._checkpoint = sink, checkpoint
        self.numbers = NumberSet()
        self.duplicated = 0
        self.batches_read = 0
        self._next_batch = 0

    def update(self) -> None:
        """Read the batches committed since the last update."""
        newest = last_commit(self._checkpoint)
        for batch in range(self._next_batch, newest + 1):
            self.duplicated += sum(self.numbers.add(number) for number in self._sink.batch_numbers(batch))
            self.batches_read += 1
        self._next_batch = max(self._next_batch, newest + 1)


class WorkerTally:
    """The record numbers a worker process wrote to its file, a line per record its commits settled; ``unknown``
    holds those of a commit that raised (marked UNKNOWN_MARK), whose outcome nobody knows."""

    def __init__(self, path: Path):
        self._path = path
        self._offset = 0
        self.numbers = NumberSet()
        self.unknown = NumberSet()
        self.duplicated = 0

    def update(self) -> None:
        """Read the lines written since the last update (a line still being written waits for the next)."""
        if not self._path.exists():
            return
        with self._path.open("rb") as file:
            file.seek(self._offset)
            data = file.read()
        complete = data[:data.rfind(b"\n") + 1]
        self._offset += len(complete)
        mark = UNKNOWN_MARK.encode()
        for line in complete.split():
            if line.startswith(mark):
                self.unknown.add(int(line[len(mark):]))
            else:
                self.duplicated += self.numbers.add(int(line))


def record_figures(delivered: NumberSet, sent_before: int, sink: SinkTally, elsewhere: NumberSet,
                   unanswered: NumberSet, elsewhere_duplicated: int = 0, exclusive: bool = False) -> RecordFigures:
    """A lane's records now. ``sent_before``: what the producer had sent at the previous sample (older records
    still nowhere are overdue); ``unanswered``: records another member ACCEPTed without an answer (applied or
    not, nobody knows: not counted missing, as soak.run.account does); ``exclusive``: the group gives a record
    to one member only (the Delta coordinator), so one in the sink and elsewhere too is a duplicate."""
    in_both = sink.numbers.count_common(elsewhere)
    return RecordFigures(
        produced=len(delivered), in_sink=len(sink.numbers), elsewhere=len(elsewhere), in_both=in_both,
        pending=delivered.count_missing(sink.numbers, elsewhere, unanswered),
        overdue=delivered.count_missing(sink.numbers, elsewhere, unanswered, below=sent_before),
        duplicated=sink.duplicated + elsewhere_duplicated + (in_both if exclusive else 0))
