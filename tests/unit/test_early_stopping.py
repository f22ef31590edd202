"""The early-stopping rules of experiments (pure): predictive and ASHA, the
minimum budget, never the best, and maximised objectives."""

from __future__ import annotations

import math

import pytest

from backend.scheduling.early_stopping import (
    RuleConfig,
    Trial,
    decide,
    floors_by_training_loss,
    judge,
    predict_final,
    rungs,
    training_floor,
)
from backend.scheduling.predictor import LossPredictor


def _curve(rate: float, floor: float, upto: int, every: int = 10) -> list[tuple[int, float]]:
    """A loss curve falling from 2.3 towards ``floor`` at ``rate`` per iteration."""
    return [(k, floor + (2.3 - floor) * math.exp(-rate * k)) for k in range(every, upto + 1,
                                                                           every)]


def _trial(job_id: int, points: list[tuple[int, float]], final: tuple[float, float, float] | None,
           *, most: int = 1000, stoppable: bool = True) -> Trial:
    done = points[-1][0] if points else 0
    return Trial(job_id=job_id, iterations_done=done, max_iterations=most, points=tuple(points),
                 final=final, stoppable=stoppable)


PREDICTIVE = RuleConfig(rule="predictive", top_k=2, min_iterations=100, metric="val_loss")


def test_predictive_stops_a_job_that_cannot_reach_the_top_k() -> None:
    trials = [
        _trial(1, _curve(0.02, 0.20, 300), (0.21, 0.19, 0.23)),
        _trial(2, _curve(0.02, 0.25, 300), (0.26, 0.24, 0.28)),
        _trial(3, _curve(0.0001, 2.0, 300), (2.2, 2.1, 2.3)),
    ]
    stops = decide(trials, PREDICTIVE)
    assert [s.job_id for s in stops] == [3]
    reason = stops[0].reason
    assert reason.startswith("stopped early: its predicted final val_loss 2.2 ± 0.1 cannot "
                             "reach the top 2")
    # The best so far is job 1's latest value, in the metric's units.
    assert f"best {trials[0].points[-1][1]:.3g}" in reason


def test_predictive_keeps_a_job_whose_band_overlaps_the_top_k() -> None:
    trials = [
        _trial(1, _curve(0.02, 0.20, 300), (0.21, 0.19, 0.23)),
        _trial(2, _curve(0.02, 0.25, 300), (0.26, 0.24, 0.28)),
        # Worse on average, but its optimistic bound 0.27 beats job 2's pessimistic 0.28.
        _trial(3, _curve(0.01, 0.3, 300), (0.31, 0.27, 0.35)),
    ]
    assert decide(trials, PREDICTIVE) == []


def test_predictive_respects_the_minimum_budget() -> None:
    hopeless = _trial(3, _curve(0.0001, 2.0, 90), (2.2, 2.1, 2.3))
    trials = [_trial(1, _curve(0.02, 0.2, 300), (0.21, 0.19, 0.23)),
              _trial(2, _curve(0.02, 0.25, 300), (0.26, 0.24, 0.28)), hopeless]
    assert hopeless.iterations_done < PREDICTIVE.min_iterations
    assert decide(trials, PREDICTIVE) == []


def test_predictive_needs_k_others_to_compare_with() -> None:
    trials = [_trial(1, _curve(0.02, 0.2, 300), (0.21, 0.19, 0.23)),
              _trial(3, _curve(0.0001, 2.0, 300), (2.2, 2.1, 2.3))]
    assert decide(trials, PREDICTIVE) == []
    assert [s.job_id for s in decide(trials, RuleConfig(rule="predictive", top_k=1,
                                                        min_iterations=100))] == [3]


def test_predictive_never_stops_the_current_best() -> None:
    # Job 3 is the best now, but a (wild) prediction says it will end far behind.
    trials = [
        _trial(1, _curve(0.02, 0.30, 300), (0.21, 0.19, 0.23)),
        _trial(2, _curve(0.02, 0.35, 300), (0.26, 0.24, 0.28)),
        _trial(3, _curve(0.05, 0.10, 300), (2.2, 2.1, 2.3)),
    ]
    assert min(trials, key=lambda t: t.points[-1][1]).job_id == 3
    assert decide(trials, PREDICTIVE) == []


