"""The portal's own finished jobs as a trace: the workload it actually ran.

``slaq record-trace --from-portal --since 24h`` and the admin page's what-if
replay (:mod:`backend.services.what_if`) read every job that arrived in a
window and completed: its loss and compute seconds per iteration
(``loss_point``), when it was submitted, and what each of its chunks cost
beyond its iterations (grant in the decision log to the chunk's last commit,
less the chunk's compute). The result is a trace whose curves replay those
jobs and whose arrivals replay their submission times and tenants, plus the
same jobs *as they ran*, in the simulator's terms, so the metrics code can
score the real history next to the simulated policies.

Jobs that did not complete (still waiting or running, paused, stopped early,
failed or cancelled) are left out and counted: a cancelled curve ends where a
person stopped it, which no policy would reproduce.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import ColumnElement, func, select
from sqlmodel import Session, col

from backend.core.models import Decision, Job, JobStatus, LossRecord, as_utc
from backend.scheduling.simulator import SimJob, SimResult
from backend.scheduling.trace import Arrival, Trace, TraceCurve
from backend.services.errors import Invalid

MAX_JOBS = 2000
"""Jobs one replay may hold: a simulation of each policy stays within seconds."""
MAX_POINTS = 1_000_000
"""Loss points one replay may read (a few tens of MB in memory)."""
UNMEASURED_OVERHEAD = 0.05
"""Seconds a chunk costs beyond its iterations when the decision log holds
no grant before its points: the live figure measured on this portal's small
jobs (docs/scheduling.md, per-chunk overhead)."""
_BATCH = 500


class WorkloadTooLarge(Invalid, ValueError):
    """The window holds more than one replay may read."""


@dataclass(frozen=True)
class PortalWorkload:
    trace: Trace
    """Curves ``job-<id>`` and their recorded arrivals (seconds from the first)."""
    as_run: SimResult
    """The same jobs as they ran live (iteration times from the commit times)."""
    since: datetime
    until: datetime
    left_out: dict[str, int] = field(default_factory=dict)
    """Why jobs of the window are not replayed, and how many."""


def iteration_times(points: Sequence[tuple[float, float]]) -> list[float]:
    """When each iteration ended, from (commit time, seconds) per point.

    A flush of a chunk's points is committed together, so its points share
    one time; the simulator dates each iteration when it is computed. Each
    point is dated back from its commit by the seconds of the iterations after
    it in that commit, so live and simulated quality-over-time measure the
    same moment (when the model got there), not when the chunk reported.
    """
    out = [0.0] * len(points)
    later = 0.0
    for i in range(len(points) - 1, -1, -1):
        committed, seconds = points[i]
        if i + 1 < len(points) and points[i + 1][0] != committed:
            later = 0.0
        out[i] = committed - later
        later += seconds
    return out


def chunk_overhead(grants: Sequence[float], points: Sequence[tuple[float, float]]) -> float | None:
    """Median seconds a chunk took beyond its iterations: from its grant to the
    last commit before the next grant, less the seconds of the points
    committed in between. ``grants`` sorted; ``points`` (commit, seconds)."""
    costs = []
    commits = [p[0] for p in points]
    for k, granted in enumerate(grants):
        ends = grants[k + 1] if k + 1 < len(grants) else float("inf")
        lo, hi = bisect.bisect_left(commits, granted), bisect.bisect_left(commits, ends)
        if hi > lo:
            compute = sum(p[1] for p in points[lo:hi])
            costs.append(max(commits[hi - 1] - granted - compute, 0.0))
    return statistics.median(costs) if costs else None


def _in_window(since: datetime, until: datetime) -> ColumnElement[bool]:
    return (col(Job.created_at) >= since) & (col(Job.created_at) < until)


def _completed_in(since: datetime, until: datetime) -> ColumnElement[bool]:
    return _in_window(since, until) & (col(Job.status) == JobStatus.completed)


def check_window(session: Session, since: datetime, until: datetime, *,
                 max_jobs: int = MAX_JOBS, max_points: int = MAX_POINTS) -> int:
    """How many jobs submitted in ``[since, until)`` completed; raises
    :class:`WorkloadTooLarge` beyond the bounds. One aggregate query, so a
    month of a busy portal is refused before anything is loaded."""
    count, points_total = session.execute(
        select(func.count(), func.coalesce(func.sum(col(Job.iterations_done)), 0))
        .where(_completed_in(since, until))).one()
    if count > max_jobs:
        raise WorkloadTooLarge(
            f"{count} completed jobs arrived in that window; a replay takes at most "
            f"{max_jobs}: choose a shorter window")
    if points_total > max_points:
        raise WorkloadTooLarge(
            f"the {count} completed jobs of that window ran {points_total:,} iterations; "
            f"a replay reads at most {max_points:,}: choose a shorter window")
    return int(count)


def record_portal_workload(session: Session, since: datetime, until: datetime, *,
                           max_jobs: int = MAX_JOBS, max_points: int = MAX_POINTS
                           ) -> PortalWorkload:
    """Every job submitted in ``[since, until)`` that completed, as a trace
    with arrivals; raises :class:`WorkloadTooLarge` beyond the bounds."""
    check_window(session, since, until, max_jobs=max_jobs, max_points=max_points)
    left_out: dict[str, int] = {}
    for status, count in session.execute(
            select(col(Job.status), func.count()).where(_in_window(since, until))
            .where(col(Job.status) != JobStatus.completed).group_by(col(Job.status))).all():
        left_out[f"not completed ({status})"] = int(count)
    completed = _completed_in(since, until)
    jobs = list(session.execute(
        select(Job).where(completed).order_by(col(Job.created_at), col(Job.id))).scalars())
    losses = _loss_points(session, [j.id for j in jobs if j.id is not None])
    grants = _grant_times(session, [j.id for j in jobs if j.id is not None])
    t0 = _epoch(jobs[0].created_at) if jobs else 0.0
    curves: list[TraceCurve] = []
    arrivals: list[Arrival] = []
    ran: list[SimJob] = []
    for job in jobs:
        assert job.id is not None
        rows = losses.get(job.id, [])
        if len(rows) < 2:
            _count(left_out, "fewer than two loss points")
            continue
        if [r[0] for r in rows] != list(range(1, len(rows) + 1)):
            _count(left_out, "loss history incomplete")
            continue
        if not all(math.isfinite(r[1]) for r in rows):
            _count(left_out, "non-finite losses")
            continue
        committed = [(_epoch(r[3]) - t0, float(r[2])) for r in rows]
        overhead = chunk_overhead([g - t0 for g in grants.get(job.id, [])], committed)
        curve = TraceCurve(
            id=f"job-{job.id}", losses=tuple(float(r[1]) for r in rows),
            seconds=tuple(max(float(r[2]), 1e-6) for r in rows),
            algorithm=job.algorithm, dataset=job.dataset, params=dict(job.params),
            dataset_params=dict(job.dataset_params), seed=job.seed,
            max_iterations=job.max_iterations, stop_reason=job.end_reason or "",
            chunk_overhead_seconds=UNMEASURED_OVERHEAD if overhead is None else overhead)
        arrival = Arrival(index=len(arrivals), time=_epoch(job.created_at) - t0,
                          curve_id=curve.id, tenant_id=job.tenant_id,
                          experiment_id=job.experiment_id)
        live = SimJob(arrival.index, curve, job.tenant_id, arrival.time)
        live.iteration_times = iteration_times(committed)
        live.done = curve.iterations
        live.finish = (_epoch(job.finished_at) - t0 if job.finished_at is not None
                       else live.iteration_times[-1])
        curves.append(curve)
        arrivals.append(arrival)
        ran.append(live)
    description = (f"the portal's completed jobs submitted from {as_utc(since).isoformat()} "
                   f"to {as_utc(until).isoformat()}")
    return PortalWorkload(
        trace=Trace(curves=tuple(curves), description=description, arrivals=tuple(arrivals)),
        as_run=SimResult("as run", ran, 0, 0.0, 0), since=since, until=until,
        left_out=left_out)


def _loss_points(session: Session, job_ids: Sequence[int]
                 ) -> dict[int, list[tuple[int, float, float, datetime]]]:
    out: dict[int, list[tuple[int, float, float, datetime]]] = {}
    for batch in _batches(job_ids):
        for job_id, iteration, loss, seconds, at in session.execute(
                select(col(LossRecord.job_id), col(LossRecord.iteration), col(LossRecord.loss),
                       col(LossRecord.seconds), col(LossRecord.recorded_at))
                .where(col(LossRecord.job_id).in_(batch))
                .order_by(col(LossRecord.job_id), col(LossRecord.iteration))).all():
            out.setdefault(job_id, []).append((iteration, loss, seconds or 0.0, at))
    return out


def _grant_times(session: Session, job_ids: Sequence[int]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for batch in _batches(job_ids):
        for job_id, at in session.execute(
                select(col(Decision.job_id), col(Decision.created_at))
                .where(col(Decision.job_id).in_(batch))
                .order_by(col(Decision.job_id), col(Decision.created_at))).all():
            out.setdefault(job_id, []).append(_epoch(at))
    return out


def _batches(ids: Sequence[int]) -> Iterable[Sequence[int]]:
    for start in range(0, len(ids), _BATCH):
        yield ids[start:start + _BATCH]


def _epoch(moment: datetime) -> float:
    return as_utc(moment).timestamp()


def _count(counts: dict[str, int], reason: str) -> None:
    counts[reason] = counts.get(reason, 0) + 1
