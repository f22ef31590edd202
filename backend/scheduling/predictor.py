"""Loss prediction: per-job curve fits, memoised and refitted in batches.

For each job the predictor keeps one :class:`CurveFit`, keyed by the job's
newest reported iteration and point count. A policy instance lives across
scheduling rounds, so only jobs that reported new points since the last round
are refitted, and all of them together in one batched numpy fit
(:func:`backend.scheduling.curves.fit_all`).

How a fit is made (DESIGN §5):

* the window is the newest points plus log-spaced older ones, weighted by
  ``exp(-age / (decay * k_last))`` so recent behaviour dominates;
* every family is fitted twice: once without the newest points, to measure its
  recent out-of-sample error, and once on everything. The family with the
  lowest (smoothed across refits) out-of-sample error is used;
* predictions are re-anchored at the job's recent loss level, so the predicted
  drop is ``f(k) - f(k+n)`` of the curve, never ``L_last - f(k+n)`` (a fit that
  passes above the last point would otherwise predict no gain and starve the
  job for ever);
* with fewer than ``min_points`` points, geometric extrapolation
  ``L_{k+n} = L_k r^n`` is used instead.

The band is ``z * sqrt(noise^2 + (drift * n)^2)``: ``noise`` is the fit's
residual scale, ``drift`` the measured out-of-sample error per iteration
ahead, and ``z`` is calibrated on how far the job's newest points fell from
its earlier fits (:func:`_calibrated`), so the band holds about
``BAND_COVERAGE`` of them.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np

from backend.scheduling.curves import FAMILIES, asymptote, evaluate, fit_all
from backend.scheduling.loss_history import LossHistory
from backend.scheduling.types import JobView, LossPoint

GEOMETRIC = "geometric"
"""Family name of the few-points fallback."""

FLAT = "flat"
"""Family name when no decreasing curve fits: the job looks converged."""

UNKNOWN = "unknown"
"""Family name for a job with too little history to extrapolate at all."""

PENDING = "pending"
"""Family name for a job with history that has not been fitted yet: more jobs
needed a first fit than the refit budget allowed (a scheduler restart)."""


@dataclass(frozen=True)
class PredictorConfig:
    """Tuning of the curve fits; the defaults are what the benchmarks use."""

    window: int = 40
    dense_tail: int = 16
    history_frac: float = 0.5
    min_history: int = 24
    decay: float = 0.5
    min_points: int = 6
    holdout_frac: float = 0.25
    smoothing: float = 0.5
    timing_points: int = 50
    refit_budget: int = 64
    """Most jobs fitted per call, which bounds decision time when hundreds of
    slots report at once or a restarted scheduler meets thousands of jobs.
    Jobs never fitted go first, then those whose fit is oldest; the rest keep
    their previous fit, or are ``PENDING`` if they have none. A job left on
    an older fit is remembered and refitted in a later call even if it is
    not handed over again."""


@dataclass(frozen=True)
class CurveFit:
    """One job's fitted curve plus the statistics policies normalise with.

    Losses are in the job's own units. ``anchor`` is the job's current loss
    level (the fit re-anchored at its newest points), ``initial_loss`` and
    ``lowest_loss`` bound the drop it has shown, ``largest_step_drop`` is the
    largest drop between two consecutive reports (SLAQ's normaliser).
    """

    job_id: int
    key: tuple[int, int]
    family: str
    params: tuple[float, ...]
    k_last: int
    k0: float
    span: float
    lo: float
    height: float
    anchor: float
    noise: float
    drift: float
    initial_loss: float
    lowest_loss: float
    largest_step_drop: float
    seconds_per_iteration: float | None
    errors: tuple[float, ...] = ()
    floor: float = -math.inf
    candidates: tuple[tuple[float, ...] | None, ...] = ()
    made: int = 0
    """The predictor's call number when this fit was made (oldest are refitted first)."""
    misses: tuple[float, ...] = ()
    """How far the job's recent points fell from earlier fits' predictions, in
    band widths (newest last): what calibrates ``z``."""
    z: float = 1.0
    """Band multiplier: the ``BAND_COVERAGE`` quantile of ``misses``."""

    def drop(self, n: int, after: int = 0) -> float:
        """Predicted loss decrease over the ``n`` iterations that start
        ``after`` iterations past the fit's newest point (>= 0); ``after`` > 0
        reads a fit the refit budget kept from the job's newer position."""
        if n <= 0 or self.family in (FLAT, UNKNOWN, PENDING):
            return 0.0
        if self.family == GEOMETRIC:
            ratio = self.params[0]
            return max(self.anchor, 0.0) * ratio**after * (1.0 - ratio**n)
        start = 1.0 + after / self.span
        now = _scaled(self.family, self.params, start)
        later = _scaled(self.family, self.params, start + n / self.span)
        return max(self.height * (now - later), 0.0)

    def uncertainty(self, n: int) -> float:
        """How wrong the drop over ``n`` iterations has recently been (loss units)."""
        return self.drift * max(n, 0)

    def predict(self, n: int) -> tuple[float, float, float]:
        """Loss ``n`` iterations ahead: ``(predicted, low, high)``."""
        mean = self.anchor - self.drop(n)
        width = self.band_width(n)
        return mean, mean - width, mean + width

    def band_width(self, n: int) -> float:
        """Half-width of the band ``n`` iterations ahead: the model's spread,
        ``sqrt(noise^2 + (drift n)^2)``, scaled by ``z`` so that the band held
        about ``BAND_COVERAGE`` of the job's own recent points."""
        return self.z * math.hypot(self.noise, self.uncertainty(n))

    @property
    def largest_drop(self) -> float:
        """The largest drop the job has shown: initial loss to its lowest loss."""
        return self.initial_loss - self.lowest_loss

    @property
    def known(self) -> bool:
        """Whether the job has shown enough to extrapolate (or will once fitted)."""
        return self.family != UNKNOWN

    @property
    def pending(self) -> bool:
        """Not fitted yet (beyond the refit budget): nothing is known of its curve."""
        return self.family == PENDING

    def rising(self, margin: float) -> bool:
        """Whether the newest level is clearly above the lowest loss
        (:func:`rising_level`)."""
        return bool(rising_level(self.anchor, self.lowest_loss, self.noise, self.largest_drop,
                                 margin))


def rising_level(anchor: Any, lowest: Any, noise: Any, shown: Any, margin: float) -> Any:
    """Whether a fit's newest level ``anchor`` is clearly above the ``lowest``
    loss: by three ``noise`` widths plus ``margin`` of the drop ``shown`` (a
    diverging job, an overfitting validation loss). The families are all
    decreasing, so such a fit's extrapolation means nothing. Floats or
    arrays of them (a policy tests hundreds of fits at once)."""
    return anchor > lowest + 3 * noise + margin * shown


BAND_COVERAGE = 0.95
"""Share of a job's recent misses its band holds: the split-conformal
quantile ``z`` is taken at this level. The band is asked to hold the truth
a chunk ahead 90% of the time, but the misses are judged at each refit's
newest point (nearer than a chunk ahead while a job is young), and a
quantile of past misses under-covers when a curve changes course. At 0.9
the band held the truth a chunk ahead 83-92% of the time on the 0.1 s rows
of ``tests.bench.chunk_prediction --every-chunk``, at 0.95 94-96%."""

_PRIOR_Z = NormalDist().inv_cdf((1 + BAND_COVERAGE) / 2)
"""``z`` before any job has a miss to calibrate on (a normal error's
quantile): 1 made the first bands of a young portal hold the truth 75-88%
of the time at 1 s chunks."""

_MISSES_KEPT = 40
"""Recent misses a job's band is calibrated on."""

_OWN_MISSES = 10
"""A job with fewer misses of its own takes the quantile of every job's recent misses."""

_POOLED_MISSES = 400
"""Recent misses of all jobs kept for that."""


def _scaled(family: str, params: tuple[float, ...], x: float) -> float:
    """Scalar form of :func:`backend.scheduling.curves.evaluate` (no numpy overhead)."""
    if family == "inv_quad":
        q = params[0] + params[1] * x + params[2] * x * x
        return params[3] + 1.0 / max(q, 1e-12)
    if family == "exp":
        return params[1] + params[0] * math.exp(-params[2] * x)
    if family == "inv_lin":
        return params[1] + params[0] / (x + params[2])
    raise ValueError(family)


def drop_model(fits: Sequence[CurveFit], after: np.ndarray
               ) -> Callable[[np.ndarray], np.ndarray]:
    """:meth:`CurveFit.drop` for many fits at once: the returned function maps
    ``(J, M)`` iteration counts (row ``j`` for ``fits[j]``) to the predicted
    drops; ``after`` is ``(J,)``.

    One array pass per family instead of a Python call per fit and horizon
    (a round re-reads hundreds of jobs' fits at several horizons); the
    fits' parameters are gathered once, however many horizons are asked."""
    by_family: dict[str, list[int]] = {}
    for j, fit in enumerate(fits):
        by_family.setdefault(fit.family, []).append(j)
    groups: list[tuple[str, list[int], tuple[np.ndarray, ...]]] = []
    for family, rows in by_family.items():
        if family in (FLAT, UNKNOWN, PENDING):
            continue
        picked = [fits[j] for j in rows]
        later = after[rows, None]
        if family == GEOMETRIC:
            ratio = np.array([f.params[0] for f in picked])[:, None]
            anchor = np.array([max(f.anchor, 0.0) for f in picked])[:, None]
            groups.append((family, rows, (ratio, anchor * ratio**later)))
            continue
        params = np.array([f.params for f in picked])
        span = np.array([f.span for f in picked])[:, None]
        height = np.array([f.height for f in picked])[:, None]
        start = 1.0 + later / span
        groups.append((family, rows, (params, span, height, start,
                                      evaluate(family, params, start))))

    def drop(n: np.ndarray) -> np.ndarray:
        out = np.zeros(n.shape)
        for family, rows, arrays in groups:
            m = n[rows]
            if family == GEOMETRIC:
                ratio, scaled = arrays
                out[rows] = scaled * (1.0 - ratio**m)
                continue
            params, span, height, start, now = arrays
            later = evaluate(family, params, start + m / span)
            out[rows] = np.maximum(height * (now - later), 0.0)
        out[n <= 0] = 0.0
        return out

    return drop


def history_key(job: JobView) -> tuple[int, int]:
    """Identifies a job's loss history: (newest iteration, number of points)."""
    history = job.history
    return (history.newest_iteration, history.size)


class _Figures(NamedTuple):
    """One refitted job's figures, per family where a list, as Python floats."""

    oos: list[float]
    horizon: float
    level: list[float]
    noise: list[float]
    floors: list[float]
    finite: list[bool]
    params: list[list[float]]
    k0: float
    span: float
    lo: float
    height: float


@dataclass
class _Windows:
    """The fitted windows of a batch of jobs: zero-padded ``(J, window)``
    arrays in scaled coordinates (padding has weight 0), the per-job scales,
    and each job's fit before this refit (``None`` for a first fit)."""

    jobs: list[JobView]
    previous: list[CurveFit | None]
    x: np.ndarray
    y: np.ndarray
    w: np.ndarray
    held: np.ndarray
    count: np.ndarray
    k0: np.ndarray
    span: np.ndarray
    lo: np.ndarray
    height: np.ndarray


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
        for job in jobs:
            earlier = self._fits.get(job.job_id)
            self._fits[job.job_id] = self._statistics(job)
            if job.history.size >= self.config.min_points:
                fitted.append(job)
                previous.append(earlier)
        if fitted:
            self._fit_windows(_windows(self.config, fitted, previous))

    def _statistics(self, job: JobView) -> CurveFit:
        """Running statistics, updated from new points only, plus the geometric fit."""
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
            start = int(np.searchsorted(history.iterations, previous.k_last, side="right"))
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
        return CurveFit(
            job_id=job.job_id, key=history_key(job), family=family, params=params,
            k_last=history.newest_iteration, k0=0.0, span=1.0, lo=0.0,
            height=1.0, anchor=anchor, noise=0.0,
            drift=abs(anchor) * 0.05 if family == GEOMETRIC else 0.0,
            initial_loss=initial, lowest_loss=lowest, largest_step_drop=step,
            seconds_per_iteration=None if spi is None else max(spi, 1e-6),
            errors=previous.errors if previous is not None else (), made=self.calls,
            misses=misses, z=z,
        )

    def _fit_windows(self, batch: _Windows) -> None:
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
        for f, fit in enumerate(full):
            pred = evaluate(fit.family, fit.params, x)
            now = evaluate(fit.family, fit.params, np.ones((len(batch.jobs), 1)))[:, 0]
            level[:, f] = now + _recent_offset(y - pred, used)
        sse = np.stack([fit.sse for fit in full], 1)
        noise = np.sqrt(sse / weight_sum[:, None])
        floors = np.stack([asymptote(fit.family, fit.params) for fit in full], 1)
        # Every per-job figure as Python floats in one conversion each: the
        # loop below builds the jobs' fits and must not pay numpy's scalars.
        rows = zip(oos.tolist(), np.maximum(horizon, 1.0).tolist(), level.tolist(),
                   noise.tolist(), floors.tolist(), np.isfinite(sse).tolist(),
                   np.stack([fit.params for fit in full], 1).tolist(), batch.k0.tolist(),
                   batch.span.tolist(), batch.lo.tolist(), batch.height.tolist(), strict=True)
        for i, (job, figures) in enumerate(zip(batch.jobs, map(_Figures._make, rows),
                                               strict=True)):
            self._choose(job, figures, batch.y[i, max(int(batch.count[i]) - 8, 0):batch.count[i]])

    def _choose(self, job: JobView, fig: _Figures, newest_y: np.ndarray) -> None:
        """Keep the valid family with the lowest smoothed out-of-sample error."""
        base = self._fits[job.job_id]
        alpha = self.config.smoothing
        errors = tuple(fig.oos)
        if len(base.errors) == len(errors):
            errors = tuple(_smooth(p, e, alpha) for e, p in zip(errors, base.errors, strict=True))
        valid = [f for f in range(len(FAMILIES)) if fig.finite[f]]
        if not valid:
            # No decreasing curve fits: the job looks converged. The base's
            # drift is the few-points fallback's deliberately optimistic 5% an
            # iteration, which would make a flat job look wildly uncertain.
            self._fits[job.job_id] = replace(base, family=FLAT, errors=errors, drift=0.0,
                                             noise=fig.height * float(np.std(newest_y)))
            return
        f = min(valid, key=lambda v: errors[v])
        err = errors[f] if math.isfinite(errors[f]) else 1.0
        lo, height = fig.lo, fig.height
        self._fits[job.job_id] = replace(
            base, family=FAMILIES[f], params=tuple(fig.params[f]), k0=fig.k0, span=fig.span,
            lo=lo, height=height, anchor=lo + height * fig.level[f], noise=height * fig.noise[f],
            drift=height * err / fig.horizon, errors=errors, floor=lo + height * fig.floors[f],
            candidates=tuple(tuple(fig.params[v]) if v in valid else None
                             for v in range(len(FAMILIES))),
        )


def _new_extremes(new: np.ndarray, lowest: float, step: float, before: float
                  ) -> tuple[float, float]:
    """The lowest loss and largest drop between consecutive reports, updated
    with the ``new`` losses that followed the loss ``before``.

    A non-finite loss (a diverged or overflowed step) and the steps to and
    from it are skipped: an infinite "drop" would outrank every job."""
    if not math.isfinite(before):
        before = math.nan
    if np.isfinite(new).all():
        # The usual case, without the NaN-aware passes: a round refits many jobs.
        low = float(new.min())
        top = float((new[:-1] - new[1:]).max()) if len(new) > 1 else -math.inf
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


@functools.lru_cache(maxsize=4096)
def _window_picks(cfg: PredictorConfig, n: int) -> np.ndarray:
    """Positions, oldest first, of the points a window of ``n`` points fits:
    the newest ``dense_tail`` and evenly spaced older ones of the recent part;
    the same for every job of that length, so computed once."""
    recent = min(n, max(cfg.min_history, math.ceil(cfg.history_frac * n)))
    ages = np.unique(np.concatenate([
        np.arange(min(cfg.dense_tail, n)),
        np.round(np.linspace(0, recent - 1, cfg.window - cfg.dense_tail)).astype(int),
    ]))
    picks = n - 1 - ages[::-1]
    picks.flags.writeable = False  # shared by every call (cached)
    return picks


def _windows(cfg: PredictorConfig, jobs: list[JobView], previous: list[CurveFit | None]
             ) -> _Windows:
    """The jobs' windows in one batch.

    Only the recent part of a history is fitted: early, steep losses would
    dominate a least-squares fit and hide the tail's curvature. Each point is
    weighted by ``exp(-age / (decay * span))``; the newest quarter of the span
    (at least the two newest points, never the four oldest) is held out when
    a job has no earlier fit to judge families by."""
    size = cfg.window
    k = np.zeros((len(jobs), size))
    loss = np.zeros((len(jobs), size))
    count = np.empty(len(jobs), dtype=np.int64)
    for i, job in enumerate(jobs):
        history = job.history
        picked = _window_picks(cfg, history.size)
        m = len(picked)
        k[i, :m] = history.iterations[picked]
        loss[i, :m] = history.values[picked]
        count[i] = m
    valid = np.arange(size) < count[:, None]
    k0, k_last = k[:, 0], k[np.arange(len(jobs)), count - 1]
    span = np.maximum(k_last - k0, 1.0)
    lo = np.where(valid, loss, np.inf).min(1)
    height = np.maximum(np.where(valid, loss, -np.inf).max(1) - lo,
                        1e-12 * np.maximum(1.0, np.abs(lo)))
    weights = np.exp(-(k_last[:, None] - k) / np.maximum(cfg.decay * span, 1.0)[:, None])
    position = np.arange(size)
    held = (k > (k_last - cfg.holdout_frac * span)[:, None]) | (position >= (count - 2)[:, None])
    held &= valid & (position >= 4)
    return _Windows(
        jobs, previous,
        x=np.where(valid, (k - k0[:, None]) / span[:, None], 0.0),
        y=np.where(valid, (loss - lo[:, None]) / height[:, None], 0.0),
        w=np.where(valid, weights, 0.0), held=held, count=count,
        k0=k0, span=span, lo=lo, height=height)


def _holdout_errors(x: np.ndarray, y: np.ndarray, w: np.ndarray, held: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Each family's error on the held-out newest points (scaled units), re-anchored
    at the newest training points, and the mean scaled horizon of those points."""
    holdout = fit_all(x, y, np.where(held, 0.0, w))
    test = (held & (w > 0)).astype(float)
    train = ~held & (w > 0)
    last_train = np.maximum(train.cumsum(1).argmax(1), 0)
    oos = np.zeros((x.shape[0], len(FAMILIES)))
    for f, fit in enumerate(holdout):
        pred = evaluate(fit.family, fit.params, x)
        offset = _recent_offset(y - pred, train)
        err = np.abs(y - pred - offset[:, None]) * test
        mean_err = err.sum(1) / np.maximum(test.sum(1), 1)
        oos[:, f] = np.where(np.isfinite(fit.sse), mean_err, np.inf)
    rows = np.arange(x.shape[0])
    horizon = (x * test).sum(1) / np.maximum(test.sum(1), 1) - x[rows, last_train]
    return oos, horizon


_ANCHOR_POINTS = 3
"""Newest points whose mean residual re-anchors a fit. The last point alone
predicts one step ahead slightly better on smooth curves, but its noise leaks
into the tracked errors (hence the exploration bonus) and scheduled worse."""

_TRACKED_POINTS = 12
"""New points each earlier fit is judged on (evenly spaced over what arrived)."""


def _tracked_errors(jobs: Sequence[JobView], fits: Sequence[CurveFit | None]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How well each family's *previous* fit predicted the points that arrived
    since: a true out-of-sample error, and free, because those fits exist.

    For every window at once: per-family errors ``(J, F)`` in the previous
    fit's scaled units, the mean horizon (iterations) of the judged points
    ``(J,)``, and whether the window had an earlier fit to judge ``(J,)``
    (rows without one hold ``inf`` and 1).
    """
    count = len(jobs)
    oos = np.full((count, len(FAMILIES)), np.inf)
    horizon = np.ones(count)
    tracked = np.zeros(count, dtype=bool)
    rows: list[int] = []
    earlier: list[CurveFit] = []
    picks: list[tuple[np.ndarray, np.ndarray]] = []
    for i, (job, previous) in enumerate(zip(jobs, fits, strict=True)):
        if previous is None or len(previous.candidates) != len(FAMILIES):
            continue
        history = job.history
        start = int(np.searchsorted(history.iterations, previous.k_last, side="right"))
        if start >= history.size:
            continue
        at = start + _tracked_offsets(history.size - start)
        rows.append(i)
        earlier.append(previous)
        picks.append((history.iterations[at], history.values[at]))
    if not rows:
        return oos, horizon, tracked
    width = max(len(k) for k, _ in picks)
    ahead = np.zeros((len(rows), width))
    loss = np.zeros((len(rows), width))
    judged = np.zeros((len(rows), width), dtype=bool)
    k_last = np.array([fit.k_last for fit in earlier])
    for r, (k, values) in enumerate(picks):
        ahead[r, :len(k)] = k - k_last[r]
        loss[r, :len(k)] = values
        judged[r, :len(k)] = True
    span = np.array([fit.span for fit in earlier])[:, None]
    anchor = np.array([fit.anchor for fit in earlier])[:, None]
    height = np.array([fit.height for fit in earlier])
    judged_count = judged.sum(1)
    errors = np.full((len(rows), len(FAMILIES)), np.inf)
    for f, family in enumerate(FAMILIES):
        have = [r for r, fit in enumerate(earlier) if fit.candidates[f] is not None]
        if not have:
            continue
        params = np.array([earlier[r].candidates[f] for r in have])
        now = evaluate(family, params, np.ones((len(have), 1)))
        later = evaluate(family, params, 1.0 + ahead[have] / span[have])
        miss = np.abs(anchor[have] - height[have, None] * (now - later) - loss[have])
        miss[~judged[have]] = 0.0
        # Summed point by point, as one job's points always were: a pairwise
        # sum rounds differently, and family choices must not move with it.
        total = np.zeros(len(have))
        for column in miss.T:
            total += column
        errors[have, f] = total / judged_count[have] / height[have]
    oos[rows] = errors
    horizon[rows] = ahead.sum(1) / judged_count
    tracked[rows] = True
    return oos, horizon, tracked


@functools.lru_cache(maxsize=1024)
def _tracked_offsets(count: int) -> np.ndarray:
    """Offsets of the at most ``_TRACKED_POINTS`` new points (of ``count``)
    an earlier fit is judged on, evenly spaced, oldest first."""
    picks = min(_TRACKED_POINTS, count)
    offsets = np.array(sorted({round(j * (count - 1) / max(_TRACKED_POINTS - 1, 1))
                               for j in range(picks)}))
    offsets.flags.writeable = False  # shared by every call (cached)
    return offsets


def _calibrated(previous: CurveFit | None, newest: tuple[int, float] | None,
                pool: deque[float], pooled_z: Callable[[], float | None]
                ) -> tuple[tuple[float, ...], float]:
    """``misses`` and ``z`` after judging ``previous``'s band on the newest
    point ``newest`` (iteration, loss; ``None`` when no point arrived since
    ``previous``) (split-conformal, per job: ``z`` is the coverage quantile of the
    recent misses measured in band widths, so a job whose curve surprises its
    fits gets a wider band, a steady one a tighter one).

    Judged at the newest point only: that is the farthest horizon since the
    earlier fit, a chunk ahead live, where the band matters; nearer points
    miss less and would make the band too narrow there. A job with fewer
    than ``_OWN_MISSES`` misses of its own takes the quantile of every job's
    recent ones (``pool``, which this call extends)."""
    misses = list(previous.misses) if previous is not None else []
    if previous is not None and previous.known and not previous.pending and newest:
        mean, _, high = previous.predict(newest[0] - previous.k_last)
        width = (high - mean) / previous.z if previous.z > 0 else 0.0
        error = abs(newest[1] - mean)
        if math.isfinite(error):
            miss = error / width if width > 0 else (0.0 if error == 0 else 1e3)
            misses.append(miss)
            pool.append(miss)
    misses = misses[-_MISSES_KEPT:]
    z = _quantile(misses) if len(misses) >= _OWN_MISSES else pooled_z()
    return tuple(misses), _PRIOR_Z if z is None else z


def _quantile(misses: list[float]) -> float | None:
    """The ``BAND_COVERAGE`` split-conformal quantile (the ``ceil(c (m + 1))``-th
    smallest of ``m``), kept within [0.25, 1000]; ``None`` without misses."""
    if not misses:
        return None
    ranked = sorted(misses)
    at = min(math.ceil(BAND_COVERAGE * (len(ranked) + 1)), len(ranked)) - 1
    return min(max(ranked[at], 0.25), 1e3)


def _smooth(previous: float, new: float, alpha: float) -> float:
    """Exponential smoothing that tolerates families with no valid fit (inf)."""
    if not math.isfinite(previous):
        return new
    if not math.isfinite(new):
        return previous
    return alpha * new + (1 - alpha) * previous


def _recent_offset(resid: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Mean residual of each row's newest three used points (re-anchoring offset)."""
    rank = np.where(used, used[:, ::-1].cumsum(1)[:, ::-1], 0)
    newest = used & (rank <= _ANCHOR_POINTS)
    return (resid * newest).sum(1) / np.maximum(newest.sum(1), 1)


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


def default_horizon(last_iteration: int, max_iterations: int) -> int:
    """Iterations ahead a chart predicts: as far as the job has come (at least
    50), but not past its iteration limit."""
    return max(min(max_iterations - last_iteration, max(last_iteration, 50)), 1)


def curve_rows(fit: CurveFit, horizon: int, points: int = 50
               ) -> list[tuple[int, float, float, float]]:
    """``fit``'s curve ahead: ``(iteration, predicted, low, high)`` rows.

    Covers the ``horizon`` iterations after the fit's newest point, at most
    ``points`` rows (evenly spaced). Empty when the fit cannot extrapolate.
    """
    if not fit.known or horizon <= 0:
        return []
    steps = sorted({max(1, round(horizon * (i + 1) / min(points, horizon)))
                    for i in range(min(points, horizon))})
    rows = []
    for n in steps:
        mean, low, high = fit.predict(n)
        rows.append((fit.k_last + n, mean, low, high))
    return rows


def predict_curve(
    losses: Sequence[LossPoint], horizon: int, *, initial_loss: float | None = None,
    points: int = 50,
) -> list[tuple[int, float, float, float]]:
    """Predicted loss curve for the API: ``(iteration, predicted, low, high)``.

    Covers the ``horizon`` iterations after the newest point, at most
    ``points`` rows (evenly spaced). Empty when there is no history yet.

    Example: for losses ``1/k`` at iterations 1..40 and ``horizon=10`` the
    first row is about ``(41, 0.0244, ...)`` and the last ``(50, 0.0200, ...)``.
    """
    if not losses or horizon <= 0:
        return []
    job = JobView(job_id=0, tenant_id=0, submitted_at=0.0, iterations_done=losses[-1].iteration,
                  max_iterations=losses[-1].iteration + horizon, losses=tuple(losses),
                  initial_loss=initial_loss)
    return curve_rows(LossPredictor().fit(job), horizon, points)
