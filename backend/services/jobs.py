"""Job lifecycle operations shared by the API and the CLI."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select, update
from sqlmodel import Session, col

from backend.core.models import (
    Experiment,
    Job,
    JobStatus,
    LossRecord,
    Tenant,
    User,
    as_utc,
    utcnow,
)
from backend.core.settings import get_settings
from backend.scheduling.waiting import WaitingEntry
from backend.scheduling.waiting_words import reason
from backend.schemas import JobCreate, JobPublic, JobResidency, LossHistory, StoppingRule
from backend.services.errors import Conflict
from backend.services.job_explanation import explain_job
from backend.services.pools import (
    known_pools,
    placement_refusal,
    public_requirements,
    stored_requirements,
)
from backend.services.quotas import QuotaExceeded, check_submission, lock_tenant
from backend.services.specs import SpecError, SpecErrors, uses_gpu, validate_job_spec
from backend.services.tenant_files import display_name


class JobStateError(Conflict):
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
    return admit_jobs(session=session, jobs_in=[job_in], user=user, tenant=tenant)[0]


def admit_jobs(*, session: Session, jobs_in: list[JobCreate], user: User, tenant: Tenant,
               experiment: Experiment | None = None) -> list[Job]:
    """Check every spec, then insert all of them as queued in one transaction,
    or none: the quota check counts them together. With ``experiment``, it is
    inserted too and the jobs belong to it. Errors of the i-th of several specs
    are located under ``configurations.i``."""
    checked: list[tuple[JobCreate, int, dict[str, Any], dict[str, Any], dict[str, Any]]] = []
    errors: list[SpecError] = []
    pools = known_pools(session)
    for index, job_in in enumerate(jobs_in):
        try:
            _check_iteration_limit(job_in=job_in, tenant=tenant)
            eval_every = _eval_every(job_in)
            params, dataset_params = validate_job_spec(
                algorithm=job_in.algorithm, dataset=job_in.dataset, params=job_in.params,
                dataset_params=job_in.dataset_params, tenant_id=tenant.id or 0,
                session=session,
            )
            requirements = stored_requirements(job_in, uses_gpu=uses_gpu(job_in.algorithm))
            unplaceable = placement_refusal(pools, requirements, tenant)
            if unplaceable is not None:
                raise SpecErrors([SpecError(["requirements"],
                                            f"no worker can ever run this job: {unplaceable}")])
        except SpecErrors as exc:
            where: list[str | int] = ["configurations", index] if len(jobs_in) > 1 else []
            errors.extend(SpecError([*where, *e.loc], e.message) for e in exc.errors)
            continue
        checked.append((job_in, eval_every, params, dataset_params, requirements))
    if errors:
        raise SpecErrors(errors)
    lock_tenant(session=session, tenant_id=tenant.id or 0)
    try:
        check_submission(session=session, tenant=tenant, count=len(checked))
    except QuotaExceeded:
        session.rollback()
        raise
    if experiment is not None:
        session.add(experiment)
        session.flush()
    jobs = [Job(
        tenant_id=tenant.id or 0,
        user_id=user.id or 0,
        name=job_in.name or _default_name(session, job_in, tenant.id or 0),
        algorithm=job_in.algorithm,
        dataset=job_in.dataset,
        params=params,
        dataset_params=dataset_params,
        seed=job_in.seed,
        max_iterations=job_in.stopping.max_iterations,
        target_loss=job_in.stopping.target_loss,
        tolerance=job_in.stopping.tolerance,
        convergence_window=job_in.stopping.window,
        eval_every=eval_every,
        quality_metric=job_in.quality_metric,
        requirements=requirements,
        status=JobStatus.queued,
        experiment_id=experiment.id if experiment is not None else None,
    ) for job_in, eval_every, params, dataset_params, requirements in checked]
    session.add_all(jobs)
    session.commit()
    for job in jobs:
        session.refresh(job)
    return jobs


def _default_name(session: Session, job_in: JobCreate, tenant_id: int) -> str:
    # "softmax-web on wine", not "code:12 on wine": the names the tenant gave.
    return (f"{display_name(session, job_in.algorithm, tenant_id)} on "
            f"{display_name(session, job_in.dataset, tenant_id)}")


def _check_iteration_limit(*, job_in: JobCreate, tenant: Tenant) -> None:
    limit = min(get_settings().max_iterations_limit, tenant.max_iterations_per_job)
    asked = job_in.stopping.max_iterations
    if asked > limit:
        raise SpecErrors([SpecError(["stopping", "max_iterations"],
                                    f"max_iterations {asked} is over the limit of {limit} "
                                    f"for tenant {tenant.name}")])


def _eval_every(job_in: JobCreate) -> int:
    """The job's evaluation period. An explicit one must let the job evaluate
    at least once; the default is shortened to a short job's length. A job
    scheduled on ``val_loss`` must evaluate at all."""
    every, most = job_in.eval_every, job_in.stopping.max_iterations
    if "eval_every" not in job_in.model_fields_set:
        every = min(every, most)
    elif every > most:
        raise SpecErrors([SpecError(["eval_every"],
                                    f"eval_every {every} is more than stopping.max_iterations "
                                    f"{most}: the job would never evaluate; use at most {most}, "
                                    f"or 0 to turn evaluation off")])
    if job_in.quality_metric == "val_loss" and every == 0:
        raise SpecErrors([SpecError(["quality_metric"],
                                    "quality_metric 'val_loss' needs evaluations, but eval_every "
                                    "is 0 (never evaluate): set eval_every to a positive number "
                                    "of iterations, or use quality_metric 'loss'")])
    return every


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


def to_public(job: Job, waiting: WaitingEntry | None = None,
              tags: list[str] | None = None) -> JobPublic:
    """The job as the API shows it; ``waiting`` is the scheduler's published
    entry for a queued job, which the explanation and queue fields use;
    ``tags`` its tags (:func:`backend.services.labels.job_tags`)."""
    elapsed = job.attained_seconds
    explanation = explain_job(status=job.status, end_reason=job.end_reason, error=job.error,
                              last_reason=job.last_reason, waiting=waiting,
                              chunks_run=job.chunks_run)
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
        scheduler_reason=reason(waiting) if waiting else job.last_reason,
        predicted_gain=waiting.predicted_gain if waiting else job.predicted_gain,
        queue_position=explanation.position,
        eval_every=job.eval_every,
        quality_metric=job.quality_metric,
        requirements=public_requirements(job),
        pool=job.pool,
        last_eval=last_eval_metrics(job),
        last_eval_iteration=last_eval_iteration(job),
        explanation=explanation,
        experiment_id=job.experiment_id,
        tags=tags or [],
        note=job.note,
        stopped_early=job.stopped_early,
        trainer_output=job.trainer_output,
        text_sample=job.sample_text if job.sample_iteration is not None else None,
        text_sample_iteration=job.sample_iteration,
        residency=JobResidency(checkpoint_iteration=job.checkpoint_iteration,
                               restores=job.restores, resident_chunks=job.resident_chunks,
                               checkpoints_saved=job.checkpoints_saved,
                               switch_seconds=job.switch_seconds),
    )


def last_eval_metrics(job: Job) -> dict[str, float]:
    """The latest evaluation's metrics (the stored dict less its iteration)."""
    return {str(k): float(v) for k, v in (job.last_eval or {}).items()
            if k != "iteration" and isinstance(v, int | float) and not isinstance(v, bool)}


def last_eval_iteration(job: Job) -> int | None:
    found = (job.last_eval or {}).get("iteration")
    return int(found) if isinstance(found, int | float) and not isinstance(found, bool) else None


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
        iterations, losses = downsample(iterations, losses, max_points)
    return LossHistory(job_id=job_id, total_points=int(total), downsampled=downsampled,
                       iterations=iterations, losses=losses)


def downsample(its: list[int], losses: list[float], n: int) -> tuple[list[int], list[float]]:
    """About ``n`` of the points ``(its, losses)``: the first, the last, and the
    lowest value of each bucket between them."""
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