def test_predictive_skips_jobs_stopped_before_or_without_a_fit() -> None:
    good = [_trial(1, _curve(0.02, 0.20, 300), (0.21, 0.19, 0.23)),
            _trial(2, _curve(0.02, 0.25, 300), (0.26, 0.24, 0.28))]
    resumed = _trial(3, _curve(0.0001, 2.0, 300), (2.2, 2.1, 2.3), stoppable=False)
    unfitted = _trial(4, _curve(0.0001, 2.0, 300), None)
    assert decide([*good, resumed, unfitted], PREDICTIVE) == []


def test_predictive_in_max_mode_flips_the_comparison() -> None:
    config = RuleConfig(rule="predictive", top_k=2, min_iterations=100, metric="val_accuracy",
                        maximise=True)
    acc = [(k, 0.1 + 0.8 * (1 - math.exp(-0.02 * k))) for k in range(10, 301, 10)]
    flat = [(k, 0.1 + 0.0001 * k) for k in range(10, 301, 10)]
    trials = [_trial(1, acc, (0.92, 0.90, 0.94)),
              _trial(2, [(k, v - 0.02) for k, v in acc], (0.90, 0.88, 0.92)),
              _trial(3, flat, (0.2, 0.15, 0.25))]
    stops = decide(trials, config)
    assert [s.job_id for s in stops] == [3]
    assert "predicted final val_accuracy 0.2 ± 0.05" in stops[0].reason
    # The same numbers read as losses would stop the accurate jobs, never job 3.
    as_losses = decide(trials, RuleConfig(rule="predictive", top_k=1, min_iterations=100))
    assert 3 not in [s.job_id for s in as_losses]


ASHA = RuleConfig(rule="asha", min_iterations=100, reduction=3, metric="loss")


def test_asha_rungs_grow_by_the_reduction_factor() -> None:
    assert rungs(ASHA, 1000) == [100, 300, 900]
    assert rungs(ASHA, 99) == []


def test_asha_keeps_the_top_third_at_a_rung() -> None:
    floors = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    trials = [_trial(i, _curve(0.05, f, 120), None) for i, f in enumerate(floors, start=1)]
    stopped = sorted(s.job_id for s in decide(trials, ASHA))
    # 6 reached rung 100: the best 6 // 3 = 2 go on.
    assert stopped == [3, 4, 5, 6]
    reason = next(s.reason for s in decide(trials, ASHA) if s.job_id == 6)
    assert "ASHA" in reason and "iteration 100" in reason and "of the 6 configurations" in reason


def test_asha_waits_for_enough_configurations_and_the_first_rung() -> None:
    few = [_trial(1, _curve(0.05, 0.1, 120), None), _trial(2, _curve(0.05, 0.9, 120), None)]
    assert decide(few, ASHA) == []
    early = [_trial(i, _curve(0.05, f, 90), None) for i, f in enumerate([0.1, 0.5, 0.9, 1.0])]
    assert decide(early, ASHA) == []


def test_asha_never_stops_the_current_best() -> None:
    # Job 1 was worst at rung 100 but is the best now.
    late_bloomer = [(100, 2.0), (110, 0.05)]
    trials = [_trial(1, late_bloomer, None), *[
        _trial(i, _curve(0.05, f, 110), None) for i, f in enumerate([0.1, 0.2, 0.3], start=2)]]
    stopped = [s.job_id for s in decide(trials, ASHA)]
    assert 1 not in stopped
    assert stopped  # the rung still stops someone


def test_no_rule_stops_nothing() -> None:
    trials = [_trial(1, _curve(0.02, 0.2, 300), (0.21, 0.19, 0.23)),
              _trial(3, _curve(0.0001, 2.0, 300), (2.2, 2.1, 2.3))]
    assert decide(trials, RuleConfig(rule="none", top_k=1)) == []


