"""The memoised, batched predictor: one :class:`CurveFit` per job, refitted
only when the job reported new points, at most ``refit_budget`` jobs a call
(never-fitted first, then the oldest fits), all of a call's jobs in one
batched numpy fit."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backend.scheduling.curves import FAMILIES, asymptote, evaluate, fit_all
from backend.scheduling.loss_history import LossHistory
from backend.scheduling.predictor.bands import _POOLED_MISSES, _calibrated, _quantile
from backend.scheduling.predictor.fit import (
    FLAT,
    GEOMETRIC,
    PENDING,
    UNKNOWN,
    CurveFit,
    PredictorConfig,
)
from backend.scheduling.predictor.windows import (
    _Figures,
    _holdout_errors,
    _mean_over,
    _newest_points,
    _smooth,
    _tracked_errors,
    _Windows,
    _windows,
)
from backend.scheduling.types import JobView


def history_key(job: JobView) -> tuple[int, int]:
    """Identifies a job's loss history: (newest iteration, number of points)."""
    history = job.history
    return (history.newest_iteration, history.size)


@dataclass
class LossPredictor:
    """Memoised, batched loss predictor; one instance per policy instance.

    Example::

        predictor = LossPredictor()
        fit = predictor.fit(job)          # refits only if job has new points
        fit.drop(50), fit.predict(50)     # predicted drop, (loss, low, high)
    """

    config: PredictorConfig = field(default_factory=PredictorConfig)
    _fits: dict[int, CurveFit] = field(default_factory=dict)
    _refitted: set[int] = field(default_factory=set)
    _pending: dict[int, CurveFit] = field(default_factory=dict)
    _misses: deque[float] = field(default_factory=lambda: deque(maxlen=_POOLED_MISSES))
    _pooled: tuple[int, float | None] = (-1, None)
    _stale: dict[int, JobView] = field(default_factory=dict)
    """The newest view of each job the budget left on an older fit."""
    _stale_order: list[tuple[int, int]] = field(default_factory=list)
    """Heap of ``(made, job id)`` over ``_stale``: the oldest fit first."""
    refreshed: dict[int, CurveFit] = field(default_factory=dict)
    """New fits, by job id, the last call made for jobs it was not handed
    (left on an older fit by an earlier call): a caller that memoises
    anything computed from a fit must recompute it for these."""
    refits: int = 0
    deferred: int = 0
    calls: int = 0

    def __len__(self) -> int:
        return len(self._fits)

    def fit(self, job: JobView) -> CurveFit:
        return self.fit_many([job])[0]

    def fit_many(self, jobs: Sequence[JobView]) -> list[CurveFit]:
        """Current fits for ``jobs``, refitting (in one batch) those with new
        points, at most ``config.refit_budget`` of them: never-fitted jobs
        first, then the oldest fits, whether handed over now or left on an
        older fit by an earlier call (see ``refreshed``). A job beyond the
        budget keeps its previous fit, or gets a ``PENDING`` one if it has
        none.

        A caller need not hand over a job again until it has new points: so
        10,000 jobs cost a decision only the jobs that changed."""
        self.calls += 1
        fresh: list[JobView] = []
        fits, stale, order = self._fits, self._stale, self._stale_order
        handed: set[int] = set()
        for job in jobs:
            cached = fits.get(job.job_id)
            if cached is None:
                fresh.append(job)
                continue
            history = job.history  # history_key, inline: a round passes thousands of jobs
            if cached.key != (history.newest_iteration, history.size):
                if job.job_id not in stale:
                    heapq.heappush(order, (cached.made, job.job_id))
                stale[job.job_id] = job
                handed.add(job.job_id)
        budget = self.config.refit_budget
        if len(fresh) + len(stale) <= budget:
            chosen = fresh + list(stale.values())
            stale.clear()
            order.clear()
        else:
            chosen = fresh[:budget]
            while len(chosen) < budget and order:
                chosen.append(stale.pop(heapq.heappop(order)[1]))
        self.deferred = max(len(fresh) - budget, 0) + len(stale)
        if chosen:
            self._refit(chosen)
        self.refreshed = {job.job_id: fits[job.job_id] for job in chosen[len(fresh):]
                          if job.job_id not in handed}
        pending = self._pending
        for job in fresh[budget:]:  # never fitted, beyond the budget
            if job.job_id not in pending:
                pending[job.job_id] = _pending(job)
        return [fits.get(job.job_id) or pending[job.job_id] for job in jobs]

    def take_refitted(self) -> list[CurveFit]:
        """Fits made since the last call, newest per job; the record is then cleared.

        Lets the live scheduler publish exactly the fits that changed,
        however many times the policy fitted in between.
        """
        fits = [self._fits[job_id] for job_id in self._refitted if job_id in self._fits]
        self._refitted.clear()
        return fits

    def forget_except(self, job_ids: Iterable[int]) -> None:
        """Drop memoised fits of jobs that are gone (finished or cancelled)."""
        keep = set(job_ids)
        for job_id in [j for j in self._fits if j not in keep]:
            del self._fits[job_id]
        self._refitted &= keep
        self._pending = {j: fit for j, fit in self._pending.items() if j in keep}
        self._stale = {j: job for j, job in self._stale.items() if j in keep}
        self._stale_order = [(made, j) for made, j in self._stale_order if j in self._stale]
        heapq.heapify(self._stale_order)

    def _pooled_z(self) -> float | None:
        """The coverage quantile of every job's recent misses, once per call
        (young jobs' bands borrow it)."""
        if self._pooled[0] != self.calls:
            self._pooled = (self.calls, _quantile(list(self._misses)))
        return self._pooled[1]

    # -- refitting -----------------------------------------------------------

    def _refit(self, jobs: Sequence[JobView]) -> None:
        self.refits += len(jobs)
        self._refitted.update(job.job_id for job in jobs)
        for job in jobs:
            self._pending.pop(job.job_id, None)
        fitted: list[JobView] = []
        previous: list[CurveFit | None] = []
        bases: list[dict[str, Any]] = []
        for job in jobs:
            stats = self._statistics(job)
            if job.history.size >= self.config.min_points:
                fitted.append(job)
                previous.append(self._fits.get(job.job_id))
                bases.append(stats)
            else:
                self._fits[job.job_id] = CurveFit(**stats)
        if fitted:
            self._fit_windows(_windows(self.config, fitted, previous), bases)

    def _statistics(self, job: JobView) -> dict[str, Any]:
        """Running statistics, updated from new points only, plus the geometric
        fit: a :class:`CurveFit`'s fields (a fitted job's fit is made once, by
        :meth:`_choose`)."""
        history = job.history
        losses = history.values
        previous = self._fits.get(job.job_id)
        if len(losses):
            initial = job.initial_loss if job.initial_loss is not None else float(losses[0])
        else:
            initial = job.initial_loss if job.initial_loss is not None else math.nan
        if previous is None:
            lowest, step, start = initial, 0.0, 0
            prev_loss = initial
        else:
            lowest, step = previous.lowest_loss, previous.largest_step_drop
            start = int(history.iterations.searchsorted(previous.k_last, side="right"))
            prev_loss = float(losses[start - 1]) if start > 0 else math.nan
        if start < len(losses):
            # A chunk adds hundreds of points and a round refits thousands of
            # jobs: one array pass, not a Python loop, per job.
            lowest, step = _new_extremes(losses[start:], lowest, step, prev_loss)
        spi = history.mean_seconds(self.config.timing_points)
        newest = (history.newest_iteration, float(losses[-1])) if start < history.size else None
        misses, z = _calibrated(previous, newest, self._misses, self._pooled_z)
        family, anchor = UNKNOWN, math.nan
        params: tuple[float, ...] = ()
        if len(losses):
            anchor = float(losses[-1])
            ratio = _geometric_ratio(history, initial)
            if ratio is not None:
                family, params = GEOMETRIC, (ratio,)
        return dict(
            job_id=job.job_id, key=history_key(job), family=family, params=params,
            k_last=history.newest_iteration, k0=0.0, span=1.0, lo=0.0,
            height=1.0, anchor=anchor, noise=0.0,
            drift=abs(anchor) * 0.05 if family == GEOMETRIC else 0.0,
            initial_loss=initial, lowest_loss=lowest, largest_step_drop=step,
            seconds_per_iteration=None if spi is None else max(spi, 1e-6),
            errors=previous.errors if previous is not None else (), made=self.calls,
            misses=misses, z=z,
        )

    def _fit_windows(self, batch: _Windows, bases: list[dict[str, Any]]) -> None:
        x, y, w, held = batch.x, batch.y, batch.w, batch.held
        full = fit_all(x, y, w)
        oos, horizon, tracked = _tracked_errors(batch.jobs, batch.previous)
        first = np.flatnonzero(~tracked)
        if len(first):
            # No earlier fit to judge: hold out the newest points instead.
            oos[first], horizon[first] = _holdout_errors(x[first], y[first], w[first],
                                                         held[first])
            horizon[first] *= batch.span[first]
        used = w > 0
        weight_sum = np.maximum(w.sum(1), 1e-12)
        level = np.empty((len(batch.jobs), len(FAMILIES)))  # scaled loss now, re-anchored
        newest = _newest_points(used)  # the same for every family
        ones = np.ones((len(batch.jobs), 1))
        for f, fit in enumerate(full):
            pred = evaluate(fit.family, fit.params, x)
            now = evaluate(fit.family, fit.params, ones)[:, 0]
            level[:, f] = now + _mean_over(y - pred, newest)
        sse = np.stack([fit.sse for fit in full], 1)
        noise = np.sqrt(sse / weight_sum[:, None])
        floors = np.stack([asymptote(fit.family, fit.params) for fit in full], 1)
        # Every per-job figure as Python floats in one conversion each: the
        # loop below builds the jobs' fits and must not pay numpy's scalars.
        rows = zip(oos.tolist(), np.maximum(horizon, 1.0).tolist(), level.tolist(),
                   noise.tolist(), floors.tolist(), np.isfinite(sse).tolist(),
                   np.stack([fit.params for fit in full], 1).tolist(), batch.k0.tolist(),
                   batch.span.tolist(), batch.lo.tolist(), batch.height.tolist(), strict=True)
        fits = self._fits
        for i, (job, figures, base) in enumerate(zip(batch.jobs, map(_Figures._make, rows), bases,
                                                     strict=True)):
            fits[job.job_id] = self._choose(figures, batch, i, base)

    def _choose(self, fig: _Figures, batch: _Windows, i: int, base: dict[str, Any]) -> CurveFit:
        """The fit of the valid family with the lowest smoothed out-of-sample
        error, from ``base`` (:meth:`_statistics`, which this overwrites)."""
        alpha = self.config.smoothing
        errors, earlier = tuple(fig.oos), base["errors"]
        if len(earlier) == len(errors):
            errors = tuple(_smooth(p, e, alpha) for e, p in zip(errors, earlier, strict=True))
        valid = [f for f in range(len(FAMILIES)) if fig.finite[f]]
        if not valid:
            # No decreasing curve fits: the job looks converged. The base's
            # drift is the few-points fallback's deliberately optimistic 5% an
            # iteration, which would make a flat job look wildly uncertain.
            # (The window's newest points, sliced only here: most fits are valid.)
            newest_y = batch.y[i, max(int(batch.count[i]) - 8, 0):batch.count[i]]
            base.update(family=FLAT, errors=errors, drift=0.0,
                        noise=fig.height * float(np.std(newest_y)))
            return CurveFit(**base)
        f = min(valid, key=lambda v: errors[v])
        err = errors[f] if math.isfinite(errors[f]) else 1.0
        lo, height = fig.lo, fig.height
        base.update(
            family=FAMILIES[f], params=tuple(fig.params[f]), k0=fig.k0, span=fig.span,
            lo=lo, height=height, anchor=lo + height * fig.level[f], noise=height * fig.noise[f],
            drift=height * err / fig.horizon, errors=errors, floor=lo + height * fig.floors[f],
            candidates=tuple(tuple(fig.params[v]) if v in valid else None
                             for v in range(len(FAMILIES))),
        )
        return CurveFit(**base)


