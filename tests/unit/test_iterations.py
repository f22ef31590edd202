"""The one training loop live chunks and trace recording share."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from backend.scheduling.trace import load_trace
from backend.simulation.record import SMALL_RUNS, RunSpec, record_curve
from workers.algorithms import make_trainer, restore_trainer
from workers.algorithms.base import Trainer
from workers.datasets import load_dataset
from workers.iterations import Iterations, run_iterations
from workers.stopping import StopRule

GOLDEN_TRACE = Path(__file__).resolve().parents[2] / "data" / "traces" / "golden-small.json"


class Scripted(Trainer):
    """Reports a fixed sequence of losses; an exception in it is raised instead."""

    def __init__(self, losses: Sequence[float | Exception]) -> None:
        self.losses: Iterator[float | Exception] = iter(losses)
        self.iteration = 0

    def step(self, n: int) -> list[float]:
        assert n == 1
        loss = next(self.losses)
        if isinstance(loss, Exception):
            raise loss
        self.iteration += 1
        return [loss]

    def state_bytes(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def from_bytes(cls, data: bytes, dataset: Any, params: Any, seed: int) -> Scripted:
        raise NotImplementedError


def keep_going(_: Iterations) -> bool:
    return True


def losses(run: Iterations) -> list[float]:
    return [loss for _, loss, _ in run.points]


def test_points_are_numbered_from_the_start_iteration_and_timed() -> None:
    run = run_iterations(Scripted([3.0, 2.0, 1.0]), StopRule(max_iterations=100), 3,
                         keep_going, start=7)
    assert [i for i, _, _ in run.points] == [8, 9, 10]
    assert losses(run) == [3.0, 2.0, 1.0]
    assert all(seconds >= 0 for _, _, seconds in run.points)
    assert run.iteration == 10 and run.verdict is None
    assert not run.stopped and run.error is None


def test_budget_and_max_iterations_both_bound_the_run() -> None:
    rule = StopRule(max_iterations=5)
    assert run_iterations(Scripted([1.0] * 10), rule, 3, keep_going).iteration == 3
    capped = run_iterations(Scripted([1.0] * 10), rule, 10, keep_going, start=3)
    assert capped.iteration == 5
    assert capped.verdict is not None and capped.verdict.reason == "reached max iterations (5)"
    nothing = run_iterations(Scripted([]), rule, 10, keep_going, start=5)
    assert nothing.points == [] and nothing.verdict is None and nothing.iteration == 5


def test_nan_fails_at_once_and_keeps_the_point() -> None:
    run = run_iterations(Scripted([2.0, math.nan, 1.0]), StopRule(max_iterations=10), 10,
                         keep_going)
    assert run.iteration == 2
    assert run.verdict is not None and run.verdict.status == "failed"
    assert run.verdict.reason == "loss became nan at iteration 2"
    assert math.isnan(losses(run)[-1])


def test_divergence_is_judged_against_the_jobs_first_loss() -> None:
    rule = StopRule(max_iterations=10)
    # From a resumed job's first loss of 1.0 a loss of 2e4 has diverged...
    resumed = run_iterations(Scripted([2e4]), rule, 10, keep_going, start=4, initial=1.0)
    assert resumed.verdict is not None and resumed.verdict.status == "failed"
    assert "diverged at iteration 5" in resumed.verdict.reason
    # ...while without one the first loss run here is the yardstick.
    fresh = run_iterations(Scripted([1e4, 2e4]), rule, 2, keep_going)
    assert fresh.verdict is None


def test_convergence_window_spans_the_history_before_start() -> None:
    rule = StopRule(max_iterations=100, tolerance=0.01, window=3)
    history = [1.0, 1.0, 1.0]
    run = run_iterations(Scripted([1.0, 0.5]), rule, 10, keep_going, start=3, history=history)
    assert run.iteration == 4
    assert run.verdict is not None and run.verdict.reason.startswith("converged")


def test_on_tick_sees_every_judged_iteration_and_can_abandon() -> None:
    seen: list[tuple[int, str | None]] = []

    def tick(run: Iterations) -> bool:
        seen.append((run.iteration, run.verdict.status if run.verdict else None))
        return True

    rule = StopRule(max_iterations=100, target_loss=1.0)
    run_iterations(Scripted([3.0, 2.0, 1.0, 0.5]), rule, 10, tick)
    assert seen == [(1, None), (2, None), (3, "completed")]

    trainer = Scripted([3.0, 2.0, 1.0])
    abandoned = run_iterations(trainer, rule, 10, lambda run: run.iteration < 2)
    assert abandoned.stopped and abandoned.iteration == 2 and trainer.iteration == 2


def test_an_error_ends_the_run_and_keeps_what_came_before() -> None:
    boom = ValueError("boom")
    run = run_iterations(Scripted([3.0, 2.0, boom]), StopRule(max_iterations=10), 10,
                         keep_going)
    assert run.error is boom
    assert run.iteration == 2 and losses(run) == [3.0, 2.0]

    def broken_tick(_: Iterations) -> bool:
        raise ConnectionError("redis gone")

    ticked = run_iterations(Scripted([3.0]), StopRule(max_iterations=10), 10, broken_tick)
    assert isinstance(ticked.error, ConnectionError) and ticked.iteration == 1


def test_chunks_resumed_from_checkpoints_match_one_straight_run() -> None:
    """What a worker does chunk by chunk gives the losses and the verdict of
    one uninterrupted run."""
    dataset = load_dataset("breast_cancer", {})
    rule = StopRule(max_iterations=1000, tolerance=1e-4, window=10)
    straight = run_iterations(make_trainer("logistic_regression", dataset, {}, 0), rule, 1000,
                              keep_going)
    assert straight.verdict is not None and straight.verdict.reason.startswith("converged")

    points: list[tuple[int, float, float]] = []
    trainer = make_trainer("logistic_regression", dataset, {}, 0)
    verdict = None
    while verdict is None:
        chunk = run_iterations(trainer, rule, 37, keep_going, start=len(points),
                               history=[p[1] for p in points[-(rule.window + 1):]],
                               initial=points[0][1] if points else None)
        points += chunk.points
        verdict = chunk.verdict
        trainer = restore_trainer("logistic_regression", trainer.state_bytes(), dataset, {}, 0)
    assert [p[:2] for p in points] == [p[:2] for p in straight.points]
    assert verdict == straight.verdict


@pytest.mark.parametrize("spec", SMALL_RUNS[:2], ids=lambda s: s.curve_id)
def test_recording_reproduces_the_golden_trace(spec: RunSpec) -> None:
    golden = load_trace(GOLDEN_TRACE).curve(spec.curve_id)
    curve = record_curve(spec)
    assert curve.stop_reason == golden.stop_reason
    assert len(curve.losses) == len(golden.losses) == len(curve.seconds)
    # The trace file keeps six significant digits.
    assert curve.losses == pytest.approx(golden.losses, rel=1e-5)


def test_recording_refuses_a_run_that_fails() -> None:
    spec = RunSpec("linear_regression", "diabetes", {"learning_rate": 5.0}, max_iterations=50)
    with pytest.raises(RuntimeError, match="failed: loss diverged at iteration 3"):
        record_curve(spec)