@pytest.mark.parametrize("maximise", [False, True])
def test_predict_final_extrapolates_towards_the_curve_floor(maximise: bool) -> None:
    sign = -1.0 if maximise else 1.0
    points = [(k, sign * v) for k, v in _curve(0.01, 0.5, 300, every=5)]
    final = predict_final(LossPredictor(), job_id=1, points=points, max_iterations=1000,
                          maximise=maximise)
    assert final is not None
    mean, low, high = final
    assert low <= mean <= high
    last = points[-1][1]
    # Improves beyond the last value, in the objective's own direction, but not past the floor.
    if maximise:
        assert last < mean <= -0.5 + 0.05
    else:
        assert 0.5 - 0.05 <= mean < last


def test_predict_final_needs_two_points() -> None:
    assert predict_final(LossPredictor(), job_id=1, points=[(10, 1.0)], max_iterations=100,
                         maximise=False) is None


def test_a_rising_series_is_predicted_to_end_no_better_than_its_best() -> None:
    # A validation loss that bottoms at 0.2 and climbs back to 0.5 (overfitting):
    # the fitted families only fall, so their extrapolation would be meaningless.
    points = [(k, 0.2 + 1e-5 * (k - 150) ** 2) for k in range(10, 360, 10)]
    final = predict_final(LossPredictor(), job_id=1, points=points, max_iterations=1000,
                          maximise=False)
    assert final is not None
    mean, low, high = final
    lowest, latest = min(v for _, v in points), points[-1][1]
    assert mean == pytest.approx(latest, rel=0.05)
    assert low == pytest.approx(lowest, rel=0.05)
    assert high >= mean


def test_a_rivals_promise_below_where_it_stands_stops_nobody() -> None:
    slow = _curve(0.001, 0.5, 300)  # still at 1.8: its fit promises far too much
    trials = [
        _trial(1, slow, (-0.5, -0.9, -0.2)),
        _trial(2, slow, (-0.5, -0.9, -0.2)),
        _trial(3, _curve(0.02, 0.3, 300), (0.1, 0.05, 0.15)),
        _trial(4, _curve(0.02, 0.2, 300), (0.15, 0.1, 0.2)),
    ]
    # Job 3 would have to beat -0.2 by its rivals' fits; by where they stand, 1.8.
    assert decide(trials, PREDICTIVE) == []


def test_a_rival_counts_no_worse_than_the_worst_it_has_shown() -> None:
    # The live MLP sweep at its first rung: a settled rate, two young good
    # rates whose fits give upper bands of thousands, and a flat rate at 3.0
    # with 5/6 of its budget left (optimistic 3.0 less the 25% margin: 2.25).
    noisy = [(10, 1.6), (20, 1.1), (30, 0.9), (40, 0.8), (50, 0.7), (60, 0.75), (70, 0.6),
             (80, 0.65), (90, 0.55), (100, 0.68)]
    flat = [(k, 3.02 - 0.0001 * k) for k in range(10, 101, 10)]

    def sweep(shift: float) -> list[Trial]:
        return [_trial(1, _curve(0.02, 0.3, 100), (0.32, 0.3, 0.34), most=600),
                _trial(2, [(i, v + shift) for i, v in noisy], (487.0, -2393.0, 3367.0), most=600),
                _trial(3, [(i, 0.8 * v + shift) for i, v in noisy], (30.0, -104.0, 164.0),
                       most=600),
                _trial(4, flat, (3.01, 3.0, 3.02), most=600)]

    stops = decide(sweep(0.0), PREDICTIVE)
    # By their upper bands (3,367 and 164) the flat rate is not behind them;
    # by the worst each has shown (1.6 and 1.28) it is.
    assert [s.job_id for s in stops] == [4]
    assert "the top 2 end at 1.28 or better" in stops[0].reason
    # Rivals that have been worse than the flat rate's bound since they
    # started (3.6 and 3.28) do not count against it.
    assert decide(sweep(2.0), PREDICTIVE) == []


