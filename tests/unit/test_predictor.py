"""The loss predictor on curves whose future is known."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from statistics import NormalDist

import numpy as np
import pytest

from backend.scheduling.predictor import (
    BAND_COVERAGE,
    GEOMETRIC,
    LossPredictor,
    PredictorConfig,
    predict_curve,
)
from backend.scheduling.types import JobView, LossPoint


def view(f: Callable[[int], float], n: int, *, noise: float = 0.0, job_id: int = 1,
         seed: int = 0) -> JobView:
    rng = np.random.default_rng(seed)
    points = tuple(LossPoint(k, f(k) * (1 + noise * rng.standard_normal()), 0.01)
                   for k in range(1, n + 1))
    return JobView(job_id=job_id, tenant_id=1, submitted_at=0.0, iterations_done=n,
                   max_iterations=10 * n, losses=points)


CURVES: dict[str, Callable[[int], float]] = {
    "exp": lambda k: 0.97 ** (k - 3) + 0.1,                   # a^(k-b) + c
    "inv_lin": lambda k: 1 / (0.05 * k + 1) + 0.2,            # 1/(a k + b) + c
    "inv_quad": lambda k: 1 / (0.001 * k * k + 0.05 * k + 1) + 0.05,
}


@pytest.mark.parametrize("name", sorted(CURVES))
@pytest.mark.parametrize("ahead", [1, 10, 50])
def test_family_curves_extrapolate(name: str, ahead: int) -> None:
    f = CURVES[name]
    fit = LossPredictor().fit(view(f, 120))
    predicted, low, high = fit.predict(ahead)
    drop_true = f(120) - f(120 + ahead)
    assert abs(predicted - f(120 + ahead)) <= 0.05 * drop_true + 1e-4
    assert low <= predicted <= high


def test_noisy_curve_error_beats_naive_ten_ahead() -> None:
    f = CURVES["inv_lin"]
    errors, naive = [], []
    for seed in range(5):
        job = view(f, 200, noise=0.01, seed=seed)
        predicted, _, _ = LossPredictor().fit(job).predict(10)
        last, before = job.losses[-1].loss, job.losses[-2].loss
        errors.append(abs(predicted - f(210)) / f(210))
        naive.append(abs(last - 10 * (before - last) - f(210)) / f(210))
    assert np.mean(errors) < np.mean(naive)


def test_band_widens_with_horizon() -> None:
    fit = LossPredictor().fit(view(CURVES["exp"], 80, noise=0.01))
    widths = [fit.band_width(n) for n in (1, 10, 100)]
    assert widths[0] <= widths[1] <= widths[2]
    assert widths[2] > 0


def test_gain_is_anchored_at_the_curve_not_the_last_point() -> None:
    # The newest point is a low outlier: L_last - f(k+n) would be negative.
    base = view(CURVES["inv_lin"], 100)
    points = list(base.losses)
    points[-1] = LossPoint(100, points[-1].loss - 0.05, 0.01)
    job = JobView(job_id=1, tenant_id=1, submitted_at=0.0, iterations_done=100,
                  max_iterations=1000, losses=tuple(points))
    fit = LossPredictor().fit(job)
    assert fit.drop(50) > 0.5 * (CURVES["inv_lin"](100) - CURVES["inv_lin"](150))


def test_flat_curve_predicts_no_gain() -> None:
    fit = LossPredictor().fit(view(lambda k: 0.3, 60))
    assert fit.drop(100) == pytest.approx(0.0, abs=1e-9)


def test_geometric_fallback_with_few_points() -> None:
    job = view(lambda k: 0.5**k, 3)
    fit = LossPredictor().fit(job)
    assert fit.family == GEOMETRIC
    assert fit.params[0] == pytest.approx(0.5)
    assert fit.predict(2)[0] == pytest.approx(0.5**5)


def test_no_history_is_unknown() -> None:
    job = JobView(job_id=1, tenant_id=1, submitted_at=0.0, iterations_done=0,
                  max_iterations=10)
    assert not LossPredictor().fit(job).known
    assert predict_curve([], 10) == []


def test_memoised_until_new_points_arrive() -> None:
    predictor = LossPredictor()
    f = CURVES["exp"]
    predictor.fit(view(f, 50))
    predictor.fit(view(f, 50))
    assert predictor.refits == 1
    predictor.fit(view(f, 60))
    assert predictor.refits == 2


def test_incremental_statistics_match_full_history() -> None:
    f = CURVES["inv_quad"]
    predictor = LossPredictor()
    for n in (10, 30, 31, 90):
        fit = predictor.fit(view(f, n, noise=0.02, seed=3))
    job = view(f, 90, noise=0.02, seed=3)
    losses = [p.loss for p in job.losses]
    assert fit.largest_drop == pytest.approx(losses[0] - min(losses))
    steps = [a - b for a, b in zip(losses, losses[1:], strict=False)]
    assert fit.largest_step_drop == pytest.approx(max(steps))


def test_the_step_across_a_refit_boundary_counts() -> None:
    # Iterations 1-30 fall by 0.01 a step, 31 is 0.5 lower than 30: the
    # largest step spans the points the predictor saw and the new ones.
    points = tuple(LossPoint(k, 2.0 - 0.01 * k - (0.5 if k > 30 else 0.0), 0.01)
                   for k in range(1, 41))
    job = JobView(job_id=1, tenant_id=1, submitted_at=0.0, iterations_done=40,
                  max_iterations=400, losses=points)
    predictor = LossPredictor()
    predictor.fit(replace(job, losses=points[:30]))
    fit = predictor.fit(job)
    assert fit.largest_step_drop == pytest.approx(0.51)
    assert fit.lowest_loss == pytest.approx(2.0 - 0.4 - 0.5)


def test_statistics_skip_nan_and_infinite_losses() -> None:
    # A trainer may report NaN (diverged) or inf (overflow) now and then: the
    # running lowest loss and largest step ignore them, whatever the chunking.
    clean = view(CURVES["exp"], 60, noise=0.02, seed=5)
    odd = {7: math.nan, 8: 2.5, 20: math.inf, 21: math.inf, 33: math.nan, 59: math.nan}
    points = tuple(LossPoint(p.iteration, odd.get(p.iteration, p.loss), p.seconds)
                   for p in clean.losses)
    predictor = LossPredictor()
    for n in (5, 8, 21, 34, 60):
        fit = predictor.fit(replace(clean, losses=points[:n]))
    losses = [p.loss for p in points]
    finite = [x for x in losses if math.isfinite(x)]
    steps = [a - b for a, b in zip(losses, losses[1:], strict=False) if math.isfinite(a - b)]
    assert fit.lowest_loss == min(finite)
    assert fit.largest_step_drop == max(steps)
    assert fit.largest_step_drop > 1.0, "the step from 2.5 down to the curve counts"


def test_batch_fit_equals_single_fits() -> None:
    jobs = [view(CURVES[name], 70, job_id=i) for i, name in enumerate(sorted(CURVES))]
    batch = LossPredictor().fit_many(jobs)
    for job, fit in zip(jobs, batch, strict=True):
        single = LossPredictor().fit(job)
        assert single.family == fit.family
        assert single.drop(20) == pytest.approx(fit.drop(20))


def test_predict_curve_rows() -> None:
    f = CURVES["inv_lin"]
    rows = predict_curve(view(f, 40).losses, 10)
    assert [r[0] for r in rows] == list(range(41, 51))
    for iteration, predicted, low, high in rows:
        assert low <= predicted <= high
        assert math.isclose(predicted, f(iteration), rel_tol=0.02)
    assert len(predict_curve(view(f, 40).losses, 1000, points=20)) == 20


def test_refit_budget_fits_new_jobs_first_then_the_oldest_fits() -> None:
    predictor = LossPredictor(PredictorConfig(refit_budget=2))
    f = CURVES["exp"]
    fitted = predictor.fit_many([view(f, 40, job_id=i) for i in (1, 2)])
    assert not any(fit.pending for fit in fitted)
    predictor.fit_many([view(f, 40, job_id=3)])  # job 3's fit is newer than 1's and 2's
    # Jobs 1-3 report new points and jobs 4-5 arrive: 4 and 5 take the budget.
    jobs = [view(f, 60, job_id=i) for i in (1, 2, 3)] + [view(f, 40, job_id=i) for i in (4, 5)]
    fits = predictor.fit_many(jobs)
    assert [fit.key[0] for fit in fits] == [40, 40, 40, 40, 40]
    assert predictor.deferred == 3
    # Next call: the two oldest fits (jobs 1 and 2) go before job 3's.
    fits = predictor.fit_many(jobs)
    assert [fit.key[0] for fit in fits] == [60, 60, 40, 40, 40]
    assert predictor.deferred == 1


def test_a_job_left_on_an_older_fit_is_refitted_later_without_being_handed_over() -> None:
    predictor = LossPredictor(PredictorConfig(refit_budget=1))
    f = CURVES["exp"]
    predictor.fit_many([view(f, 40, job_id=1)])
    predictor.fit_many([view(f, 40, job_id=2)])
    # Both report points; the one refit goes to job 1, the older fit.
    fits = predictor.fit_many([view(f, 60, job_id=1), view(f, 60, job_id=2)])
    assert [fit.key[0] for fit in fits] == [60, 40]
    assert predictor.deferred == 1 and not predictor.refreshed
    # A caller that hands over only changed jobs hands over none now.
    assert predictor.fit_many([]) == []
    assert predictor.deferred == 0
    assert [(job_id, fit.key[0]) for job_id, fit in predictor.refreshed.items()] == [(2, 60)]
    predictor.fit_many([])
    assert not predictor.refreshed, "refreshed is per call"


def test_jobs_beyond_the_budget_on_a_cold_start_are_pending_until_fitted() -> None:
    predictor = LossPredictor(PredictorConfig(refit_budget=3))
    jobs = [view(CURVES["inv_lin"], 50, job_id=i) for i in range(7)]
    rounds = []
    while True:
        fits = predictor.fit_many(jobs)
        rounds.append(sum(fit.pending for fit in fits))
        if not rounds[-1]:
            break
    assert rounds == [4, 1, 0]
    pending = LossPredictor(PredictorConfig(refit_budget=0)).fit_many(jobs[:1])[0]
    assert pending.pending and pending.known and pending.drop(10) == 0.0


def test_a_kept_fit_is_read_from_the_jobs_newer_position() -> None:
    f = CURVES["inv_lin"]
    fit = LossPredictor().fit(view(f, 100))
    later = LossPredictor().fit(view(f, 300))
    # The curve flattens: the same 50 iterations drop less 200 iterations on.
    assert fit.drop(50, after=200) < 0.5 * fit.drop(50)
    assert fit.drop(50, after=200) == pytest.approx(later.drop(50), rel=0.2)
    assert fit.drop(50, after=200) == pytest.approx(f(300) - f(350), rel=0.2)


def test_band_is_calibrated_on_the_jobs_own_misses() -> None:
    # A cyclic-learning-rate-like wobble no family models: the model's own
    # spread holds the next chunk's loss about 60% of the time; scaled by the
    # job's recent misses, about 90%.
    def wobbling(k: int) -> float:
        return (0.2 + 1 / (1 + k / 50)) * (1 + 0.05 * math.sin(k / 40))

    job = view(wobbling, 2000, noise=0.01, seed=1)
    predictor = LossPredictor()
    calibrated, model_only = [], []
    for k in range(40, 1960, 40):
        fit = predictor.fit(replace(job, losses=job.losses[:k], iterations_done=k))
        mean, low, high = fit.predict(40)
        actual = job.losses[k + 39].loss
        calibrated.append(low <= actual <= high)
        spread = (high - mean) / fit.z
        model_only.append(mean - spread <= actual <= mean + spread)
    assert np.mean(calibrated[10:]) >= 0.85
    assert np.mean(model_only[10:]) < 0.75


def test_a_young_job_borrows_the_other_jobs_calibration() -> None:
    def wobbling(k: int) -> float:
        return (0.2 + 1 / (1 + k / 50)) * (1 + 0.05 * math.sin(k / 40))

    veteran = view(wobbling, 2000, noise=0.01, seed=1)
    predictor = LossPredictor()
    for k in range(40, 1960, 40):
        own = predictor.fit(replace(veteran, losses=veteran.losses[:k], iterations_done=k))
    newcomer = view(CURVES["inv_lin"], 60, job_id=2)
    borrowed = predictor.fit(newcomer)
    alone = LossPredictor().fit(newcomer)
    prior = NormalDist().inv_cdf((1 + BAND_COVERAGE) / 2)
    assert alone.z == pytest.approx(prior), "nothing to calibrate on: a normal error's quantile"
    assert borrowed.z != pytest.approx(prior), "calibrated on the other jobs' misses instead"
    assert borrowed.z > 1.2, "the wobbling job's misses widen a newcomer's band"
    assert own.z > 1.2
