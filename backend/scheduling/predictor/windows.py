"""Windowing and out-of-sample scoring: which of a job's points a fit sees
and how they are weighted (:func:`_windows`), and each family's error on
points it did not see, held out (:func:`_holdout_errors`) or arrived since
an earlier fit (:func:`_tracked_errors`), which picks the family."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from backend.scheduling.curves import FAMILIES, evaluate, fit_all
from backend.scheduling.predictor.fit import CurveFit, PredictorConfig
from backend.scheduling.types import JobView


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


def _smooth(previous: float, new: float, alpha: float) -> float:
    """Exponential smoothing that tolerates families with no valid fit (inf)."""
    if not math.isfinite(previous):
        return new
    if not math.isfinite(new):
        return previous
    return alpha * new + (1 - alpha) * previous


def _recent_offset(resid: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Mean residual of each row's newest three used points (re-anchoring offset)."""
    return _mean_over(resid, _newest_points(used))


def _newest_points(used: np.ndarray) -> np.ndarray:
    """Each row's newest ``_ANCHOR_POINTS`` used points, as a mask (a refit
    re-anchors every family at the same points, so it is made once)."""
    rank = np.where(used, used[:, ::-1].cumsum(1)[:, ::-1], 0)
    return used & (rank <= _ANCHOR_POINTS)


def _mean_over(resid: np.ndarray, newest: np.ndarray) -> np.ndarray:
    """Mean residual of each row over the ``newest`` mask (at least one point counted)."""
    return (resid * newest).sum(1) / np.maximum(newest.sum(1), 1)