def test_the_judgement_says_why_each_job_it_keeps_runs_on() -> None:
    trials = [
        _trial(1, _curve(0.02, 0.20, 300), (0.21, 0.19, 0.23)),
        _trial(2, _curve(0.02, 0.25, 300), (0.26, 0.24, 0.28)),
        # Optimistic 0.27 minus the margin for the 70% of its budget left.
        _trial(3, _curve(0.01, 0.3, 300), (0.31, 0.27, 0.35)),
        _trial(4, _curve(0.0001, 2.0, 300), (2.2, 2.1, 2.3)),
        _trial(5, _curve(0.02, 0.3, 50), (0.4, 0.3, 0.5)),
        _trial(6, _curve(0.02, 0.3, 300), None),
        _trial(7, _curve(0.02, 0.1, 1000), None, stoppable=False),
    ]
    verdict = judge(trials, PREDICTIVE)
    assert [s.job_id for s in verdict.stops] == [4]
    # Job 3's threshold: the 2nd best pessimistic bound of the others, job 2's
    # 0.28 (job 7 ended at its latest value, about 0.1; job 1's is 0.23).
    optimistic = 0.27 - 0.3 * 0.7 * 0.27
    assert verdict.kept[3] == (f"predicted final val_loss 0.31 (at best {optimistic:.3g}), "
                               "needs ≤ 0.23 to reach the top 2")
    assert verdict.kept[5] == "not judged before iteration 100 (at 50)"
    assert verdict.kept[6] == "too few val_loss values to predict its final one yet (30 so far)"
    # Job 7 ended best, so job 1 is judged like the others (job 7's 0.1, job 2's 0.28).
    assert verdict.kept[1].startswith("predicted final val_loss 0.21 (at best ")
    assert verdict.kept[1].endswith("needs ≤ 0.28 to reach the top 2")
    assert 7 not in verdict.kept and 4 not in verdict.kept  # ended; stopped
    alone = judge(trials[:2], PREDICTIVE)
    assert alone.kept[1] == ("the best so far (predicted final val_loss 0.21); the rule never "
                             "stops the best")
    assert alone.kept[2] == ("only 1 other configuration to compare with; the rule needs 2 for "
                             "the top 2")


def test_asha_says_where_a_kept_job_stands_and_when_it_is_judged_next() -> None:
    config = RuleConfig(rule="asha", min_iterations=100, reduction=2, metric="loss")
    trials = [
        _trial(1, _curve(0.02, 0.20, 100), None),
        _trial(2, _curve(0.02, 0.25, 100), None),
        _trial(3, _curve(0.02, 0.25, 50), None),
    ]
    verdict = judge(trials, config)
    assert [s.job_id for s in verdict.stops] == [2]
    assert verdict.kept[1] == "the best so far; the rule never stops the best"
    assert verdict.kept[3] == "first judged at iteration 100"


# A held-out loss judged by its training loss (training_floor), on literal curves.
OVERFIT_VAL = [(50, 0.25), (100, 0.166), (150, 0.160), (200, 0.162)]
"""A val_loss that has bottomed out: steps 0.084, 0.006, 0.002."""
OVERFIT_TRAIN = [(160, 0.006), (170, 0.005), (180, 0.004), (190, 0.003), (200, 0.002)]
"""Its training loss, nearly learnt: 0.004 over the last 50 iterations."""


def test_the_training_floor_is_the_best_so_far_less_the_training_loss_and_the_noise() -> None:
    # 0.160 - 0.004 - the median of the steps 0.084, 0.006, 0.002 (0.006).
    floor = training_floor(OVERFIT_VAL, OVERFIT_TRAIN, maximise=False)
    assert floor == pytest.approx(0.160 - 0.004 - 0.006)
    # Only the last FLOOR_WINDOW (50) iterations of training loss count: an
    # older, higher loss says nothing about what is left to learn.
    assert training_floor(OVERFIT_VAL, [(100, 0.9), *OVERFIT_TRAIN],
                          maximise=False) == pytest.approx(floor)


def test_a_job_still_learning_its_training_set_has_no_useful_floor() -> None:
    # val 1.97 -> 1.44 while the training loss is still 1.5: it may fall to 0.
    floor = training_floor([(50, 1.969), (100, 1.437)], [(90, 1.52), (100, 1.50)],
                           maximise=False)
    assert floor is not None and floor < 0


