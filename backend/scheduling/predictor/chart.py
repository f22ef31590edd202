"""Chart output: a fit's curve ahead as ``(iteration, predicted, low, high)``
rows, for the job page and the API."""

from __future__ import annotations

from collections.abc import Sequence

from backend.scheduling.predictor.fit import CurveFit
from backend.scheduling.predictor.memo import LossPredictor
from backend.scheduling.types import JobView, LossPoint


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
