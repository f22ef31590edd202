"""The one training loop live chunks and trace recording share."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from backend.scheduling.trace import load_trace
from backend.simulation.record import SMALL_RUNS, RunSpec, record_curve
from workers.datasets import load_dataset
from workers.iterations import TEXT_SAMPLE_MAX, Iterations, run_iterations
from workers.stopping import StopRule
from workers.trainers.contract import Metrics, NoParams, Trainer, TrainingData
from workers.trainers.registry import make_trainer, restore_trainer

GOLDEN_TRACE = Path(__file__).resolve().parents[2] / "data" / "traces" / "golden-small.json"


class Scripted(Trainer):
    """Reports a fixed sequence of losses; an exception in it is raised instead.
    ``evaluations`` are returned by successive ``evaluate()`` calls."""

    name = "scripted"

    def __init__(self, losses: Sequence[float | Exception],
                 evaluations: Sequence[Metrics] = (), batched: bool = False) -> None:
        super().__init__(NoParams(), TrainingData(name="none", task="classification"), 0)
        self.losses: Iterator[float | Exception] = iter(losses)
        self.evaluations: Iterator[Metrics] = iter(evaluations)
        self.batched = batched
        self.calls: list[int] = []

    def step(self, n: int) -> list[Metrics]:
        self.calls.append(n)
        out: list[Metrics] = []
        for _ in range(n):
            loss = next(self.losses)
            if isinstance(loss, Exception):
                raise loss
            self.iteration += 1
            out.append({"loss": loss})
        return out

    def evaluate(self) -> Metrics:
        return next(self.evaluations)

    def state(self) -> bytes:
        raise NotImplementedError

    def restore(self, blob: bytes) -> None:
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


def test_a_wind_down_ends_the_run_with_its_points_kept() -> None:
    # As a chunk does when its job is paused or cancelled mid-chunk.
    def pause_after_three(run: Iterations) -> bool:
        run.wind_down = run.iteration >= 3
        return True

    run = run_iterations(Scripted([1.0] * 10), StopRule(max_iterations=100), 10,
                         pause_after_three)
    assert run.iteration == 3 and losses(run) == [1.0, 1.0, 1.0]
    assert not run.stopped and run.verdict is None and run.error is None


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
    # Past MIN_SHARE of max_iterations, so only the history can hold the test back.
    rule = StopRule(max_iterations=100, tolerance=0.01, window=3)
    history = [1.0] * (rule.history_length - 1)
    run = run_iterations(Scripted([1.0, 0.5]), rule, 10, keep_going, start=40, history=history)
    assert run.iteration == 41
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
    # Loose enough that this minibatch loss converges (near iteration 550),
    # so the verdict's windows straddle chunk boundaries.
    rule = StopRule(max_iterations=1000, tolerance=1e-3, window=10)
    straight = run_iterations(make_trainer("logistic_regression", dataset, {}, 0), rule, 1000,
                              keep_going)
    assert straight.verdict is not None and straight.verdict.reason.startswith("converged")

    points: list[tuple[int, float, float]] = []
    trainer = make_trainer("logistic_regression", dataset, {}, 0)
    verdict = None
    while verdict is None:
        chunk = run_iterations(trainer, rule, 37, keep_going, start=len(points),
                               history=[p[1] for p in points[-rule.history_length:]],
                               initial=points[0][1] if points else None)
        points += chunk.points
        verdict = chunk.verdict
        trainer = restore_trainer("logistic_regression", trainer.state(), dataset, {}, 0)
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


def test_evaluations_run_every_eval_every_and_at_a_completed_end() -> None:
    evaluations = [{"val_loss": v} for v in (5.0, 4.0, 3.0)]
    trainer = Scripted([9.0, 8.0, 7.0, 6.0, 5.0], evaluations)
    run = run_iterations(trainer, StopRule(max_iterations=5), 10, keep_going, eval_every=2)
    assert [it for it, _ in run.evaluations] == [2, 4, 5]
    assert [m["val_loss"] for _, m in run.evaluations] == [5.0, 4.0, 3.0]


def test_a_val_loss_rule_stops_on_the_evaluations_not_the_training_loss() -> None:
    rule = StopRule(max_iterations=100, target_loss=1.0, metric="val_loss")
    # The training loss passes the target at once; only val_loss counts.
    trainer = Scripted([0.5] * 6, [{"val_loss": 3.0}, {"val_loss": 0.9}])
    run = run_iterations(trainer, rule, 10, keep_going, eval_every=3)
    assert run.iteration == 6
    assert run.verdict is not None and run.verdict.reason == "reached target val_loss 1"


def test_a_missing_quality_metric_fails_the_job_by_name() -> None:
    rule = StopRule(max_iterations=100, metric="val_loss")
    run = run_iterations(Scripted([1.0] * 4, [{"val_accuracy": 0.5}]), rule, 10, keep_going,
                         eval_every=2)
    assert run.verdict is not None and run.verdict.status == "failed"
    assert "no val_loss" in run.verdict.reason and "val_accuracy" in run.verdict.reason


def test_batched_trainers_get_growing_batches_cut_at_evaluations() -> None:
    trainer = Scripted([1.0] * 40, [{"val_loss": 1.0}] * 10, batched=True)
    run = run_iterations(trainer, StopRule(max_iterations=1000), 40, keep_going, eval_every=16)
    assert run.iteration == 40 and len(run.points) == 40
    assert max(trainer.calls) > 1
    # No batch crosses an evaluation boundary.
    ends = [sum(trainer.calls[:i + 1]) for i in range(len(trainer.calls))]
    assert 16 in ends and 32 in ends


def test_a_step_that_breaks_the_contract_is_an_error() -> None:
    class Short(Scripted):
        def step(self, n: int) -> list[Metrics]:
            return []

    run = run_iterations(Short([]), StopRule(max_iterations=10), 10, keep_going)
    assert isinstance(run.error, ValueError) and "must return 1 metrics" in str(run.error)

    class NoLoss(Scripted):
        def step(self, n: int) -> list[Metrics]:
            return [{"accuracy": 1.0}] * n

    run = run_iterations(NoLoss([]), StopRule(max_iterations=10), 10, keep_going)
    assert isinstance(run.error, ValueError) and "no 'loss'" in str(run.error)


class _Writer(Trainer):
    """Steps a constant loss; evaluates and writes a text naming the iteration."""

    name = "writer"

    def step(self, n: int) -> list[dict[str, float]]:
        self.iteration += n
        return [{"loss": 1.0}] * n

    def evaluate(self) -> dict[str, float]:
        return {"val_loss": 1.0}

    def text_sample(self) -> str | None:
        return f"at {self.iteration} " + "x" * 2000

    def state(self) -> bytes:
        return b""

    def restore(self, blob: bytes) -> None:
        pass


def test_each_evaluation_takes_the_trainers_text_sample_bounded() -> None:
    trainer = _Writer(NoParams(), TrainingData(name="t", task="text", text="abc"), 0)
    run = run_iterations(trainer, StopRule(max_iterations=25), 25, lambda _run: True,
                         eval_every=10)
    assert [i for i, _ in run.evaluations] == [10, 20, 25], "and at the completed end"
    assert run.text_sample is not None
    iteration, text = run.text_sample
    assert iteration == 25 and text.startswith("at 25 ") and len(text) == TEXT_SAMPLE_MAX