@pytest.mark.parametrize(("points", "training", "maximise"), [
    ([(50, 0.2)], OVERFIT_TRAIN, False),  # one value: no noise to measure
    (OVERFIT_VAL, [], False),  # no training loss
    (OVERFIT_VAL, [(190, -1.0), (200, -1.2)], False),  # not a loss
    ([(50, 0.9), (100, 0.95)], OVERFIT_TRAIN, True),  # an accuracy
])
def test_the_training_floor_says_nothing_without_its_premises(points: list[tuple[int, float]],
                                                               training: list[tuple[int, float]],
                                                               maximise: bool) -> None:
    assert training_floor(points, training, maximise=maximise) is None


def test_the_floor_applies_to_a_held_out_loss_under_the_predictive_rule_only() -> None:
    assert floors_by_training_loss(PREDICTIVE)
    assert not floors_by_training_loss(RuleConfig(rule="predictive", metric="loss"))
    assert not floors_by_training_loss(RuleConfig(rule="predictive", metric="val_accuracy",
                                                  maximise=True))
    assert not floors_by_training_loss(RuleConfig(rule="asha", metric="val_loss"))


def _floored(job_id: int, points: list[tuple[int, float]], floor: float | None,
             final: tuple[float, float, float] = (0.17, -5.0, 0.17)) -> Trial:
    # A fit from a few values promises anything (its optimistic -5.0).
    return Trial(job_id=job_id, iterations_done=points[-1][0], max_iterations=3000,
                 points=tuple(points), final=final, floor=floor)


def test_a_learnt_configuration_behind_the_top_k_is_stopped_by_its_floor() -> None:
    leaders = [_floored(1, [(50, 0.2), (100, 0.13), (150, 0.125), (200, 0.124)], None,
                        (0.12, 0.1, 0.124)),
               _floored(2, [(50, 0.3), (100, 0.15), (150, 0.135), (200, 0.13)], None,
                        (0.128, 0.1, 0.13))]
    floor = training_floor(OVERFIT_VAL, OVERFIT_TRAIN, maximise=False)
    learnt = _floored(3, OVERFIT_VAL, floor)
    # Without the floor its fit's optimistic -5.0 keeps it; with it, 0.15 > 0.13.
    assert decide([*leaders, _floored(3, OVERFIT_VAL, None)], PREDICTIVE) == []
    stops = decide([*leaders, learnt], PREDICTIVE)
    assert [s.job_id for s in stops] == [3]
    assert stops[0].reason == ("stopped early: its val_loss can fall at most to 0.15 (its best "
                               "so far less its training loss) cannot reach the top 2 (best "
                               "0.124; the top 2 end at 0.13 or better)")
    # A slow starter behind the same leaders, still learning, runs on.
    slow = _floored(4, [(50, 1.969), (100, 1.437)],
                    training_floor([(50, 1.969), (100, 1.437)], [(90, 1.52), (100, 1.5)],
                                   maximise=False))
    verdict = judge([*leaders, slow], PREDICTIVE)
    assert verdict.stops == []
    assert verdict.kept[4].startswith("predicted final val_loss 0.17 (at best ")
    # The best is never stopped, floor or not.
    best = _floored(5, [(50, 0.2), (100, 0.12)], 0.5)
    assert decide([*leaders, best], PREDICTIVE) == []


def test_a_kept_job_says_its_bound_comes_from_its_training_loss() -> None:
    leaders = [_floored(1, [(50, 0.3), (100, 0.14)], None, (0.13, 0.1, 0.14)),
               _floored(2, [(50, 0.4), (100, 0.2)], None, (0.19, 0.1, 0.2))]
    floor = training_floor(OVERFIT_VAL, OVERFIT_TRAIN, maximise=False)
    verdict = judge([*leaders, _floored(3, OVERFIT_VAL, floor)], PREDICTIVE)
    assert verdict.stops == []
    assert verdict.kept[3] == ("predicted final val_loss 0.17 (at best 0.15 by its training "
                               "loss), needs ≤ 0.2 to reach the top 2")
