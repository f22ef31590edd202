"""Experiment focus on literal snapshots: a predictive experiment's slots go to
its leading waiting configurations, and nobody else's grants move."""

from __future__ import annotations

from dataclasses import replace

from backend.scheduling.early_stopping import RuleConfig, Trial
from backend.scheduling.experiment_focus import Focused, Standing, focus, past_best, standings
from backend.scheduling.explain import explain_waiting
from backend.scheduling.registry import make_policy
from backend.scheduling.types import Grant, JobView, LossPoint, Requirements, Snapshot

SPI = 0.01  # seconds per iteration of every job here: 1 s chunks are 100 iterations


def view(job_id: int, *, tenant: int = 1, running: bool = False, done: int = 50,
         requirements: Requirements | None = None) -> JobView:
    return JobView(job_id=job_id, tenant_id=tenant, submitted_at=0.0, iterations_done=done,
                   max_iterations=1000, running=running,
                   losses=tuple(LossPoint(i, 1.0 / i, SPI) for i in range(1, done + 1)),
                   requirements=requirements or Requirements())


def snapshot(*jobs: JobView) -> Snapshot:
    return Snapshot(now=0.0, free_slots=2, total_slots=4, chunk_seconds=1.0, jobs=jobs)


def standing(experiment: int, score: float) -> Standing:
    return Standing(experiment, score, f"its latest loss {score:g}")


def test_the_experiments_slot_goes_to_its_leading_waiting_job() -> None:
    jobs = snapshot(view(1), view(2), view(3), view(9, tenant=2))
    grants = [Grant(9, 100, "other tenant"), Grant(1, 100, "rank 2")]
    ranks = {1: standing(7, 0.5), 2: standing(7, 0.1), 3: standing(7, 0.3)}
    out = focus(jobs, grants, ranks)
    assert [g.job_id for g in out] == [9, 2]
    assert out[0] == grants[0]
    # Sized by time for the job it went to: about a second at 0.01 s an iteration.
    assert 95 <= out[1].iterations <= 100
    assert out[1].reason.startswith("experiment focus: its latest loss 0.1")
    assert out[1].reason.endswith("job 1 (its latest loss 0.5)")


def test_running_and_otherwise_granted_jobs_are_not_candidates() -> None:
    jobs = snapshot(view(1), view(2, running=True), view(3), view(4))
    ranks = {1: standing(7, 0.9), 2: standing(7, 0.1), 3: standing(7, 0.2),
             4: standing(7, 0.5)}
    # Job 3 holds a grant the focus does not own (say the wait bound's), yet
    # it has a standing: the experiment's other position goes to the next best.
    grants = [Grant(3, 100, "rank 1"), Grant(1, 100, "rank 2")]
    out = focus(jobs, grants, ranks)
    assert sorted(g.job_id for g in out) == [3, 4]
    assert len({g.job_id for g in out}) == len(out)


def test_several_positions_keep_their_order_and_never_grant_a_job_twice() -> None:
    jobs = snapshot(*(view(i) for i in range(1, 6)))
    ranks = {i: standing(7, score) for i, score in
             zip(range(1, 6), (0.5, 0.4, 0.3, 0.2, 0.1), strict=True)}
    grants = [Grant(1, 100, "rank 1"), Grant(2, 100, "rank 2")]
    out = focus(jobs, grants, ranks)
    assert [g.job_id for g in out] == [5, 4]


def test_experiments_do_not_trade_slots() -> None:
    jobs = snapshot(view(1), view(2), view(3))
    ranks = {1: standing(7, 0.5), 2: standing(8, 0.1), 3: standing(7, 0.3)}
    out = focus(jobs, [Grant(1, 100, "rank 1")], ranks)
    assert [g.job_id for g in out] == [3]


def test_a_job_that_needs_another_kind_of_slot_does_not_take_the_grant() -> None:
    gpu = Requirements(gpu=True)
    jobs = snapshot(view(1), view(2, requirements=gpu), view(3))
    ranks = {1: standing(7, 0.5), 2: standing(7, 0.1), 3: standing(7, 0.3)}
    out = focus(jobs, [Grant(1, 100, "rank 1")], ranks)
    assert [g.job_id for g in out] == [3]


def test_jobs_without_a_prediction_keep_their_grants() -> None:
    jobs = snapshot(view(1, done=0), view(2))
    out = focus(jobs, [Grant(1, 10, "warm-up share")], {2: standing(7, 0.1)})
    assert [g.job_id for g in out] == [1]


def test_standings_rank_extrapolated_jobs_of_predictive_experiments_by_latest_value() -> None:
    def trial(job_id: int, latest: float, final: tuple[float, float, float] | None) -> Trial:
        return Trial(job_id=job_id, iterations_done=300, max_iterations=1000,
                     points=((100, 0.5), (300, latest)), final=final)

    trials = [trial(1, 0.3, (0.9, 0.85, 0.95)), trial(2, 0.99, None),
              trial(3, 0.8, (0.82, 0.8, 0.85))]
    assert standings(7, RuleConfig(rule="asha"), trials) == {}
    ranked = standings(7, RuleConfig(rule="predictive", metric="val_accuracy",
                                     maximise=True), trials)
    # Job 2 cannot be extrapolated yet: it keeps whatever grant it gets.
    assert sorted(ranked) == [1, 3]
    # Maximised: the higher accuracy now is the better (lower) score, whatever
    # the extrapolation says of job 1.
    assert ranked[3].score < ranked[1].score
    assert ranked[3].text == "its latest val_accuracy 0.8 (iteration 300)"


