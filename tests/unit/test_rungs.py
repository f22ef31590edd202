"""Grants of an experiment's jobs end at its rule's rungs, on literal inputs:
a new configuration's first grant ends at the first rung, a stretch to
amortise a move never carries a job past a rung, and what a cut takes off is
granted again once the rule has kept the job."""

from __future__ import annotations

from backend.scheduling.early_stopping import RuleConfig, judged_at
from backend.scheduling.policies.fifo import FifoPolicy
from backend.scheduling.residency import SlotView, amortised
from backend.scheduling.round import decide
from backend.scheduling.rungs import (
    Owed,
    at_rung,
    cheap_to_move,
    continuations,
    cut_at_rung,
    next_rung,
    owed_now,
)
from backend.scheduling.types import Grant, JobView, LossPoint, Snapshot

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


def test_what_a_cut_takes_off_is_owed_and_granted_once_the_job_waits() -> None:
    owed: dict[int, Owed] = {}
    # At t=10 with 1 s chunks: job 4 is new (no speed yet), its slice is the
    # chunk; job 8 runs 0.01 s an iteration, its 600 are a 6 s slice.
    assert cut_at_rung(grant(600, job_id=4), job(4, done=0), PREDICTIVE, owed, 10.0,
                       1.0).iterations == 100
    assert cut_at_rung(grant(30, job_id=7), job(7, done=150), PREDICTIVE, owed, 10.0,
                       1.0).iterations == 30
    assert cut_at_rung(grant(600, job_id=8), job(8, done=150), PREDICTIVE, owed, 10.0,
                       1.0).iterations == 50
    assert owed == {4: Owed(500, 11.0, 1.0), 8: Owed(550, 16.0, 1.0)}
    # Job 4's chunk ended at its rung at 10.4 (0.004 s an iteration measured)
    # and the rule kept it; job 8 still runs. It is owed the rest of its
    # slice at its own speed: 0.6 s, 150 iterations.
    again = continuations(owed, {4: job(4, done=100, spi=0.004)}, set(), free_slots=2,
                          now=10.4)
    assert [(g.job_id, g.iterations) for g in again] == [(4, 150)]
    assert again[0].reason == ("continues its grant past iteration 100, where its experiment's "
                               "early-stopping rule judged it and kept it")
    # A continuation cut at the next rung in turn owes the rest and keeps the
    # deadline of the grant it continues.
    assert cut_at_rung(again[0], job(4, done=100, spi=0.004), PREDICTIVE, owed, 10.4,
                       1.0).iterations == 100
    assert owed == {4: Owed(50, 11.0, 1.0), 8: Owed(550, 16.0, 1.0)}
    # Run to its end, a continuation owes nothing more.
    cut_at_rung(grant(30, job_id=4), job(4, done=200), PREDICTIVE, owed, 11.0, 1.0)
    assert owed == {8: Owed(550, 16.0, 1.0)}


def test_the_rest_of_a_slice_is_sized_at_the_jobs_measured_speed() -> None:
    # Job 4 was new when granted: 600 iterations sized on a borrowed 0.005 s
    # estimate (a 3 s slice, to 13.0), cut to 100 at its first rung.
    owed: dict[int, Owed] = {}
    new = JobView(job_id=4, tenant_id=1, submitted_at=0.0, iterations_done=0,
                  max_iterations=5000, experiment_id=7, estimated_seconds_per_iteration=0.005)
    cut_at_rung(grant(600, job_id=4), new, PREDICTIVE, owed, 10.0, 1.0)
    assert owed == {4: Owed(500, 13.0, 1.0)}
    # Faster than borrowed (0.002 s, at the rung by 10.2): the 2.8 s left
    # hold 1,400 iterations, not the 500 the estimate cut off.
    fast = job(4, done=100, most=5000, spi=0.002)
    assert [g.iterations for g in continuations(dict(owed), {4: fast}, set(), 1, 10.2)] == [1400]
    # Slower (0.02 s, at the rung by 12.0): the 1 s left hold 50, not 500.
    slow = job(4, done=100, most=5000, spi=0.02)
    assert [g.iterations for g in continuations(dict(owed), {4: slow}, set(), 1, 12.0)] == [50]
    # Less than an iteration left: nothing owed, it is ranked again.
    left = dict(owed)
    assert continuations(left, {4: slow}, set(), 1, 12.99) == [] and left == {}
    # No measured speed yet: what the cut took off.
    assert owed_now(Owed(500, 13.0), new, 12.0) == 500


def test_a_slice_that_has_ended_is_owed_nothing() -> None:
    # A fast job owed thousands of iterations, cut at every rung, once held
    # its slot for a dozen chunks' overheads; past its slice it is ranked again.
    owed = {4: Owed(5000, 16.0)}
    assert continuations(owed, {4: job(4, done=200)}, set(), free_slots=1, now=16.5) == []
    assert owed == {}


