"""The live early-stopping rules on the simulated clock: a sweep replayed in
the simulator loses its hopeless configurations, never its best, and a job
without a rule runs to its end."""

from __future__ import annotations

import math

import pytest

from backend.scheduling.early_stopping import RuleConfig
from backend.scheduling.simulator import SimConfig, build_policy, simulate
from backend.scheduling.trace import Trace, TraceCurve
from backend.scheduling.workload import Arrival
from backend.simulation.sweep_stopping import SweepStopper, objective_points
from tests.bench.sweeps import best_final, objective_of, smoothed, time_to_target, top_finals

ITERATIONS = 400


def _curve(name: str, floor: float, rate: float) -> TraceCurve:
    losses = tuple(floor + (2.0 - floor) * math.exp(-rate * i) for i in range(ITERATIONS))
    return TraceCurve(id=name, losses=losses, seconds=(0.01,) * ITERATIONS,
                      max_iterations=ITERATIONS, chunk_overhead_seconds=0.02)


SWEEP = Trace(curves=(
    _curve("best", 0.1, 0.03), _curve("good", 0.3, 0.03), _curve("fair", 0.5, 0.02),
    _curve("slow", 1.2, 0.01), _curve("flat", 1.9, 0.001), _curve("flatter", 1.95, 0.0005)))
ARRIVALS = [Arrival(index=i, time=0.0, curve_id=c.id) for i, c in enumerate(SWEEP.curves)]


def _run(rule: str) -> tuple[list[str], list[str], float]:
    stopper = None if rule == "none" else SweepStopper(
        RuleConfig(rule=rule, top_k=2, min_iterations=50), range(len(ARRIVALS)))
    result = simulate(build_policy("fair", SWEEP, ARRIVALS), SWEEP, ARRIVALS,
                      SimConfig(slots=2, chunk_seconds=0.2), stopper=stopper)
    stopped = [j.curve.id for j in result.jobs if j.stopped]
    finished = [j.curve.id for j in result.jobs if j.finish is not None]
    return stopped, finished, sum(j.attained for j in result.jobs)


@pytest.mark.parametrize("rule", ["predictive", "asha"])
def test_a_rule_stops_the_hopeless_never_the_best(rule: str) -> None:
    stopped, finished, spent = _run(rule)
    _, all_finished, all_spent = _run("none")
    assert {"flat", "flatter"} <= set(stopped), stopped
    assert "best" not in stopped
    if rule == "predictive":
        assert "good" not in stopped, "the top 2 are kept"  # ASHA halves down to one
    # Every job still ends (stopped jobs end where they stop), on fewer slot-seconds.
    assert sorted(finished) == sorted(all_finished) == sorted(c.id for c in SWEEP.curves)
    assert spent < all_spent


def test_without_a_rule_every_configuration_runs_its_whole_curve() -> None:
    result = simulate(build_policy("fair", SWEEP, ARRIVALS), SWEEP, ARRIVALS,
                      SimConfig(slots=2, chunk_seconds=0.2))
    assert [j.done for j in result.jobs] == [ITERATIONS] * len(SWEEP.curves)
    assert not any(j.stopped for j in result.jobs)


def test_time_to_target_is_when_the_best_configuration_gets_within_one_percent() -> None:
    best, target = best_final(SWEEP, "loss")
    assert best == "best" and target == pytest.approx(smoothed(SWEEP.curves[0].losses)[-1])
    result = simulate(build_policy("fair", SWEEP, ARRIVALS), SWEEP, ARRIVALS,
                      SimConfig(slots=2, chunk_seconds=0.2))
    when = time_to_target(result.jobs, target, 0.0, "loss")
    job = result.jobs[0]
    seen = smoothed(job.curve.losses)
    first = next(i for i, v in enumerate(seen) if v <= target * 1.01)
    assert when == pytest.approx(job.iteration_times[first])
    assert time_to_target(result.jobs[1:], target, 0.0, "loss") == math.inf


def _overfitting(name: str, best_at: int, floor: float) -> TraceCurve:
    """Training loss falls throughout; ``val_loss`` bottoms at ``best_at``
    and rises after it, evaluated every 50 iterations."""
    curve = _curve(name, 0.05, 0.02)
    evaluations = tuple((i, floor + 1e-6 * (i - best_at) ** 2)
                        for i in range(50, ITERATIONS + 1, 50))
    return TraceCurve(id=name, losses=curve.losses, seconds=curve.seconds,
                      max_iterations=ITERATIONS, chunk_overhead_seconds=0.02,
                      evaluations={"val_loss": evaluations})


