"""slaq's completion term on literal curves: of two jobs alike, the one
nearer its end goes first; a clearly larger predicted drop still wins; a
diverging job gets no term."""

from __future__ import annotations

import math

import numpy as np
import pytest

from backend.core.models import utcnow
from backend.scheduling.policies.slaq import SlaqPolicy, remaining_seconds
from backend.scheduling.registry import make_policy
from backend.scheduling.simulator import SimConfig, build_policy, simulate
from backend.scheduling.synthetic import synthetic_trace
from backend.scheduling.trace import Trace
from backend.scheduling.types import JobView, LossPoint, Snapshot
from backend.scheduling.workload import generate_workload
from backend.services.portal_trace import PortalWorkload
from backend.services.what_if import replay

SPI = 0.01


def view(job_id: int, losses: list[float], *, max_iterations: int,
         waiting_since: float = 0.0) -> JobView:
    points = tuple(LossPoint(k + 1, v, SPI) for k, v in enumerate(losses))
    return JobView(job_id=job_id, tenant_id=1, submitted_at=0.0, iterations_done=len(points),
                   max_iterations=max_iterations, losses=points,
                   attained_seconds=len(points) * SPI, waiting_since=waiting_since,
                   chunks_run=max(1, len(points) // 100))


def snapshot(*jobs: JobView) -> Snapshot:
    return Snapshot(now=10.0, free_slots=1, total_slots=2, chunk_seconds=1.0, jobs=list(jobs))


def policy(weight: float) -> SlaqPolicy:
    return SlaqPolicy(floor=None, bounds=None, completion_weight=weight)


def falling(n: int) -> list[float]:
    rate = (0.4 / 0.9) ** (1 / 40)
    return [0.1 + 0.9 * rate**k for k in range(1, n + 1)]


def test_remaining_seconds_at_each_jobs_own_speed() -> None:
    fast = view(1, falling(100), max_iterations=300)           # 200 left at 0.01 s
    slow = JobView(job_id=2, tenant_id=1, submitted_at=0.0, iterations_done=50,
                   max_iterations=60, attained_seconds=5.0)    # 10 left at 0.1 s
    ending = view(3, falling(100), max_iterations=101)         # 0.01 s: a tenth of a chunk
    new = JobView(job_id=4, tenant_id=1, submitted_at=0.0, iterations_done=0,
                  max_iterations=50)                           # default chunk's speed
    s = snapshot(fast, slow, ending, new)
    attained = np.array([j.attained_seconds for j in s.jobs])
    per_new = 1.0 / s.default_chunk_iterations
    assert remaining_seconds(s, s.jobs, attained) == pytest.approx(
        [2.0, 1.0, 0.1, 50 * per_new])


def test_of_two_jobs_alike_the_one_nearer_its_end_goes_first() -> None:
    # Same curve, service and next chunk (99 iterations); job 1 has waited
    # longer and has 1,960 iterations left, job 2 has 300 (3 s).
    far = view(1, falling(40), max_iterations=2000, waiting_since=0.0)
    near = view(2, falling(40), max_iterations=340, waiting_since=5.0)
    plain = policy(0.0).allocate(snapshot(far, near))
    assert [g.job_id for g in plain] == [1] and "finishing" not in plain[0].reason
    weighed = policy(0.01).allocate(snapshot(far, near))
    assert [g.job_id for g in weighed] == [2]
    assert "0.00333 of it for finishing in 3s" in weighed[0].reason


def test_a_larger_predicted_drop_outweighs_a_small_completion_term() -> None:
    # The docstring's falling job (about 0.39 of its total drop per second)
    # against a job flat for 100 iterations with 50 left (0.5 s): a weight
    # of 0.1 adds 0.2/s to the flat job, 0.3 adds 0.6/s.
    moving = view(1, falling(40), max_iterations=2000)
    flat = view(2, [0.2 + 0.8 * 0.9**k for k in range(1, 61)] + [0.2] * 100,
                max_iterations=210)
    assert [g.job_id for g in policy(0.1).allocate(snapshot(moving, flat))] == [1]
    assert [g.job_id for g in policy(0.3).allocate(snapshot(moving, flat))] == [2]
    fits = policy(0.3).predictor.fit_many([moving, flat])
    assert policy(0.3)._score(snapshot(moving, flat), flat, fits[1]) == pytest.approx(0.6)


def test_a_diverging_job_gets_no_completion_term() -> None:
    healthy = [0.2 + 1.0 / (1 + k / 20) for k in range(1, 301)]
    rising = healthy[:200] + [healthy[199] * math.exp((k - 200) / 60) for k in range(200, 300)]
    diverging = view(2, rising, max_iterations=310)
    p = policy(0.3)
    s = snapshot(diverging)
    assert p._score(s, diverging, p.predictor.fit(diverging)) == 0.0


def test_the_operators_weight_reaches_slaq_only() -> None:
    # COMPLETION_WEIGHT reaches the live scheduler's policy through the registry.
    slaq = make_policy("slaq", completion_guard=0.4, completion_weight=0.02)
    assert isinstance(slaq, SlaqPolicy) and slaq.completion_weight == 0.02
    assert slaq.floor is not None and slaq.floor.fraction == 0.4
    assert not hasattr(make_policy("las", completion_weight=0.02), "completion_weight")


def _portal_history() -> PortalWorkload:
    """A crowded 2-slot history (21 synthetic jobs at load 2) as it ran under fair."""
    trace = synthetic_trace(0, per_shape=3)
    arrivals = generate_workload(trace, slots=2, load=2.0, jobs=21, seed=0,
                                 chunk_seconds=0.1)
    recorded = Trace(curves=trace.curves, arrivals=tuple(arrivals))
    as_run = simulate(build_policy("fair", recorded, arrivals), recorded, arrivals,
                      SimConfig(slots=2, chunk_seconds=0.1))
    return PortalWorkload(recorded, as_run, since=utcnow(), until=utcnow())


def test_a_what_if_replay_runs_slaq_with_the_operators_weight() -> None:
    # The admin's replay answers "what would slaq do here" as the live
    # scheduler runs it: with COMPLETION_WEIGHT, mean completion moves.
    load = _portal_history()

    def slaq_completion(weight: float | None) -> float:
        runs = replay(load, ["slaq"], slots=2, chunk_seconds=0.1, completion_weight=weight)
        return next(r.figures.mean_completion for r in runs if r.label.startswith("slaq"))

    assert slaq_completion(0.3) < slaq_completion(None)


def test_a_what_if_replay_runs_slaq_once_per_weight_asked_for() -> None:
    # An admin compares weights before setting one: each run is slaq at its
    # own weight, labelled with it unless it is the one in force.
    load = _portal_history()
    runs = replay(load, ["slaq"], slots=2, chunk_seconds=0.1, completion_weight=0.0,
                  completion_weights=[0.0, 0.3])
    completion = {r.label: r.figures.mean_completion for r in runs}
    assert list(completion) == ["as run", "slaq", "slaq (weight 0.3)"]
    alone = replay(load, ["slaq"], slots=2, chunk_seconds=0.1, completion_weight=0.3)
    assert completion["slaq (weight 0.3)"] == alone[1].figures.mean_completion
    assert completion["slaq (weight 0.3)"] < completion["slaq"]
