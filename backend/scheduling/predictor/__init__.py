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
its earlier fits (:func:`.bands._calibrated`), so the band holds about
``BAND_COVERAGE`` of them.

The package, one module per concern: :mod:`.fit` (the fit value type),
:mod:`.drop` (the vectorised drop model), :mod:`.memo` (memoisation and the
refit budget), :mod:`.bands` (band calibration), :mod:`.windows` (windowing
and hold-out scoring) and :mod:`.chart` (chart output). Every public name is
importable from here, as before the split.
"""

from backend.scheduling.predictor.bands import BAND_COVERAGE
from backend.scheduling.predictor.chart import curve_rows, default_horizon, predict_curve
from backend.scheduling.predictor.drop import drop_model
from backend.scheduling.predictor.fit import (
    FLAT,
    GEOMETRIC,
    PENDING,
    UNKNOWN,
    CurveFit,
    PredictorConfig,
    rising_level,
)
from backend.scheduling.predictor.memo import LossPredictor, history_key

__all__ = [
    "BAND_COVERAGE",
    "FLAT",
    "GEOMETRIC",
    "PENDING",
    "UNKNOWN",
    "CurveFit",
    "LossPredictor",
    "PredictorConfig",
    "curve_rows",
    "default_horizon",
    "drop_model",
    "history_key",
    "predict_curve",
    "rising_level",
]