VAL_SWEEP = Trace(curves=(_overfitting("early", 100, 0.2), _overfitting("late", 400, 0.3),
                          _overfitting("mid", 250, 1.0)))


def test_the_objective_is_val_loss_where_the_sweep_recorded_it() -> None:
    assert objective_of(VAL_SWEEP, "auto") == "val_loss"
    assert objective_of(VAL_SWEEP, "loss") == "loss"
    assert objective_of(SWEEP, "auto") == "loss"
    # Finals are each configuration's last evaluation: "early" has overfitted
    # to 0.2 + 0.09 by its end, "late" ends at its best, 0.3.
    best, target = best_final(VAL_SWEEP, "val_loss")
    assert (best, target) == ("early", pytest.approx(0.29))
    arrivals = [Arrival(index=i, time=0.0, curve_id=c.id) for i, c in enumerate(VAL_SWEEP.curves)]
    result = simulate(build_policy("fair", VAL_SWEEP, arrivals), VAL_SWEEP, arrivals,
                      SimConfig(slots=3, chunk_seconds=0.2))
    # "early" is below 0.29 * 1.01 first at its evaluation at iteration 50.
    early = result.jobs[0]
    assert time_to_target(result.jobs, target, 0.0, "val_loss") == \
        pytest.approx(early.iteration_times[49])


def test_the_top_k_the_bench_guards_are_the_best_finals_not_the_best_dips() -> None:
    # "dipper" dips to 0.25, below where "late" ever gets (0.3), then
    # overfits to 0.25 + 1e-6 * 350**2 = 0.3725; by final value the top 2
    # are "early" (0.29) and "late" (0.3).
    sweep = Trace(curves=VAL_SWEEP.curves + (_overfitting("dipper", 50, 0.25),))
    assert top_finals(sweep, "val_loss", top_k=2) == {"early", "late"}
    assert top_finals(sweep, "val_loss", top_k=1) == {"early"}
    assert top_finals(SWEEP, "loss", top_k=3) == {"best", "good", "fair"}


def test_the_rule_judges_the_recorded_val_loss() -> None:
    arrivals = [Arrival(index=i, time=0.0, curve_id=c.id) for i, c in enumerate(VAL_SWEEP.curves)]
    stopper = SweepStopper(RuleConfig(rule="asha", top_k=1, min_iterations=50,
                                      metric="val_loss"), range(3))
    result = simulate(build_policy("fair", VAL_SWEEP, arrivals), VAL_SWEEP, arrivals,
                      SimConfig(slots=3, chunk_seconds=0.2), stopper=stopper)
    # The training losses are identical, so only val_loss tells them apart:
    # ASHA keeps a third of them at its first rung, the one lowest there.
    assert [j.curve.id for j in result.jobs if j.stopped] == ["late", "mid"]
    assert objective_points(result.jobs[2], "val_loss")[-1][0] <= result.jobs[2].done
    with pytest.raises(ValueError, match="no val_accuracy"):
        objective_points(result.jobs[0], "val_accuracy")


def test_a_held_out_loss_is_floored_by_the_training_loss_as_live() -> None:
    arrivals = [Arrival(index=i, time=0.0, curve_id=c.id) for i, c in enumerate(VAL_SWEEP.curves)]
    stopper = SweepStopper(RuleConfig(rule="predictive", top_k=1, min_iterations=50,
                                      metric="val_loss"), range(3))
    result = simulate(build_policy("fair", VAL_SWEEP, arrivals), VAL_SWEEP, arrivals,
                      SimConfig(slots=3, chunk_seconds=0.2), stopper=stopper)
    # Every judged job got a floor from its training loss (what the live
    # stopper reads from its loss records), below every val_loss it showed.
    assert stopper.floors and all(f is not None for f in stopper.floors.values())
    for trial in stopper.trials:
        if trial.floor is not None:
            assert trial.floor < min(v for _, v in trial.points)
    # "mid" (val_loss about 1.0, training loss near 0.05) cannot reach 0.2.
    stopped = [j.curve.id for j in result.jobs if j.stopped]
    assert "mid" in stopped and "early" not in stopped
