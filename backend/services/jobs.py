"""Job lifecycle operations shared by the API and the CLI."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select, update
from sqlmodel import Session, col

from backend.core.models import Job, JobStatus, LossRecord, Tenant, User, as_utc, utcnow
from backend.core.settings import get_settings
from backend.schemas import JobCreate, JobPublic, LossHistory, StoppingRule
from backend.services.quotas import check_submission, lock_tenant
from backend.services.specs import SpecError, SpecErrors, validate_job_spec


class JobStateError(Exception):
    """The job's current state does not allow the requested action."""


def _transition_values(target: str) -> dict[str, Any]:
    """The columns a move to ``target`` sets, for one job or many."""
    values: dict[str, Any] = {"status": target}
    if target == JobStatus.queued:
        values["waiting_since"] = utcnow()
    if target == JobStatus.cancelled:
        values["finished_at"] = utcnow()
        values["end_reason"] = "cancelled by user"
    return values


def create_job(*, session: Session, job_in: JobCreate, user: User, tenant: Tenant) -> Job:
    """Check ``job_in`` against the catalogues, the iteration limit and the
    tenant's quotas, and insert it as queued; raises SpecErrors or QuotaExceeded."""
    _check_iteration_limit(job_in=job_in, tenant=tenant)
    params, dataset_params = validate_job_spec(
        algorithm=job_in.algorithm, dataset=job_in.dataset, params=job_in.params,
        dataset_params=job_in.dataset_params, tenant_id=tenant.id or 0, session=session,
    )
    lock_tenant(session=session, tenant_id=tenant.id or 0)
    check_submission(session=session, tenant=tenant)
    job = Job(
        tenant_id=tenant.id or 0,
        user_id=user.id or 0,
        name=job_in.name or f"{job_in.algorithm} on {job_in.dataset}",
        algorithm=job_in.algorithm,
        dataset=job_in.dataset,
        params=params,
        dataset_params=dataset_params,
        seed=job_in.seed,
        max_iterations=job_in.stopping.max_iterations,
        target_loss=job_in.stopping.target_loss,
        tolerance=job_in.stopping.tolerance,
        convergence_window=job_in.stopping.window,
        status=JobStatus.queued,
    )
    session.add(job)
    session.commit()
    session.refresh(job)
    return job


def _check_iteration_limit(*, job_in: JobCreate, tenant: Tenant) -> None:
    limit = min(get_settings().max_iterations_limit, tenant.max_iterations_per_job)
    asked = job_in.stopping.max_iterations
    if asked > limit:
        raise SpecErrors([SpecError(["stopping", "max_iterations"],
                                    f"max_iterations {asked} is over the limit of {limit} "
                                    f"for tenant {tenant.name}")])


_TRANSITIONS: dict[str, tuple[tuple[str, ...], str]] = {
    # action: (statuses it applies to, new status)
    "pause": ((JobStatus.queued, JobStatus.running), JobStatus.paused),
    "resume": ((JobStatus.paused,), JobStatus.queued),
    "cancel": ((JobStatus.queued, JobStatus.running, JobStatus.paused), JobStatus.cancelled),
}


def change_state(*, session: Session, job: Job, action: str) -> Job:
    """Pause, resume or cancel. A chunk in flight finishes and keeps its
    results; it just does not put the job back in the queue."""
    allowed, target = _TRANSITIONS[action]
    for _attempt in range(5):
        session.refresh(job)
        if job.status not in allowed:
            raise JobStateError(f"cannot {action} a job that is {job.status}")
        values = _transition_values(target)
        result = session.execute(
            update(Job).where(Job.id == job.id, Job.status == job.status)  # type: ignore[arg-type]
            .values(**values)
        )
        if result.rowcount == 1:  # type: ignore[attr-defined]
            session.commit()
            session.refresh(job)
            return job
        session.rollback()
    raise JobStateError(f"job {job.id} kept changing; try again")


