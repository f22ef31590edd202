"""Scheduling-quality figures of a simulation run (DESIGN §7).

* ``avg_norm_loss``: time average, over the span in which any job is active
  (arrived, not finished), of the mean normalised loss of the active jobs. A
  job counts 1 until its first iteration completes; the loss of a job changes
  as each iteration completes. (The SLAQ paper's measure.)
* ``arrived_norm_loss``: the same over every job that has arrived, a
  finished one at its final normalised loss, from the first arrival to the
  last finish. The paper's measure drops a job from the average when it
  finishes, so a converged job kept waiting (its loss near 0) lowers it and
  finishing that job raises it; this one does not move when a job finishes,
  so it does not reward holding converged jobs back.
* ``tXX_mean`` / ``t90_p95``: seconds from arrival until a job's normalised
  loss first reaches ``1 - XX%`` (it has made XX% of its loss reduction).
* ``mean_completion``: mean seconds from arrival to finish; ``makespan``:
  first arrival to last finish.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from backend.scheduling.simulator import SimJob, SimResult


@dataclass(frozen=True)
class Figures:
    avg_norm_loss: float
    arrived_norm_loss: float
    t90_mean: float
    t95_mean: float
    t99_mean: float
    t90_p95: float
    mean_completion: float
    makespan: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def normalised_losses(job: SimJob) -> np.ndarray:
    """The normalised loss after each iteration the job ran."""
    losses = np.asarray(job.curve.losses[: len(job.iteration_times)])
    span = job.curve.initial_loss - job.curve.final_loss
    if span <= 0:
        return np.zeros_like(losses)
    return np.clip((losses - job.curve.final_loss) / span, 0.0, 1.0)


def time_to_fraction(job: SimJob, fraction: float) -> float:
    """Seconds from arrival until ``fraction`` of the loss reduction is made."""
    norm = normalised_losses(job)
    reached = np.flatnonzero(norm <= 1.0 - fraction + 1e-12)
    if reached.size == 0:
        raise ValueError(f"job {job.job_id} never reached {fraction:.0%} (unfinished run?)")
    return job.iteration_times[int(reached[0])] - job.arrival


def step_series(result: SimResult, *, keep_finished: bool = False
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Change points of the active set: ``(times, active count, sum of normalised loss)``
    holding from each time to the next; with ``keep_finished`` a finished job
    stays in the set at its final normalised loss (the last time is the last
    finish)."""
    times, dcount, dsum = [], [], []
    for job in result.jobs:
        if job.finish is None:
            raise ValueError(f"job {job.job_id} did not finish")
        norm = normalised_losses(job)
        times += [job.arrival, job.finish]
        if keep_finished:
            dcount += [1.0, 0.0]
            dsum += [1.0, 0.0]
        else:
            dcount += [1.0, -1.0]
            dsum += [1.0, -float(norm[-1]) if norm.size else -1.0]
        if norm.size:
            times.extend(job.iteration_times)
            dcount.extend([0.0] * norm.size)
            dsum.extend(np.diff(np.concatenate([[1.0], norm])).tolist())
    t = np.asarray(times)
    order = np.argsort(t, kind="stable")
    return t[order], np.cumsum(np.asarray(dcount)[order]), np.cumsum(np.asarray(dsum)[order])


def _time_average(t: np.ndarray, count: np.ndarray, total: np.ndarray) -> float:
    """Time average of ``total / count`` over the spans where ``count`` > 0."""
    widths = np.diff(t)
    busy = count[:-1] > 0.5
    mean = np.divide(total[:-1], count[:-1], out=np.zeros_like(widths), where=busy)
    busy_time = float(widths[busy].sum())
    return float((mean * widths)[busy].sum() / busy_time) if busy_time > 0 else 0.0


def figures(result: SimResult) -> Figures:
    avg = _time_average(*step_series(result))
    arrived = _time_average(*step_series(result, keep_finished=True))
    t90 = np.array([time_to_fraction(j, 0.90) for j in result.jobs])
    t95 = np.array([time_to_fraction(j, 0.95) for j in result.jobs])
    t99 = np.array([time_to_fraction(j, 0.99) for j in result.jobs])
    completion = np.array([j.finish - j.arrival for j in result.jobs if j.finish is not None])
    makespan = max(j.finish or 0.0 for j in result.jobs) - min(j.arrival for j in result.jobs)
    return Figures(
        avg_norm_loss=avg, arrived_norm_loss=arrived,
        t90_mean=float(t90.mean()), t95_mean=float(t95.mean()),
        t99_mean=float(t99.mean()), t90_p95=float(np.percentile(t90, 95)),
        mean_completion=float(completion.mean()), makespan=float(makespan),
    )


def mean_loss_timeline(result: SimResult, points: int = 400) -> tuple[list[float], list[float]]:
    """Mean normalised loss of active jobs sampled at ``points`` times (for charts)."""
    t, count, total = step_series(result)
    grid = np.linspace(float(t[0]), float(t[-1]), points)
    idx = np.clip(np.searchsorted(t, grid, side="right") - 1, 0, len(t) - 1)
    mean = np.divide(total[idx], count[idx], out=np.zeros(points), where=count[idx] > 0.5)
    return grid.tolist(), mean.tolist()
