"""SLAQ: give each slot to the largest predicted normalised loss reduction per slot-second."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from backend.scheduling.allocation import fill_slots
from backend.scheduling.guards import Ranked, WaitBounds, split_overdue
from backend.scheduling.predictor import CurveFit, LossPredictor
from backend.scheduling.types import Grant, JobView, Snapshot


def planned_iterations(snapshot: Snapshot, job: JobView, fit: CurveFit | None) -> int:
    """The chunk length :func:`~backend.scheduling.allocation.chunk_iterations`
    will grant, computed from the memoised timing instead of re-summing the
    job's recent points (which dominates the cost with thousands of jobs)."""
    spi = fit.seconds_per_iteration if fit is not None else None
    wanted = snapshot.default_chunk_iterations if spi is None else int(snapshot.chunk_seconds / spi)
    return max(1, min(wanted, job.max_iterations - job.iterations_done))


@dataclass
class SlaqPolicy:
    """Quality-driven scheduling (SLAQ, SoCC'17) with an optimistic predictor.

    Each waiting job with history is scored by the loss drop its next chunk
    of ``n`` iterations is predicted to bring, plus ``exploration`` times the
    recent prediction error (an upper confidence bound), divided by the
    largest drop the job has shown (initial loss to lowest loss, so jobs with
    different loss scales compare) and by the chunk's seconds, times the
    tenant's share weight. Order of service:

    1. jobs past a wait bound (:class:`~backend.scheduling.guards.WaitBounds`);
    2. new jobs (no history) within the warm-up share of the slots;
    3. everything else by score, new jobs scored at ``new_job_gain``.

    Tenant slot quotas are enforced by ``fill_slots``.

    Worked example: 1 free slot of 2 (``chunk_seconds=1``); job 1 fell from
    1.0 to 0.5 over 40 iterations at 0.01 s each and is still falling fast,
    job 2 fell from 1.0 to 0.2 and has been flat at 0.2 for its last 100
    iterations (same speed), job 3 is running. Job 1's next 100 iterations
    are predicted to drop its loss by roughly 0.2, i.e. 0.4 of the 0.5 it
    has shown, per 1 s; job 2's predicted drop is about 0. One grant: job 1,
    100 iterations, reason "rank 1 by predicted gain: 0.4 of its largest
    drop ...", ``predicted_gain`` about 0.4.
    """

    name: str = "slaq"
    bounds: WaitBounds | None = field(default_factory=WaitBounds)
    exploration: float = 1.0
    warmup_share: float = 0.5
    new_job_gain: float = 1.0
    predictor: LossPredictor = field(default_factory=LossPredictor)
    _scores: dict[int, tuple[CurveFit, int, float]] = field(default_factory=dict)

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        waiting = snapshot.waiting()
        if snapshot.free_slots <= 0 or not waiting:
            return []
        self._forget_finished(snapshot)
        overdue, rest = split_overdue(snapshot, self.bounds, waiting)
        known = [job for job in rest if job.losses]
        fit_of = dict(zip((job.job_id for job in known), self.predictor.fit_many(known),
                          strict=True))
        new = [job for job in rest if not (job.job_id in fit_of and fit_of[job.job_id].known)]
        warm = self._warmup(snapshot, new)
        warm_ids = {job.job_id for job, _, _ in warm}
        ranked = [job for job in rest if job.job_id not in warm_ids]
        weights = {t: snapshot.tenant(t).share_weight for t in {j.tenant_id for j in ranked}}
        prior = self.new_job_gain / snapshot.chunk_seconds
        scores = np.empty(len(ranked))
        for i, job in enumerate(ranked):
            fit = fit_of.get(job.job_id)
            per_second = prior if fit is None or not fit.known else self._score(snapshot, job, fit)
            scores[i] = weights[job.tenant_id] * per_second
        # Highest score first; ties to the longest-waiting job, then the lowest id.
        order = np.lexsort((np.array([j.job_id for j in ranked]),
                            np.array([j.waiting_since for j in ranked]), -scores))
        explained = self._explained([ranked[i] for i in order], scores[order], snapshot, fit_of)
        return fill_slots(snapshot, chain(overdue, warm, explained))

    def _score(self, snapshot: Snapshot, job: JobView, fit: CurveFit) -> float:
        """Optimistic normalised gain per slot-second, memoised per fit and chunk length."""
        n = planned_iterations(snapshot, job, fit)
        cached = self._scores.get(job.job_id)
        if cached is not None and cached[0] is fit and cached[1] == n:
            return cached[2]
        gain = self._normalised(fit, fit.drop(n) + self.exploration * fit.uncertainty(n))
        seconds = n * (fit.seconds_per_iteration or snapshot.chunk_seconds / n)
        per_second = gain / max(seconds, 1e-9)
        self._scores[job.job_id] = (fit, n, per_second)
        return per_second

    def _warmup(self, snapshot: Snapshot, new: list[JobView]) -> list[Ranked]:
        """New jobs served first, up to ``warmup_share`` of all slots (counting
        new jobs whose first chunk is already running)."""
        if not new:
            return []
        running_new = sum(1 for job in snapshot.jobs if job.running and not job.losses)
        allowance = math.ceil(self.warmup_share * snapshot.total_slots) - running_new
        new = sorted(new, key=lambda job: (job.waiting_since, job.job_id))[: max(allowance, 0)]
        return [(job, "warm-up share: new job, its first chunk measures its curve", None)
                for job in new]

    @staticmethod
    def _normalised(fit: CurveFit, drop: float) -> float:
        scale = max(fit.largest_drop, 1e-3 * abs(fit.initial_loss), 1e-12)
        return drop / scale

    def _explained(self, ordered: list[JobView], scores: np.ndarray, snapshot: Snapshot,
                   fit_of: dict[int, CurveFit]) -> Iterator[Ranked]:
        # Reasons are formatted lazily: only the jobs fill_slots looks at pay for it.
        for rank, (job, score) in enumerate(zip(ordered, scores, strict=True), start=1):
            fit = fit_of.get(job.job_id)
            if fit is None or not fit.known:
                yield job, f"rank {rank}: new job, assumed gain {self.new_job_gain:g}", None
                continue
            n = planned_iterations(snapshot, job, fit)
            point = self._normalised(fit, fit.drop(n))
            yield job, (
                f"rank {rank} by predicted gain: {point:.3g} of its largest drop over "
                f"{n} iterations ({score:.3g} per slot-second incl. uncertainty, "
                f"{fit.family} fit)"
            ), point

    def _forget_finished(self, snapshot: Snapshot) -> None:
        if max(len(self._scores), len(self.predictor)) > 2 * len(snapshot.jobs) + 64:
            present = [job.job_id for job in snapshot.jobs]
            self.predictor.forget_except(present)
            keep = set(present)
            self._scores = {k: v for k, v in self._scores.items() if k in keep}