def to_public(job: Job) -> JobPublic:
    elapsed = job.attained_seconds
    return JobPublic(
        id=job.id or 0,
        tenant_id=job.tenant_id,
        name=job.name,
        algorithm=job.algorithm,
        dataset=job.dataset,
        params=job.params,
        dataset_params=job.dataset_params,
        seed=job.seed,
        stopping=StoppingRule(max_iterations=job.max_iterations, target_loss=job.target_loss,
                              tolerance=job.tolerance, window=job.convergence_window),
        status=job.status,
        progress=min(job.iterations_done / max(job.max_iterations, 1), 1.0)
        if job.status != JobStatus.completed else 1.0,
        iterations_done=job.iterations_done,
        initial_loss=job.initial_loss,
        current_loss=job.current_loss,
        best_loss=job.best_loss,
        created_at=as_utc(job.created_at),
        started_at=as_utc(job.started_at) if job.started_at else None,
        finished_at=as_utc(job.finished_at) if job.finished_at else None,
        elapsed_seconds=elapsed,
        chunks_run=job.chunks_run,
        end_reason=job.end_reason,
        error=job.error,
        scheduler_reason=job.last_reason,
        predicted_gain=job.predicted_gain,
    )


def loss_history(*, session: Session, job_id: int, max_points: int) -> LossHistory:
    """The job's losses, downsampled to about ``max_points`` for long runs.

    Downsampling keeps the first and last point and, per bucket, the point
    with the lowest loss, so the curve's shape and best value survive.
    """
    total = session.execute(
        select(func.count()).select_from(LossRecord).where(col(LossRecord.job_id) == job_id)
    ).scalar_one()
    rows = session.execute(
        select(col(LossRecord.iteration), col(LossRecord.loss))
        .where(col(LossRecord.job_id) == job_id)
        .order_by(col(LossRecord.iteration))
    ).all()
    iterations = [int(r[0]) for r in rows]
    losses = [float(r[1]) for r in rows]
    downsampled = len(rows) > max_points
    if downsampled:
        iterations, losses = _downsample(iterations, losses, max_points)
    return LossHistory(job_id=job_id, total_points=int(total), downsampled=downsampled,
                       iterations=iterations, losses=losses)


def _downsample(its: list[int], losses: list[float], n: int) -> tuple[list[int], list[float]]:
    n = max(n, 3)
    buckets = n - 2
    inner = range(1, len(its) - 1)
    size = len(inner) / buckets
    out_i, out_l = [its[0]], [losses[0]]
    for b in range(buckets):
        lo = 1 + int(b * size)
        hi = max(1 + int((b + 1) * size), lo + 1)
        best = min(range(lo, min(hi, len(its) - 1)), key=lambda k: losses[k], default=None)
        if best is not None:
            out_i.append(its[best])
            out_l.append(losses[best])
    out_i.append(its[-1])
    out_l.append(losses[-1])
    return out_i, out_l


BULK_MAX_IDS = 10_000


def bulk_change_state(*, session: Session, action: str, candidates: Any) -> dict[int, int]:
    """Apply ``action`` to every job ``candidates`` selects (a ``SELECT job.id,
    job.tenant_id`` the caller has already scoped to its tenant) whose status
    allows it, in one UPDATE per 900 jobs; returns job id -> tenant id of the
    jobs that changed.

    Jobs in a status the action does not apply to are skipped, not refused: a
    bulk cancel of "everything queued" must not fail because one job finished
    meanwhile.
    """
    allowed, target = _TRANSITIONS[action]
    tenant_of = {int(r[0]): int(r[1]) for r in session.execute(
        candidates.where(col(Job.status).in_(allowed)).order_by(col(Job.id))).all()}
    ids = list(tenant_of)
    if not ids:
        return {}
    values = _transition_values(target)
    changed: dict[int, int] = {}
    # Chunks of ids stay under every database's bound-parameter limit.
    for start in range(0, len(ids), 900):
        part = ids[start:start + 900]
        session.execute(update(Job).where(col(Job.id).in_(part), col(Job.status).in_(allowed))
                        .values(**values))
        # The status check in the UPDATE skips jobs that moved meanwhile; read
        # back which ones it really changed.
        changed.update((int(r[0]), tenant_of[int(r[0])]) for r in session.execute(
            select(col(Job.id)).where(col(Job.id).in_(part), col(Job.status) == target)).all())
    session.commit()
    return changed
