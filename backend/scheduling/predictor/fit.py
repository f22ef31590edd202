"""The fit value type: one job's fitted curve (:class:`CurveFit`), the
family names, the tuning of the fits (:class:`PredictorConfig`) and the
rising-level test policies apply to fits."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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