def test_past_its_best_means_worse_than_its_best_by_more_than_its_noise() -> None:
    def points(*values: float) -> tuple[tuple[int, float], ...]:
        return tuple((50 * (i + 1), v) for i, v in enumerate(values))

    # The docstring's examples: a rise after the dip, and a wobble.
    assert past_best(points(0.5, 0.3, 0.2, 0.26, 0.31), maximise=False)
    assert not past_best(points(0.5, 0.3, 0.2, 0.22), maximise=False)
    # Two values say nothing; an accuracy past its best has fallen.
    assert not past_best(points(0.2, 0.9), maximise=False)
    assert past_best(points(0.5, 0.8, 0.9, 0.85, 0.6), maximise=True)
    assert not past_best(points(0.5, 0.8, 0.9, 0.95), maximise=True)


def test_a_configuration_past_its_best_waits_behind_those_still_improving() -> None:
    # Job 1 leads by latest val_loss (0.25) but rose from its dip at 0.15;
    # job 2 (0.30) and job 3 (0.40) are still falling.
    config = RuleConfig(rule="predictive", metric="val_loss", min_iterations=100)

    def trial(job_id: int, *values: float) -> Trial:
        return Trial(job_id=job_id, iterations_done=100 * len(values), max_iterations=1000,
                     points=tuple((100 * (i + 1), v) for i, v in enumerate(values)),
                     final=(values[-1], values[-1] * 0.9, values[-1] * 1.1))

    ranked = standings(7, config, [trial(1, 0.6, 0.15, 0.2, 0.25), trial(2, 0.9, 0.5, 0.35, 0.3),
                                   trial(3, 1.0, 0.7, 0.5, 0.4)])
    assert ranked[1].past_best and not ranked[2].past_best
    assert ranked[1].text == "its latest val_loss 0.25 (iteration 400), past its best 0.15"
    jobs = snapshot(view(1), view(2), view(3))
    out = focus(jobs, [Grant(3, 100, "rank 1"), Grant(1, 100, "rank 2")], ranked)
    assert [g.job_id for g in out] == [2, 3]
    assert "the best of its experiment's waiting configurations still improving" in out[0].reason
    # With nothing else improving waiting, it is served after all, and says why.
    alone = focus(snapshot(view(1), view(3, running=True)), [Grant(1, 100, "rank 1")],
                  {1: ranked[1], 3: ranked[3]})
    assert [g.job_id for g in alone] == [1]


def test_a_configuration_is_not_compared_before_the_rule_may_judge_it() -> None:
    # A live 5-rate sweep: the worst rate's first grant measured its speed over
    # 10 iterations; two points extrapolate, so it was ranked behind the
    # leaders and lost every slot the policy gave it, never reaching iteration
    # 30, where the rule would first judge it.
    config = RuleConfig(rule="predictive", top_k=3, min_iterations=30)
    slow = Trial(job_id=1, iterations_done=10, max_iterations=100_000,
                 points=tuple((i, 1.1 - 0.0002 * i) for i in range(1, 11)),
                 final=(0.5, 0.2, 0.8))
    leader = Trial(job_id=2, iterations_done=5000, max_iterations=100_000,
                   points=((30, 0.3), (5000, 0.0526)), final=(0.0526, 0.0520, 0.0530))
    ranked = standings(7, config, [slow, leader])
    assert sorted(ranked) == [2]
    # So the slot the policy gives the slow one stays its own ...
    jobs = snapshot(view(1, done=10), view(2))
    out = focus(jobs, [Grant(1, 30, "fair share")], ranked)
    assert [g.job_id for g in out] == [1]
    # ... until it has reached its first rung; from there it is compared.
    judged = replace(slow, iterations_done=30,
                     points=tuple((i, 1.1 - 0.0002 * i) for i in range(1, 31)))
    assert sorted(standings(7, config, [judged, leader])) == [1, 2]


def test_the_queue_is_explained_as_it_will_be_granted() -> None:
    # FIFO ranks job 1 first; the experiment's leader is job 3.
    jobs = replace(snapshot(view(1), view(2), view(3)), free_slots=0)
    ranks = {1: standing(7, 0.5), 2: standing(7, 0.4), 3: standing(7, 0.1)}
    plain = explain_waiting(make_policy("fifo"), jobs)
    focused = explain_waiting(Focused(make_policy("fifo"), lambda: ranks), jobs)
    assert plain[1].position == 1 and plain[3].position == 3
    assert [focused[i].position for i in (3, 2, 1)] == [1, 2, 3]
    assert focused[3].policy_reason.startswith("experiment focus: its latest loss 0.1")



def test_a_slot_behind_its_ranked_job_says_that_job_took_an_earlier_slot() -> None:
    # The policy ranks job 1 (0.9) then job 2 (0.3): the first slot goes to
    # job 2, the best; the second to job 3 (0.5), and its reason says why a
    # job behind job 2 got it.
    jobs = snapshot(view(1), view(2), view(3))
    ranks = {1: standing(7, 0.9), 2: standing(7, 0.3), 3: standing(7, 0.5)}
    out = focus(jobs, [Grant(1, 100, "rank 1"), Grant(2, 100, "rank 2")], ranks)
    assert [g.job_id for g in out] == [2, 3]
    assert out[0].reason.endswith("job 1 (its latest loss 0.9)")
    assert out[1].reason.endswith("job 2 (its latest loss 0.3), which took an earlier slot")
