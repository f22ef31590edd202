"""Grants of an experiment's jobs end at its rule's rungs, on literal inputs:
a new configuration's first grant ends at the first rung, a stretch to
amortise a move never carries a job past a rung, and a job cut at a rung
is ranked again with the others (nothing of its grant is owed to it)."""

from __future__ import annotations

from backend.scheduling.early_stopping import RuleConfig, judged_at
from backend.scheduling.residency import SlotView, amortised
from backend.scheduling.rungs import at_rung, next_rung
from backend.scheduling.simulator import SimConfig, build_policy, simulate
from backend.scheduling.trace import Trace, TraceCurve
from backend.scheduling.types import Grant, JobView, LossPoint
from backend.scheduling.workload import Arrival
from backend.simulation.sweep_stopping import SweepStopper

PREDICTIVE = RuleConfig(rule="predictive", min_iterations=100)
ASHA = RuleConfig(rule="asha", min_iterations=30, reduction=3)


def job(job_id: int = 1, done: int = 0, most: int = 600, switch_seconds: float = 0.0,
        spi: float = 0.01) -> JobView:
    losses = [LossPoint(i, 1.0 / i, spi) for i in range(1, done + 1)]
    return JobView(job_id=job_id, tenant_id=1, submitted_at=0.0, iterations_done=done,
                   max_iterations=most, losses=losses, experiment_id=7,
                   switch_seconds=switch_seconds)


def grant(iterations: int, job_id: int = 1) -> Grant:
    return Grant(job_id=job_id, iterations=iterations, reason="rank 1: new job, assumed gain 1")


def test_the_rules_rungs_lie_inside_the_budget() -> None:
    assert judged_at(PREDICTIVE, 600) == [100, 200, 400]
    assert judged_at(PREDICTIVE, 400) == [100, 200]  # the end is no rung: the job ends there
    assert judged_at(ASHA, 1000) == [30, 90, 270, 810]
    assert judged_at(RuleConfig(rule="none"), 600) == []
    assert next_rung(PREDICTIVE, 0, 600) == 100
    assert next_rung(PREDICTIVE, 100, 600) == 200
    assert next_rung(PREDICTIVE, 150, 600) == 200
    assert next_rung(PREDICTIVE, 400, 600) is None
    assert next_rung(None, 0, 600) is None


def test_a_new_configurations_first_grant_ends_at_the_first_rung() -> None:
    # The case: a fast new job sized to run all 600 iterations at once.
    cut = at_rung(grant(600), job(done=0), PREDICTIVE)
    assert cut.iterations == 100
    assert cut.reason == ("rank 1: new job, assumed gain 1; ends at iteration 100, where its "
                          "experiment's early-stopping rule judges it")


def test_grants_end_at_the_next_rung_and_short_ones_are_kept() -> None:
    assert at_rung(grant(600), job(done=100), PREDICTIVE).iterations == 100
    assert at_rung(grant(600), job(done=150), PREDICTIVE).iterations == 50
    assert at_rung(grant(30), job(done=150), PREDICTIVE) == grant(30)
    assert at_rung(grant(50), job(done=150), PREDICTIVE) == grant(50)  # ends on the rung
    assert at_rung(grant(600), job(done=400), PREDICTIVE) == grant(600)  # no rung left
    assert at_rung(grant(600), job(done=0), None) == grant(600)  # no rule
    assert at_rung(grant(100), job(done=20), ASHA).iterations == 10


def test_a_stretch_to_amortise_a_move_does_not_skip_a_rung() -> None:
    # 0.01 s an iteration, a 1.5 s move: amortised wants 2,850 iterations.
    moving = job(done=120, most=5000, switch_seconds=1.5)
    slot = SlotView("b", "cpu", "q.b")
    stretched = amortised(grant(50), moving, slot, {1: "a"})
    assert stretched.iterations == 2850
    assert at_rung(stretched, moving, PREDICTIVE).iterations == 80  # to 200, not 2,970


def test_a_job_cut_at_its_rung_is_ranked_again_with_the_others() -> None:
    # One slot, fair sharing: configuration 0 runs from t=0, and its grant (a
    # 1 s chunk, 100 iterations) ends at its first rung, 50; configuration 1
    # arrived meanwhile. What the cut took off is not owed to 0: the ranking
    # gives the slot to 1 (less service), so 1 starts before 0 goes past 50.
    curves = tuple(TraceCurve(id=name, losses=tuple(2.0 / (1 + i) for i in range(200)),
                              seconds=(0.01,) * 200, max_iterations=200)
                   for name in ("first", "second"))
    trace = Trace(curves=curves)
    arrivals = [Arrival(index=0, time=0.0, curve_id="first", experiment_id=1),
                Arrival(index=1, time=0.1, curve_id="second", experiment_id=1)]
    rule = RuleConfig(rule="predictive", top_k=1, min_iterations=50)
    stopper = SweepStopper(rule, range(2))
    result = simulate(build_policy("fair", trace, arrivals), trace, arrivals,
                      SimConfig(slots=1, chunk_seconds=1.0), stopper=stopper,
                      rungs=stopper.at_rung)
    first, second = result.jobs
    assert first.iteration_times[49] < second.iteration_times[0] < first.iteration_times[50]