def test_a_stopped_job_is_owed_nothing_and_free_slots_bound_the_continuations() -> None:
    owed = {4: Owed(500, 99.0), 5: Owed(300, 99.0), 6: Owed(100, 99.0)}
    waiting = {4: job(4, done=100), 5: job(5, done=100), 6: job(6, done=590)}
    again = continuations(owed, waiting, gone={5}, free_slots=1, now=10.0)
    assert [(g.job_id, g.iterations) for g in again] == [(4, 500)]
    assert set(owed) == {4, 6}
    # Never more than the job has left.
    del owed[4]
    assert [(g.job_id, g.iterations) for g in continuations(owed, waiting, set(), 1, 10.0)] == \
        [(6, 10)]


def test_a_job_cheap_to_move_is_owed_nothing_and_goes_back_to_the_ranking() -> None:
    # Cut at their first rung in 1 s chunks, to 11.0; kept by the rule at 10.4.
    owed = {4: Owed(500, 11.0, 1.0), 5: Owed(500, 11.0, 1.0), 6: Owed(500, 11.0, 1.0)}
    cheap = job(4, done=100, switch_seconds=0.03)  # a small model's restore
    dear = job(5, done=100, switch_seconds=0.4)  # a 10M-parameter model's
    unmeasured = job(6, done=100)
    assert cheap_to_move(owed[4], cheap)
    assert not cheap_to_move(owed[5], dear)
    assert not cheap_to_move(owed[6], unmeasured)
    # The edge: a tenth of the slice is no longer cheap.
    assert not cheap_to_move(owed[4], job(4, done=100, switch_seconds=0.1))
    again = continuations(owed, {4: cheap, 5: dear, 6: unmeasured}, set(), free_slots=3,
                          now=10.4)
    assert [g.job_id for g in again] == [5, 6]
    assert set(owed) == {5, 6}


def test_the_move_a_grant_paid_is_no_part_of_its_slice() -> None:
    # A new 10M-parameter configuration granted 600 iterations at 9.41 (a
    # 1 s slice, to 10.41), cut to 100 at its first rung. Its start took
    # 0.98 s, so its chunk to the rung ends at 10.6, past the slice's end.
    owed: dict[int, Owed] = {}
    new = JobView(job_id=4, tenant_id=1, submitted_at=0.0, iterations_done=0,
                  max_iterations=3000, experiment_id=7, estimated_seconds_per_iteration=0.001)
    cut_at_rung(grant(600, job_id=4), new, PREDICTIVE, owed, 9.41, 1.0, moved=True)
    assert owed == {4: Owed(500, 10.41, 1.0, moved=True)}
    # While its chunk runs its entry stands, though the slice's end has passed.
    assert continuations(owed, {}, set(), 1, 10.5) == [] and set(owed) == {4}
    # Waiting at the rung: the slice ends 0.98 s later, 11.39, and the 0.79 s
    # left hold 395 iterations at 0.002 s.
    at_rung_now = job(4, done=100, most=3000, switch_seconds=0.98, spi=0.002)
    again = continuations(owed, {4: at_rung_now}, set(), 1, 10.6)
    assert [g.iterations for g in again] == [395]
    assert owed[4].until == 10.41 + 0.98 and not owed[4].moved
    # Granted on the slot that holds it, nothing is put back: past 10.41, nothing is owed.
    stayed: dict[int, Owed] = {}
    cut_at_rung(grant(600, job_id=4), new, PREDICTIVE, stayed, 9.41, 1.0, moved=False)
    assert continuations(stayed, {4: at_rung_now}, set(), 1, 10.6) == [] and stayed == {}


def test_the_round_tells_the_cut_whether_the_grant_moves_the_job() -> None:
    jobs = [job(1, done=100, switch_seconds=0.5), job(2, done=100, switch_seconds=0.5)]
    snapshot = Snapshot(now=0.0, free_slots=2, total_slots=2, chunk_seconds=1.0, jobs=jobs,
                        resident=frozenset({1}))
    free = [SlotView("a", "", "qa", resident_job=1), SlotView("b", "", "qb", resident_job=9)]
    seen: dict[int, bool] = {}

    def cut(g: Grant, j: JobView, moved: bool) -> Grant:
        seen[j.job_id] = moved
        return g

    ranked = [grant(50, job_id=1), grant(50, job_id=2)]
    decide(FifoPolicy(), snapshot, ranking=ranked, free=free, resident={1: "a"}, cut=cut)
    # Job 1 steps on where its trainer is loaded; job 2 takes job 9's slot.
    assert seen == {1: False, 2: True}
