"""The lookahead index, its LAS blend and divergence rule, the service floor and
the lookahead oracle, on literal curves."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from backend.scheduling.guards import ServiceFloor, WaitBounds, split_waiting
from backend.scheduling.policies.oracle import OraclePolicy, TrueCurve, TwoAxisOraclePolicy
from backend.scheduling.policies.slaq import SlaqPolicy, best_first, lookahead_rates
from backend.scheduling.predictor import CurveFit, LossPredictor, PredictorConfig, drop_model
from backend.scheduling.registry import make_policy
from backend.scheduling.simulator import SimConfig, SimJob, build_policy, simulate
from backend.scheduling.trace import Trace, TraceCurve
from backend.scheduling.types import JobView, LossPoint, Snapshot
from backend.scheduling.workload import Arrival

SPI = 0.01


def plateau_then_drop(n: int = 600, start: int = 200) -> list[float]:
    return [0.2 + 0.8 / (1 + math.exp((k - start) / 15)) for k in range(1, n + 1)]


def step_lr(n: int = 600) -> list[float]:
    # Decays to 0.6, a schedule step at 200 sends it to 0.3, another at 400 to 0.15.
    out: list[float] = []
    begin, level, target = 0, 1.0, 0.6
    for k in range(1, n + 1):
        if k in (200, 400):
            begin, level, target = k - 1, out[-1], out[-1] * 0.5
        out.append(target + (level - target) * math.exp(-(k - begin) / 15))
    return out


def steep(n: int, rate: float) -> list[float]:
    return [0.05 + rate**k for k in range(1, n + 1)]


def curve(cid: str, losses: list[float]) -> TraceCurve:
    # Each curve its own kind (algorithm): every arriving job's speed is
    # unknown, so its first chunk is the default 10 iterations, not a chunk
    # sized from the jobs before it.
    return TraceCurve(id=cid, losses=tuple(losses), seconds=(SPI,) * len(losses),
                      chunk_overhead_seconds=0.0, max_iterations=len(losses), algorithm=cid)


def chunk_starts(job: SimJob) -> list[float]:
    times = job.iteration_times
    return [times[0]] + [b for a, b in zip(times, times[1:], strict=False) if b - a > 1.5 * SPI]


def longest_wait(job: SimJob) -> float:
    gaps = np.diff(job.iteration_times)
    return float(gaps.max()) if gaps.size else 0.0


def run(policy_name: str, subject: list[float], gap: float = 1.5, **options: object) -> SimJob:
    """One slot; the subject arrives first, then a steep job every ``gap`` s (20 of them)."""
    curves = [curve("subject", subject)] + [curve(f"s{i}", steep(150, 0.95)) for i in range(20)]
    trace = Trace(tuple(curves))
    arrivals = [Arrival(0, 0.0, "subject")] + [Arrival(i + 1, 0.5 + gap * i, f"s{i}")
                                               for i in range(20)]
    policy = build_policy(policy_name, trace, arrivals, **options)
    result = simulate(policy, trace, arrivals, SimConfig(slots=1, chunk_seconds=0.5))
    return result.jobs[0]


def test_lookahead_rates_see_past_a_plateau() -> None:
    # Job 0: nothing for 2 chunks, then 1.0 in the third: its best rate is
    # 1.0 / 4 chunks. Job 1, convex: its best rate is one chunk ahead.
    plateau = {100: 0.0, 200: 0.0, 400: 1.0, 800: 1.0, 1600: 1.0}

    def gain(m: np.ndarray) -> np.ndarray:
        return np.array([[plateau[int(k)] for k in m[0]], 1 - 0.5 ** (m[1] / 100)])

    rates = lookahead_rates(gain, np.array([100, 100]), np.array([10_000, 10_000]),
                            np.array([0.01, 0.01]))
    assert rates[0] == 1.0 / 4.0 and math.isclose(rates[1], 0.5)


def test_lookahead_horizons_stop_at_the_jobs_remaining_iterations() -> None:
    asked: list[np.ndarray] = []

    def gain(m: np.ndarray) -> np.ndarray:
        asked.append(m)
        return m / 1000

    rates = lookahead_rates(gain, np.array([100]), np.array([150]), np.array([0.01]))
    assert asked and asked[0].max() == 150 and math.isclose(rates[0], 0.1)


def test_batched_drops_match_each_fits_own() -> None:
    base = LossPredictor().fit(view(1, [0.2 + 0.8 * 0.97 ** k for k in range(1, 80)],
                                    attained=1.0))
    fits = [replace(base, family="exp", params=(0.9, 0.1, 2.0, 0.0)),
            replace(base, family="inv_lin", params=(0.5, 0.2, 0.3, 0.0)),
            replace(base, family="inv_quad", params=(1.0, 2.0, 0.5, 0.05)),
            replace(base, family="geometric", params=(0.98,)),
            replace(base, family="flat", params=())]
    n = np.array([[1, 10, 100], [5, 50, 500], [0, 2, 20], [1, 30, 300], [4, 40, 400]])
    after = np.array([0, 7, 3, 11, 2])
    got = drop_model(fits, after)(n)
    for j, fit in enumerate(fits):
        assert got[j] == pytest.approx([fit.drop(int(k), int(after[j])) for k in n[j]],
                                        rel=1e-12, abs=1e-15)


def test_plateau_then_drop_job_keeps_getting_chunks() -> None:
    # The subject sits on a plateau while fresh steep jobs keep the one slot
    # fully loaded. With the starvation bound (60 chunks) off, only the index's
    # LAS blend and the service floor keep it running; it waits about 33 chunks
    # at worst here, when the stream is densest.
    job = run("slaq", plateau_then_drop(), bounds=WaitBounds(None, 5.0))
    assert job.finish is not None
    assert longest_wait(job) < 40 * 0.5
    assert len(chunk_starts(job)) >= 6


def test_step_lr_job_keeps_getting_chunks() -> None:
    job = run("slaq", step_lr(), bounds=WaitBounds(None, 5.0))
    assert job.finish is not None
    assert longest_wait(job) < 40 * 0.5
    assert len(chunk_starts(job)) >= 6


def view(job_id: int, losses: list[float], *, attained: float, waiting_since: float = 0.0,
         max_iterations: int = 2000) -> JobView:
    points = tuple(LossPoint(k + 1, v, SPI) for k, v in enumerate(losses))
    return JobView(job_id=job_id, tenant_id=1, submitted_at=0.0, iterations_done=len(points),
                   max_iterations=max_iterations, losses=points, attained_seconds=attained,
                   waiting_since=waiting_since, chunks_run=len(points) // 100)


def test_diverging_job_stops_being_favoured() -> None:
    falling = [0.2 + 1.0 / (1 + k / 20) for k in range(1, 301)]
    rising = falling[:200] + [falling[199] * math.exp((k - 200) / 60) for k in range(200, 300)]
    healthy = view(1, [0.2 + 1.0 / (1 + k / 20) for k in range(1, 301)], attained=3.0)
    diverging = view(2, rising, attained=3.0)
    s = Snapshot(now=10.0, free_slots=1, total_slots=2, chunk_seconds=1.0,
                 jobs=[healthy, diverging])
    policy = SlaqPolicy(floor=None)
    fits = policy.predictor.fit_many([healthy, diverging])
    assert policy._score(s, diverging, fits[1]) == 0.0
    assert policy._score(s, healthy, fits[0]) > 0.0
    assert [g.job_id for g in policy.allocate(s)] == [1]


def test_service_floor_bounds_a_tail_jobs_wait() -> None:
    # A flat tail (converged-looking, 9.6 s of work left) among a stream of
    # steep jobs, with the starvation bound (60 chunks = 30 s) off: without the
    # floor it waits 29 s at a stretch; a floor of half a round-robin turn
    # rate must cut that to well under half. (The default, a quarter, allows
    # 4 N chunk lengths with N runnable jobs: 24 s here.)
    flat_tail = [0.3 + 0.7 * 0.9**k for k in range(1, 60)] + [0.3] * 900
    guarded = run("slaq", flat_tail, gap=1.3, bounds=WaitBounds(None, 5.0),
                  floor=ServiceFloor(fraction=0.5))
    unguarded = run("slaq", flat_tail, gap=1.3, bounds=WaitBounds(None, 5.0), floor=None)
    assert guarded.finish is not None and unguarded.finish is not None
    assert longest_wait(unguarded) > 40 * 0.5
    assert longest_wait(guarded) < 0.5 * longest_wait(unguarded)


def test_service_floor_on_a_snapshot() -> None:
    floor = ServiceFloor(fraction=0.5)
    # 2 slots, 4 runnable jobs: a round-robin turn is 2 chunks, the bound 4 s.
    starved = view(1, [1.0, 0.9, 0.8], attained=0.5, waiting_since=15.5)
    served = view(2, [1.0, 0.9, 0.8], attained=9.0, waiting_since=16.5)
    s = Snapshot(now=20.0, free_slots=1, total_slots=2, chunk_seconds=1.0,
                 jobs=[starved, served, view(3, [1.0], attained=0.0, waiting_since=19.5),
                       view(4, [1.0], attained=0.0, waiting_since=19.5)])
    assert floor.wait_seconds(s) == 4.0
    overdue, behind, rest = split_waiting(s, WaitBounds(), floor)
    assert overdue == []
    assert [job.job_id for job, _, _ in behind] == [1]
    assert "service floor" in behind[0][1]
    assert [job.job_id for job in rest] == [2, 3, 4]
    assert [job.job_id for job in split_waiting(s, None, ServiceFloor(fraction=0.0))[2]] \
        == [1, 2, 3, 4]
    # The policy serves the floor's job before a better-ranked one.
    assert [g.job_id for g in SlaqPolicy().allocate(s)] == [1]


def test_the_portals_default_guard_is_the_service_floors() -> None:
    # The setting repeats the default (core may not import the scheduling layer).
    from backend.core.settings import Settings
    from backend.scheduling.guards import DEFAULT_COMPLETION_GUARD

    assert ServiceFloor().fraction == DEFAULT_COMPLETION_GUARD == 0.4
    assert Settings.model_fields["completion_guard"].default == DEFAULT_COMPLETION_GUARD


def test_completion_guard_setting_reaches_the_service_floor() -> None:
    # The admin's setting, through the registry: at 0.5 the flat tail that has
    # waited longest is served first by the floor; at 0 (off) a job still
    # falling outranks it; policies without a floor accept and ignore it.
    starved = view(1, [1.0] + [0.3] * 20, attained=5.0, waiting_since=15.5)
    s = Snapshot(now=20.0, free_slots=1, total_slots=2, chunk_seconds=1.0,
                 jobs=[starved, view(2, [1.0, 0.9, 0.8], attained=9.0, waiting_since=16.5),
                       view(3, [1.0], attained=0.0, waiting_since=19.5),
                       view(4, [1.0], attained=0.0, waiting_since=19.5)])
    guarded = make_policy("slaq", completion_guard=0.5).allocate(s)
    assert [g.job_id for g in guarded] == [1]
    assert "service floor" in guarded[0].reason
    off = make_policy("slaq", completion_guard=0.0).allocate(s)
    assert [g.job_id for g in off] != [1]
    assert not any("service floor" in g.reason for g in off)
    assert [g.job_id for g in make_policy("las", completion_guard=0.5).allocate(s)] == [3]


def test_oracle_looks_past_a_plateau() -> None:
    # Job 1: flat for 100 more iterations, then falls 1.0 over 200 (1/3 per
    # second over 3 chunks); job 2 gains 0.25 in its next chunk and little after.
    plateau = [1.0] * 200 + [1.0 - k / 200 for k in range(1, 201)]
    quick = [1.0 - 0.25 * min(k, 100) / 100 - 0.75 * max(k - 100, 0) / 2000
             for k in range(1, 2101)]
    truth = {1: TrueCurve(1.0, plateau, [SPI] * len(plateau)),
             2: TrueCurve(1.0, quick, [SPI] * len(quick))}
    jobs = [view(1, plateau[:100], attained=1.0, max_iterations=len(plateau)),
            view(2, quick[:1], attained=0.01, max_iterations=len(quick))]
    s = Snapshot(now=5.0, free_slots=1, total_slots=2, chunk_seconds=1.0, jobs=jobs)
    grants = OraclePolicy(true_curves=truth, floor=None).allocate(s)
    assert [g.job_id for g in grants] == [1]
    assert "chunk(s)" in grants[0].reason


def two_axis_jobs() -> tuple[dict[int, TrueCurve], list[JobView]]:
    """The :class:`TwoAxisOraclePolicy` docstring's example, as literal curves.

    Job 1: 100 iterations run at loss 1.0; its next chunk (100 iterations,
    1 s) falls to 0.5, then 900 iterations to 0: rate 0.5/s, 10 s left.
    Job 2: fell to 0 in its first 100 iterations and has 100 flat ones (1 s)
    left: rate 0, 1 s left."""
    falling = [1.0] * 100 + [1.0 - 0.5 * k / 100 for k in range(1, 101)] + [
        0.5 - 0.5 * k / 900 for k in range(1, 901)]
    flat_tail = [1.0 - k / 100 for k in range(1, 101)] + [0.0] * 100
    truth = {1: TrueCurve(1.0, falling, [SPI] * len(falling)),
             2: TrueCurve(1.0, flat_tail, [SPI] * len(flat_tail))}
    jobs = [view(1, falling[:100], attained=1.0, max_iterations=len(falling)),
            view(2, flat_tail[:100], attained=1.0, max_iterations=len(flat_tail))]
    return truth, jobs


def test_two_axis_oracle_weighs_quality_rate_against_finishing() -> None:
    truth, jobs = two_axis_jobs()
    s = Snapshot(now=5.0, free_slots=1, total_slots=2, chunk_seconds=1.0, jobs=jobs)
    quality_only = TwoAxisOraclePolicy(true_curves=truth, floor=None, weight=0.0).allocate(s)
    assert [g.job_id for g in quality_only] == [1]
    assert quality_only[0].predicted_gain == pytest.approx(0.5)
    # weight 1: job 1 scores 0.5 + 1/10 = 0.6, job 2 0 + 1/1 = 1.
    both = TwoAxisOraclePolicy(true_curves=truth, floor=None, weight=1.0).allocate(s)
    assert [g.job_id for g in both] == [2]
    assert "1 / 1s left = 1/s" in both[0].reason
    # Between: job 2 overtakes job 1 once weight / 1 > 0.5 + weight / 10, weight > 5/9.
    assert [g.job_id for g in TwoAxisOraclePolicy(
        true_curves=truth, floor=None, weight=0.5).allocate(s)] == [1]
    assert [g.job_id for g in TwoAxisOraclePolicy(
        true_curves=truth, floor=None, weight=0.6).allocate(s)] == [2]


def test_two_axis_oracle_is_shortest_remaining_first_at_a_large_weight() -> None:
    # Three jobs with the same shape (linear to 0) and 300, 500 and 200
    # iterations left: at weight 100 the order is by remaining work.
    lengths = {1: 400, 2: 600, 3: 300}
    truth = {j: TrueCurve(1.0, [1.0 - k / n for k in range(1, n + 1)], [SPI] * n)
             for j, n in lengths.items()}
    jobs = [view(j, list(truth[j].losses[:100]), attained=1.0, max_iterations=n)
            for j, n in lengths.items()]
    s = Snapshot(now=5.0, free_slots=3, total_slots=3, chunk_seconds=1.0, jobs=jobs)
    grants = TwoAxisOraclePolicy(true_curves=truth, floor=None, weight=100.0).allocate(s)
    assert [g.job_id for g in grants] == [3, 1, 2]
    # Equal scores (flat tails at weight 0) fall back to the shorter remainder.
    flat = {j: TrueCurve(1.0, [0.0] * n, [SPI] * n) for j, n in lengths.items()}
    flat_jobs = [view(j, [0.0] * 100, attained=1.0, max_iterations=n) for j, n in lengths.items()]
    s = replace(s, jobs=flat_jobs, free_slots=1)
    assert [g.job_id for g in TwoAxisOraclePolicy(
        true_curves=flat, floor=None, weight=0.0).allocate(s)] == [3]


def test_two_axis_oracle_is_registered_simulation_only_with_the_guard() -> None:
    from backend.scheduling.registry import GUARDED, SIMULATION_ONLY, live_policy_names

    assert "oracle-mix" in SIMULATION_ONLY and "oracle-mix" in GUARDED
    assert "oracle-mix" not in live_policy_names()
    with pytest.raises(ValueError, match="simulation-only"):
        make_policy("oracle-mix")
    truth, jobs = two_axis_jobs()
    policy = make_policy("oracle-mix", true_curves=truth, completion_guard=0.6, weight=2.0)
    assert isinstance(policy, TwoAxisOraclePolicy)
    assert policy.floor == ServiceFloor(fraction=0.6) and policy.weight == 2.0
    # Job 1 has waited past the floor (1 runnable job per slot / 0.6 = 1.67 s):
    # it is served first whatever the weight says.
    jobs = [replace(jobs[0], waiting_since=0.0), replace(jobs[1], waiting_since=4.5)]
    s = Snapshot(now=5.0, free_slots=1, total_slots=2, chunk_seconds=1.0, jobs=jobs)
    grants = policy.allocate(s)
    assert [g.job_id for g in grants] == [1] and "service floor" in grants[0].reason


def test_docstring_worked_example() -> None:
    rate = (0.4 / 0.9) ** (1 / 40)
    falling = view(1, [0.1 + 0.9 * rate**k for k in range(1, 41)], attained=0.4)
    flat = view(2, [0.2 + 0.8 * 0.9**k for k in range(1, 61)] + [0.2] * 100, attained=1.6)
    busy = JobView(job_id=3, tenant_id=1, submitted_at=0.0, iterations_done=10,
                   max_iterations=100, running=True)
    s = Snapshot(now=1.0, free_slots=1, total_slots=2, chunk_seconds=1.0,
                 jobs=[falling, flat, busy])
    policy = SlaqPolicy()
    grants = policy.allocate(s)
    assert [(g.job_id, g.iterations) for g in grants] == [(1, 99)]
    assert grants[0].predicted_gain is not None
    assert abs(grants[0].predicted_gain - 0.385) < 0.01
    assert grants[0].reason.startswith("rank 1 by lookahead index")
    flat_fit = policy.predictor.fit(flat)
    assert flat_fit.family == "flat" and flat_fit.uncertainty(99) == 0.0
    assert policy._score(s, flat, flat_fit) == 0.0


def test_a_job_whose_refit_was_deferred_is_ranked_from_where_it_is_now() -> None:
    curve_of = [0.1 + 1.0 / (1 + k / 30) for k in range(1, 301)]
    policy = SlaqPolicy(floor=None, bounds=None,
                        predictor=LossPredictor(PredictorConfig(refit_budget=1)))
    young = view(1, curve_of[:100], attained=1.0)
    first = policy.allocate(Snapshot(now=1.0, free_slots=1, total_slots=2, chunk_seconds=0.5,
                                     jobs=[young]))
    # Job 1 ran 200 more iterations, and job 2 arrived with history: the one
    # refit of the budget goes to job 2, job 1 keeps its fit from iteration 100.
    older = view(1, curve_of, attained=3.0)
    other = view(2, [2.0 * x for x in curve_of[:50]], attained=0.5)
    grants = policy.allocate(Snapshot(now=2.0, free_slots=2, total_slots=2, chunk_seconds=0.5,
                                      jobs=[older, other]))
    assert policy.predictor.deferred == 1
    kept = {g.job_id: g.predicted_gain for g in grants}[1]
    fresh = SlaqPolicy(floor=None, bounds=None).allocate(
        Snapshot(now=2.0, free_slots=1, total_slots=2, chunk_seconds=0.5, jobs=[older]))
    assert first[0].predicted_gain is not None and kept is not None
    assert fresh[0].predicted_gain is not None
    assert kept < 0.6 * first[0].predicted_gain, "the drop it already made is not counted again"
    assert kept == pytest.approx(fresh[0].predicted_gain, rel=0.3)
    # Handed the same view objects again (as live, nothing changed), job 1
    # is refitted now: its memoised score was made from an older fit.
    refits = policy.predictor.refits
    policy.allocate(Snapshot(now=3.0, free_slots=2, total_slots=2, chunk_seconds=0.5,
                             jobs=[older, other]))
    assert policy.predictor.refits == refits + 1 and policy.predictor.deferred == 0


def test_jobs_left_on_older_fits_are_not_handed_to_the_predictor_every_decision() -> None:
    curve_of = [0.1 + 1.0 / (1 + k / 30) for k in range(1, 301)]
    handed: list[int] = []

    class Counting(LossPredictor):
        def fit_many(self, jobs: Sequence[JobView]) -> list[CurveFit]:
            handed.append(len(jobs))
            return super().fit_many(jobs)

    predictor = Counting(PredictorConfig(refit_budget=1))
    policy = SlaqPolicy(floor=None, bounds=None, predictor=predictor)
    young = [view(i, curve_of[:100], attained=1.0) for i in range(1, 5)]

    def decide(jobs: list[JobView], now: float) -> None:
        policy.allocate(Snapshot(now=now, free_slots=1, total_slots=5, chunk_seconds=0.5,
                                 jobs=jobs))

    for now in (1.0, 2.0, 3.0, 4.0):  # a first fit each (the budget is one)
        decide(young, now)
    # All four report 100 more points: one is refitted, three keep older fits.
    older = [view(i, curve_of[:200], attained=2.0) for i in range(1, 5)]
    handed.clear()
    decide(older, 5.0)
    assert predictor.deferred == 3
    # The same views again: nothing changed, so nothing is handed over, yet
    # the predictor works through the three, oldest fit first.
    for now in (6.0, 7.0, 8.0):
        decide(older, now)
    assert handed == [4, 0, 0, 0]
    assert predictor.deferred == 0
    assert sorted(fit.key[0] for fit in predictor.take_refitted()) == [200] * 4


def test_on_a_cold_start_unfitted_jobs_wait_by_attained_service() -> None:
    jobs = [view(i, [0.1 + 1.0 / (1 + k / 30) for k in range(1, 81)], attained=float(i))
            for i in range(1, 6)]
    policy = SlaqPolicy(floor=None, bounds=None, warmup_share=0.0,
                        predictor=LossPredictor(PredictorConfig(refit_budget=2)))
    grants = policy.allocate(Snapshot(now=1.0, free_slots=5, total_slots=5, chunk_seconds=0.5,
                                      jobs=jobs))
    assert policy.predictor.deferred == 3
    pending = [g for g in grants if "not fitted yet" in g.reason]
    assert [g.job_id for g in pending] == [3, 4, 5], "least attained service first"
    assert all(g.predicted_gain is None for g in pending)
    policy.allocate(Snapshot(now=2.0, free_slots=5, total_slots=5, chunk_seconds=0.5, jobs=jobs))
    later = policy.allocate(Snapshot(now=3.0, free_slots=5, total_slots=5, chunk_seconds=0.5,
                                     jobs=jobs))
    assert policy.predictor.deferred == 0
    assert not [g for g in later if "not fitted yet" in g.reason]


@pytest.mark.parametrize("wanted", [1, 3, 40])
def test_best_first_reads_as_a_full_sort(wanted: int) -> None:
    rng = np.random.default_rng(wanted)
    jobs = [JobView(job_id=i, tenant_id=1, submitted_at=0.0, iterations_done=0,
                    max_iterations=10, waiting_since=float(rng.integers(0, 5)))
            for i in range(300)]
    scores = rng.integers(0, 20, 300).astype(float)  # many ties
    scores[7] = np.nan
    got = [job.job_id for job, _ in best_first(jobs, scores, wanted)]
    keyed = np.where(np.isnan(scores), -np.inf, scores)
    expected = sorted(range(300), key=lambda i: (-keyed[i], jobs[i].waiting_since, i))
    assert got == expected


def test_new_jobs_of_their_own_take_every_slot_a_sweeps_half() -> None:
    # Four slots, all free; two ranked jobs still dropping steeply, so any
    # new job beyond its warm-up share ranks behind them.
    ranked = [view(i, steep(60, 0.95), attained=1.0) for i in (1, 2)]

    def new(job_id: int, experiment: int | None) -> JobView:
        return JobView(job_id=job_id, tenant_id=1, submitted_at=0.0, iterations_done=0,
                       max_iterations=2000, waiting_since=0.1 * job_id,
                       experiment_id=experiment)

    def warmed(jobs: list[JobView], *, running: int = 0) -> list[int]:
        busy = [replace(new(100 + i, None), running=True) for i in range(running)]
        policy = SlaqPolicy(floor=None, bounds=None)
        grants = policy.allocate(Snapshot(now=1.0, free_slots=4 - running, total_slots=4,
                                          chunk_seconds=0.5, jobs=ranked + jobs + busy))
        return [g.job_id for g in grants if g.reason.startswith("warm-up share")]

    assert warmed([new(j, None) for j in (10, 11, 12, 13)]) == [10, 11, 12, 13]
    assert warmed([new(j, 7) for j in (10, 11, 12, 13)]) == [10, 11]
    # Configurations first in line, then a job of its own: it still starts.
    assert warmed([new(10, 7), new(11, 7), new(12, 7), new(13, None)]) == [10, 11, 13]
    # New jobs already running count against both shares.
    assert warmed([new(10, 7), new(11, None)], running=2) == [11]
