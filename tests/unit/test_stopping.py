"""Which series the stopping rule judges, from when, and what its reason says."""

from __future__ import annotations

import math

import numpy as np

from workers.stopping import MIN_SHARE, StopRule, VerdictStatus, check, check_quality


def _first_verdict(rule: StopRule, losses: list[float]) -> tuple[int, str] | None:
    """Judge ``losses`` one iteration at a time, as a live job does."""
    for i in range(1, len(losses) + 1):
        verdict = check(rule, i, losses[max(0, i - rule.history_length):i], losses[0])
        if verdict is not None:
            return i, verdict.reason
    return None


def test_the_training_loss_converges_no_earlier_than_min_share() -> None:
    rule = StopRule(max_iterations=200, tolerance=1e-4, window=10)
    # Flat from the start: it would converge at iteration 20 but for the guard.
    first = _first_verdict(rule, [0.7] * 200)
    assert first is not None
    iteration, reason = first
    assert iteration == math.ceil(MIN_SHARE * 200) == 60
    assert reason.startswith("converged: the training loss stopped improving")
    assert "last 10 iterations" in reason and "tolerance 0.0001" in reason


def test_a_noisy_descent_runs_to_max_iterations() -> None:
    # A loss that halves every 100 iterations, read with 30% noise. At
    # iteration 68 it lands within 1e-4 of its value ten iterations before:
    # the old two-point test stopped it there.
    rng = np.random.default_rng(46)
    losses = [0.5 ** (i / 100) * (1 + 0.3 * rng.standard_normal()) for i in range(300)]
    assert abs(losses[67] - losses[57]) / losses[57] < 1e-4
    rule = StopRule(max_iterations=300, tolerance=1e-4, window=10)
    assert _first_verdict(rule, losses) == (300, "reached max iterations (300)")


def test_the_held_out_metric_converges_once_it_has_two_windows_of_evaluations() -> None:
    rule = StopRule(max_iterations=10_000, tolerance=1e-3, window=4, metric="val_loss")
    evaluations = [0.9, 0.6, 0.45, 0.42] + [0.4] * 8
    fired = [n for n in range(1, len(evaluations) + 1)
             if check_quality(rule, n * 50, evaluations[:n]) is not None]
    # No share of max_iterations to wait for: the evaluations are the evidence.
    assert fired[0] == 12
    assert MIN_SHARE * rule.max_iterations > 12 * 50
    verdict = check_quality(rule, 600, evaluations)
    assert verdict is not None and verdict.status == VerdictStatus.completed
    assert verdict.reason.startswith("converged: the held-out val_loss stopped improving")
    assert "last 4 evaluations" in verdict.reason


def test_a_val_loss_rule_leaves_the_training_loss_alone() -> None:
    rule = StopRule(max_iterations=100, tolerance=1e-4, metric="val_loss")
    assert _first_verdict(rule, [0.7] * 99) is None


def test_no_tolerance_no_convergence_test() -> None:
    rule = StopRule(max_iterations=100, tolerance=None)
    assert _first_verdict(rule, [0.7] * 99) is None


def test_history_length_covers_both_windows() -> None:
    assert StopRule(max_iterations=10, window=10).history_length == 20
    assert StopRule(max_iterations=10, window=1).history_length == 6
