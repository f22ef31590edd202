"""An experiment's early-stopping rule on the simulated clock.

The live scheduler applies :func:`backend.scheduling.early_stopping.decide`
to an experiment's jobs (:mod:`backend.scheduler.experiment_stopping`);
this adapter applies the same rule, with the same curve predictor, to the
simulator's jobs whenever a chunk of one of them ends, so the sweep
benchmark measures the code that runs live.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from backend.scheduling.early_stopping import (
    RuleConfig,
    Trial,
    decide,
    floors_by_training_loss,
    predict_final,
    training_floor,
)
from backend.scheduling.experiment_focus import Standing, standings
from backend.scheduling.predictor import LossPredictor
from backend.scheduling.rungs import at_rung
from backend.scheduling.simulator import SimJob
from backend.scheduling.types import Grant, JobView

POINT_EVERY = 10
"""On the training loss the rule sees every 10th loss (and the last): what an
experiment that evaluates every 10 iterations shows, and it keeps ASHA's rung
lookups cheap. A held-out metric the trace recorded (``config.metric`` in its
``evaluations``) is seen at the iterations it was evaluated, as live."""


class SweepStopper:
    """``stopper`` for :func:`backend.scheduling.simulator.simulate`: stops
    the experiment's jobs (``job_ids``) that ``config``'s rule stops."""

    def __init__(self, config: RuleConfig, job_ids: Collection[int]) -> None:
        self.config = config
        self.job_ids = frozenset(job_ids)
        self.predictor = LossPredictor()
        self.jobs: dict[int, SimJob] = {}
        self.finals: dict[int, tuple[float, float, float] | None] = {}
        self.series: dict[int, tuple[tuple[int, float], ...]] = {}
        self.floors: dict[int, float | None] = {}
        self.stopped: list[int] = []
        self.trials: list[Trial] = []

    def __call__(self, now: float, active: Mapping[int, SimJob],
                 ended: Sequence[SimJob]) -> list[int]:
        changed = [j for j in ended if j.job_id in self.job_ids]
        if not changed:
            return []
        self.jobs.update((i, j) for i, j in active.items() if i in self.job_ids)
        self.jobs.update((j.job_id, j) for j in changed)
        for job in changed:
            points = objective_points(job, self.config.metric)
            if not points:
                continue  # not evaluated yet: the rule cannot judge it
            self.series[job.job_id] = points
            if self.config.rule == "predictive" and job.finish is None:
                self.finals[job.job_id] = predict_final(
                    self.predictor, job_id=job.job_id, points=self.series[job.job_id],
                    max_iterations=_budget(job), maximise=self.config.maximise)
                if floors_by_training_loss(self.config):
                    self.floors[job.job_id] = training_floor(
                        points, objective_points(job, "loss"), maximise=self.config.maximise)
        trials = [Trial(job_id=i, iterations_done=j.done, max_iterations=_budget(j),
                        points=self.series[i], final=self.finals.get(i),
                        stoppable=j.finish is None and not j.stopped,
                        floor=self.floors.get(i))
                  for i, j in self.jobs.items() if i in self.series]
        self.trials = trials
        stops = [s.job_id for s in decide(trials, self.config)
                 if s.job_id in active and not active[s.job_id].stopped]
        self.stopped += stops
        return stops

    def at_rung(self, grant: Grant, job: JobView) -> Grant:
        """``rungs`` for :func:`simulate`: the experiment's grants end at
        the rule's rungs, as live; other jobs' grants are kept."""
        return at_rung(grant, job, self.config) if job.job_id in self.job_ids else grant

    def standings(self) -> dict[int, Standing]:
        """The experiment's jobs' standings for :func:`focus`, as the live
        scheduler keeps them (experiment id 0)."""
        return standings(0, self.config, self.trials)


def _budget(job: SimJob) -> int:
    """The job's iteration budget, as its live job would have it."""
    return max(job.curve.max_iterations, job.curve.iterations)


def objective_points(job: SimJob, metric: str) -> tuple[tuple[int, float], ...]:
    """What the job has shown of ``metric`` so far, ``(iteration, value)``."""
    recorded = job.curve.evaluations.get(metric)
    if recorded is not None:
        return tuple(p for p in recorded if p[0] <= job.done)
    if metric != "loss":
        raise ValueError(f"curve {job.curve.id!r} has no {metric} evaluations")
    history = job.history
    if not history:
        return ()
    chosen = [(p.iteration, p.loss) for p in history if p.iteration % POINT_EVERY == 0]
    last = history[-1]
    if not chosen or chosen[-1][0] != last.iteration:
        chosen.append((last.iteration, last.loss))
    return tuple(chosen)