def _new_extremes(new: np.ndarray, lowest: float, step: float, before: float
                  ) -> tuple[float, float]:
    """The lowest loss and largest drop between consecutive reports, updated
    with the ``new`` losses that followed the loss ``before``.

    A non-finite loss (a diverged or overflowed step) and the steps to and
    from it are skipped: an infinite "drop" would outrank every job."""
    if not math.isfinite(before):
        before = math.nan
    low = float(np.minimum.reduce(new))
    if math.isfinite(low) and math.isfinite(np.maximum.reduce(new)):
        # The usual case, without the NaN-aware passes: a round refits many
        # jobs (a NaN or an infinity shows in the extremes; the ufuncs' own
        # reductions skip the methods' Python wrappers).
        top = float(np.maximum.reduce(new[:-1] - new[1:])) if len(new) > 1 else -math.inf
        if not math.isnan(before):
            top = max(top, before - float(new[0]))
        lowest = low if math.isnan(lowest) else min(lowest, low)
        return lowest, (step if top == -math.inf else max(step, top))
    new = new.copy()
    new[~np.isfinite(new)] = np.nan
    if not np.isnan(new).all():
        lowest = float(np.nanmin(new)) if math.isnan(lowest) else min(lowest, float(np.nanmin(new)))
    steps = np.concatenate(([before], new[:-1])) - new
    if not np.isnan(steps).all():
        step = max(step, float(np.nanmax(steps)))
    return lowest, step


