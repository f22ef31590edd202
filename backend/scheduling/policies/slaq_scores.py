"""The parts of slaq's ranking that hold no policy state: a job's kept
score (:class:`Scored`), the chunk it would be granted, its predicted total
drop and the lazy best-first order of thousands of scores."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter

import numpy as np

from backend.scheduling.predictor import CurveFit
from backend.scheduling.types import JobView, Snapshot


def planned_iterations(snapshot: Snapshot, job: JobView, fit: CurveFit | None) -> int:
    """The chunk length :func:`~backend.scheduling.allocation.chunk_iterations`
    will grant, computed from the memoised timing instead of re-summing the
    job's recent points (which dominates the cost with thousands of jobs)."""
    spi = fit.seconds_per_iteration if fit is not None else None
    wanted = snapshot.default_chunk_iterations if spi is None else int(snapshot.chunk_seconds / spi)
    return max(1, min(wanted, job.max_iterations - job.iterations_done))


@dataclass(slots=True)
class Scored:
    """A job's memoised score: valid while its fit, newest iteration and
    remaining iterations are the ones it was computed for (the memo is
    emptied when the chunk length changes).

    ``view`` is the job view it was computed from (``None`` while the job
    waits for its first fit): the live scheduler and the simulator hand over
    the same view object until the job changes, so for most of 10,000 jobs
    one lookup by the view's identity finds the score still holding. A score
    made from a fit the refit budget kept is redone when the predictor
    refits the job (``LossPredictor.refreshed``).

    ``plain`` and ``moving`` are the whole score, fixed while the view is
    (the LAS part reads its attained service): ``plain`` the index blended
    with LAS per slot-second, ``moving`` that times the job's switch
    discount as if it moved (a job whose trainer is loaded on a free slot
    does not). A refitted job's entry is updated in place (``take``), so the
    lists that hold it this decision see the new score."""

    view: JobView | None
    fit: CurveFit
    remaining: int
    newest: int
    n: int
    rate: float
    weight: float
    point: float
    plain: float = math.nan
    moving: float = math.nan

    def take(self, other: Scored) -> None:
        for name in _SCORED_FIELDS:
            setattr(self, name, getattr(other, name))


_SCORED_FIELDS = tuple(f.name for f in fields(Scored))


def total_drops(initial: np.ndarray, shown: np.ndarray, floor: np.ndarray, cap: float
                ) -> np.ndarray:
    """Predicted total drops: initial loss to the fit's asymptote ``floor``, at
    least the drop ``shown`` (and a sliver of the initial loss) and at most
    ``cap`` times it; ``shown`` where the fit has no finite asymptote.

    ``fmax``/``fmin`` skip a NaN argument as Python's ``max``/``min`` of two
    floats do when it is not the first, so a job whose loss went NaN scores as
    it always did."""
    shown = np.maximum(np.maximum(shown, 1e-3 * np.abs(initial)), 1e-12)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(floor), np.fmin(np.fmax(initial - floor, shown), cap * shown),
                        shown)


def best_first(jobs: Sequence[JobView], scores: np.ndarray, wanted: int
               ) -> Iterator[tuple[JobView, float]]:
    """``jobs`` by score, highest first, ties to the longest-waiting job, then
    the lowest id; lazily.

    Only the top ``wanted`` (and any tied with the last of them) are sorted
    up front, found by a partial sort; the rest are sorted only if the caller
    reads past them (tenant quotas skipped the top ones).
    """
    def ordered(rows: np.ndarray) -> Iterator[tuple[JobView, float]]:
        picked = [jobs[i] for i in rows.tolist()]
        since = np.fromiter(map(_SINCE, picked), float, len(rows))
        ids = np.fromiter(map(_ID, picked), float, len(rows))
        top = scores[rows]
        for i in np.lexsort((ids, since, -top)).tolist():
            yield picked[i], float(top[i])

    # A NaN would defeat the partition; it ranks last, as in a full sort.
    scores = np.where(np.isnan(scores), -np.inf, scores)
    if len(jobs) <= 2 * wanted + 64:
        yield from ordered(np.arange(len(jobs)))
        return
    cut = float(np.partition(scores, len(jobs) - wanted)[len(jobs) - wanted])
    yield from ordered(np.flatnonzero(scores >= cut))
    yield from ordered(np.flatnonzero(scores < cut))


_SINCE = attrgetter("waiting_since")
_ID = attrgetter("job_id")
