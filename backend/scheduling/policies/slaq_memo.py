"""slaq's kept scores, found by the identity of the view they were made from.

Most of 10,000 jobs are handed over as the very view their score was made
from, so a decision looks each one up by ``id(view)``. The lookup yields a
row number into an array of the kept scores, not the entry itself: reading
a float attribute of 10,000 scattered objects, and the lists of them, cost
more than the dictionary lookup (about 1 ms a decision at 10,000 jobs).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import overload

import numpy as np

from backend.scheduling.policies.slaq_scores import Scored
from backend.scheduling.types import JobView

_VIEW = attrgetter("view")
_MOVING = attrgetter("moving")


@dataclass
class KeptScores:
    """Job id -> :class:`Scored` (``entries``), with each entry that holds a
    view also found by the view's identity, and its whole score ``moving``
    kept in an array row that stays the job's while it has an entry.

    An entry keeps its view alive, so no other object can have that id
    meanwhile. An entry changed in place (``Scored.take``) must be handed to
    :meth:`changed` so its row follows."""

    entries: dict[int, Scored] = field(default_factory=dict)
    _row_of_view: dict[int, int] = field(default_factory=dict)
    _row_of_job: dict[int, int] = field(default_factory=dict)
    _moving: np.ndarray = field(default_factory=lambda: np.empty(64))

    def rows(self, jobs: Sequence[JobView]) -> np.ndarray:
        """Per job, the row of the score kept for that very view; -1 where none is."""
        return np.fromiter(map(self._row_of_view.get, map(id, jobs), repeat(-1)), np.intp,
                           len(jobs))

    def moving(self, rows: np.ndarray) -> np.ndarray:
        """The kept whole scores (``Scored.moving``) of ``rows`` (none -1)."""
        return self._moving[rows]

    def remember(self, job_id: int, entry: Scored) -> None:
        """Keep ``entry`` for ``job_id`` (replacing its earlier one)."""
        self._drop_views([job_id])
        self.entries[job_id] = entry
        if entry.view is not None:
            row = self._rows_for([job_id])[0]
            self._row_of_view[id(entry.view)] = row
            self._moving[row] = entry.moving

    def remember_all(self, job_ids: Sequence[int], entries: Sequence[Scored]) -> None:
        """:meth:`remember` for many jobs, all of whose entries hold views; in C
        but for the jobs' first rows (hundreds of jobs a decision)."""
        self._drop_views(job_ids)
        self.entries.update(zip(job_ids, entries, strict=True))
        rows = self._rows_for(job_ids)
        self._row_of_view.update(zip(map(id, map(_VIEW, entries)), rows, strict=True))
        self._moving[rows] = np.fromiter(map(_MOVING, entries), float, len(entries))

    def _drop_views(self, job_ids: Sequence[int]) -> None:
        by_view = self._row_of_view
        for old in map(self.entries.get, job_ids):
            if old is not None and old.view is not None:
                del by_view[id(old.view)]

    def _rows_for(self, job_ids: Sequence[int]) -> list[int]:
        """The jobs' rows, new ones numbered on (the array grown to hold them)."""
        row_of_job = self._row_of_job
        rows = list(map(row_of_job.get, job_ids))
        if None in rows:
            for i, job_id in enumerate(job_ids):
                if rows[i] is None:
                    rows[i] = row_of_job.setdefault(job_id, len(row_of_job))
            if len(row_of_job) > len(self._moving):
                grown = np.empty(2 * len(row_of_job))
                grown[:len(self._moving)] = self._moving
                self._moving = grown
        return rows  # type: ignore[return-value]  # no None left

    def changed(self, job_id: int, entry: Scored) -> None:
        """``entry``, kept for ``job_id`` with a view, was updated in place."""
        self._moving[self._row_of_job[job_id]] = entry.moving

    def clear(self) -> None:
        self.entries.clear()
        self._row_of_view.clear()
        self._row_of_job.clear()

    def keep_only(self, job_ids: Sequence[int]) -> None:
        """Forget the entries of jobs not in ``job_ids``; the rows are renumbered."""
        keep = set(job_ids)
        entries = {k: v for k, v in self.entries.items() if k in keep}
        self.clear()
        # An entry without a view (a fit still pending) has no row to find.
        viewed = {k: v for k, v in entries.items() if v.view is not None}
        self.remember_all(list(viewed), list(viewed.values()))
        self.entries.update(entries)


@dataclass(frozen=True)
class Ranking(Sequence[JobView]):
    """The jobs a decision ranks, without building a list of them all:
    ``jobs[at]`` (positions, in order) followed by ``more``.

    Indexable and iterable as a sequence of jobs; ``best_first`` reads only
    the few it ranks on top."""

    jobs: Sequence[JobView]
    at: np.ndarray
    more: list[JobView]

    def __len__(self) -> int:
        return len(self.at) + len(self.more)

    @overload
    def __getitem__(self, index: int) -> JobView: ...

    @overload
    def __getitem__(self, index: slice) -> list[JobView]: ...

    def __getitem__(self, index: int | slice) -> JobView | list[JobView]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        head = len(self.at)
        if index < 0:
            index += len(self)
        return self.jobs[self.at[index]] if index < head else self.more[index - head]

    def __iter__(self) -> Iterator[JobView]:
        yield from map(self.jobs.__getitem__, self.at.tolist())
        yield from self.more

    def plus(self, more: list[JobView]) -> Ranking:
        return Ranking(self.jobs, self.at, self.more + more)