def _pending(job: JobView) -> CurveFit:
    """Stand-in for a job the budget left unfitted (kept apart from the fits,
    so the job is first in line next call)."""
    return CurveFit(job_id=job.job_id, key=(-1, -1), family=PENDING, params=(), k_last=0,
                    k0=0.0, span=1.0, lo=0.0, height=1.0, anchor=math.nan, noise=0.0,
                    drift=0.0, initial_loss=math.nan, lowest_loss=math.nan,
                    largest_step_drop=0.0, seconds_per_iteration=None)


def _geometric_ratio(history: LossHistory, initial: float) -> float | None:
    """Per-iteration ratio ``r`` with ``L_last = L_ref r^(k_last - k_ref)``.

    The reference is the oldest point (or the initial loss at iteration 0), so
    one noisy step does not decide the ratio. Clamped to (0, 1): geometric
    extrapolation is meant to be optimistic and never predicts a rise.
    """
    last_k, last_l = history.newest_iteration, float(history.values[-1])
    if history.size >= 2:
        ref_k, ref_l = int(history.iterations[0]), float(history.values[0])
    elif not math.isnan(initial):
        ref_k, ref_l = 0, initial
    else:
        return None
    if last_k <= ref_k or ref_l <= 0 or last_l <= 0:
        return None
    ratio = (last_l / ref_l) ** (1.0 / (last_k - ref_k))
    return min(max(ratio, 1e-6), 1.0)
