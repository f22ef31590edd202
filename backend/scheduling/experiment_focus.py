"""Which of an experiment's configurations uses the slots the policy gave it (pure).

The policy decides how many slots an experiment's jobs get, next to every
other job of every tenant, by predicted gain. But an experiment is after one
thing: its best configuration, as soon as possible. So when an experiment
asked for predictive early stopping, each slot the policy granted to one of
its jobs goes to its waiting configuration with the best objective so far
instead (its latest value). The experiment gets no more slots than before,
and no other job gets fewer; only the order inside the experiment changes.
Jobs the rule may not judge yet (below its ``min_iterations``, its first
rung) or the predictor cannot extrapolate yet keep their grants, so every
configuration runs to its first judgement before it is compared. Comparing
sooner starved configurations for good: a new job's first grant measures its
speed over a few iterations, two points are enough to extrapolate, and a
configuration that was behind at iteration 10 then lost every slot the
policy gave it to the leaders, so the rule, which judges from iteration
``min_iterations`` on, never saw it until the leaders had run their whole
budgets (a live 5-rate sweep of 100,000 iterations: the worst rate waited
105 s at iteration 10, then was stopped within a second of running).

Why the latest value and not the predicted final: on both recorded sweeps
and every cluster size measured, ranking by the predicted final reached the
sweep's best 15-46% later (docs/experiments.md). The extrapolation decides
what is hopeless (the stopping rule, with its band); among the rest, the
configuration that is ahead now is the better bet for the next slot, and
running it on makes it finish soonest.

Except a configuration past its best: one whose latest value is worse than
its own best by more than its noise (an overfitting held-out loss rising
after its dip) waits behind every configuration still improving. Serving it
cannot better the experiment's best-so-far, which its best already counts,
and a leader by latest value can be one that has turned: on the recorded
torch sweep, serving those configurations last let the rule stop 22 instead
of 18 (42-46% of the slot-seconds saved instead of 36-40%), and the CNN
sweep's best was found sooner at 2 slots (8.6 -> 7.5 s), with no sweep,
cluster or seed finding it later (docs/experiments.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from backend.scheduling.allocation import chunk_iterations
from backend.scheduling.early_stopping import RuleConfig, Trial
from backend.scheduling.types import Grant, JobView, Policy, Snapshot


@dataclass(frozen=True)
class Standing:
    """An experiment job's place: ``score`` lower is better (a maximised
    metric negated); ``text`` says it in the metric's own words for the
    grant's reason."""

    experiment_id: int
    score: float
    text: str
    past_best: bool = False
    """Its latest value is worse than its best by more than its noise
    (:func:`past_best`): it waits behind those still improving."""


def standings(experiment_id: int, config: RuleConfig,
              trials: Iterable[Trial]) -> dict[int, Standing]:
    """Standings of an experiment's jobs that the rule judges (from
    ``min_iterations`` on) and the predictor can extrapolate, by their latest
    objective; none unless the experiment asked for predictive stopping."""
    if config.rule != "predictive":
        return {}
    sign = -1.0 if config.maximise else 1.0
    out = {}
    for trial in trials:
        if trial.final is None or not trial.points \
                or trial.iterations_done < config.min_iterations:
            continue
        iteration, value = trial.points[-1]
        text = f"its latest {config.metric} {value:.3g} (iteration {iteration})"
        turned = past_best(trial.points, maximise=config.maximise)
        if turned:
            best = (max if config.maximise else min)(v for _, v in trial.points)
            text += f", past its best {best:.3g}"
        out[trial.job_id] = Standing(experiment_id, sign * value, text, turned)
    return out


def past_best(points: Sequence[tuple[int, float]], *, maximise: bool) -> bool:
    """Whether the newest value is worse than the series' best by more than
    its noise (the median step between its last four values); never with
    fewer than three values.

    Example: val_loss 0.50, 0.30, 0.20, 0.26, 0.31: steps 0.10, 0.06, 0.05,
    median 0.06; 0.31 > 0.20 + 0.06, so past its best. 0.50, 0.30, 0.20,
    0.22: 0.22 < 0.20 + 0.10, a wobble."""
    values = [-v if maximise else v for _, v in points]
    if len(values) < 3:
        return False
    recent = values[-4:]
    steps = sorted(abs(b - a) for a, b in zip(recent, recent[1:], strict=False))
    return values[-1] > min(values) + steps[len(steps) // 2]


def focus(snapshot: Snapshot, grants: Sequence[Grant],
          standings: Mapping[int, Standing]) -> list[Grant]:
    """``grants`` with each grant to a job that has a standing handed to the
    best-standing waiting job of the same experiment with the same
    requirements (itself, if it is that job). Order and length are kept."""
    positions = [i for i, grant in enumerate(grants) if grant.job_id in standings]
    if not positions:
        return list(grants)
    views = {job.job_id: job for job in snapshot.jobs if job.job_id in standings}
    taken = set(positions)
    held = {grant.job_id for i, grant in enumerate(grants) if i not in taken}
    # Candidates: waiting jobs with a standing that no other grant names.
    by_experiment: dict[int, list[JobView]] = {}
    for job_id, standing in standings.items():
        job = views.get(job_id)
        if job is not None and not job.running and job.remaining_iterations > 0 \
                and job_id not in held:
            by_experiment.setdefault(standing.experiment_id, []).append(job)
    for candidates in by_experiment.values():
        candidates.sort(key=lambda job: (standings[job.job_id].past_best,
                                         standings[job.job_id].score, job.job_id))
    out = list(grants)
    given: set[int] = set()
    for i in positions:
        standing = standings[grants[i].job_id]
        candidates = by_experiment[standing.experiment_id]
        # Within one requirement class there are at least as many candidates
        # as positions, each position's own job among them: a pick always exists.
        needs = views[grants[i].job_id].requirements
        pick = next(job for job in candidates if job.requirements == needs)
        candidates.remove(pick)
        given.add(pick.job_id)
        if pick.job_id == grants[i].job_id:
            continue
        out[i] = replace(grants[i], job_id=pick.job_id,
                         iterations=chunk_iterations(snapshot, pick), predicted_gain=None,
                         reason=_reason(standings[pick.job_id], grants[i].job_id, standing,
                                        earlier=grants[i].job_id in given))
    return out


def _reason(standing: Standing, ranked: int, instead: Standing, *, earlier: bool) -> str:
    # ``earlier``: the ranked job is ahead of this one and took an earlier
    # slot itself, so this slot went to the next best, behind it.
    which = ("none of its experiment's waiting configurations that fit this slot is still "
             "improving"
             if standing.past_best else
             "the best of its experiment's waiting configurations still improving")
    return (f"experiment focus: {standing.text}, {which}; "
            f"the policy gave this slot to the experiment's job {ranked} "
            f"({instead.text})" + (", which took an earlier slot" if earlier else ""))


class Focused:
    """``policy`` with :func:`focus` applied to every ranking it makes, from
    the ``standings`` current when it ranks: what the simulator schedules by,
    and what the live scheduler explains the queue with."""

    def __init__(self, policy: Policy, standings: Callable[[], Mapping[int, Standing]]) -> None:
        self.policy = policy
        self.standings = standings
        self.name = policy.name

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        return focus(snapshot, self.policy.allocate(snapshot), self.standings())
