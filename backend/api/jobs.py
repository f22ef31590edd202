"""Jobs: submit, list, inspect, control, and read loss history."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, Response, status
from fastapi.exceptions import RequestValidationError
from sqlalchemy import func, select
from sqlmodel import col

from backend.api.deps import (
    CurrentTenant,
    DbId,
    KeysDep,
    Offset,
    ReadSessionDep,
    RedisDep,
    SessionDep,
)
from backend.api.one_hop import json_in_one_hop
from backend.core.checkpoints import CheckpointStore
from backend.core.fits import fit_for_chart, read_fit
from backend.core.model_format import model_format
from backend.core.models import Decision, Job, JobStatus, MetricRecord
from backend.core.notify import publish_job_event, wake_scheduler
from backend.core.settings import get_settings
from backend.schemas import (
    DecisionPublic,
    JobCreate,
    JobPublic,
    LossHistory,
    Page,
    Prediction,
)
from backend.services import jobs as job_service
from backend.services.job_explanation import WaitingEntry, read_waiting
from backend.services.job_search import SORT_RULE, JobSearch, apply, order_by
from backend.services.labels import TAG, TAG_RULE, job_tags

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobPublic)
def submit_job(job_in: JobCreate, session: SessionDep, scope: CurrentTenant,
               client: RedisDep, keys: KeysDep) -> JobPublic:
    """Submit a training job; it is queued and the scheduler is woken."""
    # SpecErrors (422) and QuotaExceeded (409) become responses in backend.api.errors.
    job = job_service.create_job(session=session, job_in=job_in, user=scope.user,
                                 tenant=scope.tenant)
    wake_scheduler(client, keys, f"submit {job.id}")
    publish_job_event(client, keys, job_id=job.id, tenant_id=job.tenant_id, status=job.status)
    return job_service.to_public(job)


def _waiting_info(client: RedisDep, keys: KeysDep, jobs: list[Job]) -> dict[int, WaitingEntry]:
    """The scheduler's last word on each queued job (position, reason, gain)."""
    return read_waiting(client, keys, [j.id for j in jobs
                                       if j.status == JobStatus.queued and j.id is not None])


def _public(job: Job, info: dict[int, WaitingEntry],
            tags: dict[int, list[str]] | None = None) -> JobPublic:
    return job_service.to_public(job, info.get(job.id or 0), (tags or {}).get(job.id or 0, []))


def _bad_query(name: str, message: str, value: str) -> RequestValidationError:
    """A 422 shaped like FastAPI's own, for a query parameter checked here."""
    return RequestValidationError([{"loc": ("query", name), "msg": message,
                                    "type": "value_error", "input": value}])


JobStatusName = Literal["queued", "running", "paused", "completed", "failed", "cancelled"]


@router.get("", response_model=Page[JobPublic])
@json_in_one_hop
def list_jobs(
    session: ReadSessionDep,
    scope: CurrentTenant,
    client: RedisDep,
    keys: KeysDep,
    status_filter: Annotated[list[JobStatusName] | None, Query(
        alias="status", description="Only jobs in this status (repeat for any of several)")] = None,
    q: Annotated[str, Query(max_length=200, description="Part of the job's name or note, "
                            "any case")] = "",
    algorithm: Annotated[str | None, Query(max_length=100)] = None,
    dataset: Annotated[str | None, Query(max_length=100)] = None,
    experiment: Annotated[int | None, Query(ge=1, le=2**31 - 1,
                                            description="Only this experiment's jobs")] = None,
    tag: Annotated[list[str] | None, Query(
        description="Only jobs with this tag (repeat: with every one)")] = None,
    sort: Annotated[str, Query(max_length=80, description=SORT_RULE)] = "-id",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Offset = 0,
) -> Page[JobPublic]:
    """List your tenant's jobs, newest first, filtered and sorted as asked."""
    search = JobSearch(text=q, statuses=tuple(status_filter or ()), algorithm=algorithm,
                       dataset=dataset, experiment_id=experiment, tags=tuple(tag or ()),
                       sort=sort)
    ordering = order_by(search.sort)
    for one in search.tags:
        if not TAG.match(one):
            raise _bad_query("tag", f"tag {one[:60]!r} is not valid: {TAG_RULE}", one)
    query = apply(scope.filter(select(Job), col(Job.tenant_id)), search)
    count = apply(scope.filter(select(func.count()).select_from(Job), col(Job.tenant_id)),
                  search)
    total = session.execute(count).scalar_one()
    rows = list(session.execute(query.order_by(*ordering).limit(limit).offset(offset))
                .scalars().all())
    info = _waiting_info(client, keys, rows)
    tags = job_tags(session, [j.id or 0 for j in rows])
    return Page[JobPublic](items=[_public(j, info, tags) for j in rows], total=int(total),
                           limit=limit, offset=offset)


@router.get("/{job_id}", response_model=JobPublic)
@json_in_one_hop
def get_job(job_id: DbId, session: ReadSessionDep, scope: CurrentTenant, client: RedisDep,
            keys: KeysDep) -> JobPublic:
    """One job: status, progress, losses, timing; for a waiting job, its place in
    the queue and the scheduler's reason and predicted gain."""
    job = scope.get_owned(session, Job, job_id)
    return _public(job, _waiting_info(client, keys, [job]), job_tags(session, [job_id]))


@router.get("/{job_id}/losses", response_model=LossHistory)
@json_in_one_hop
def get_losses(job_id: DbId, session: ReadSessionDep, scope: CurrentTenant,
               max_points: Annotated[int, Query(ge=10, le=100_000)] = 2000) -> LossHistory:
    """Loss history, downsampled to at most ``max_points`` points."""
    job = scope.get_owned(session, Job, job_id)
    return job_service.loss_history(session=session, job_id=job.id or 0, max_points=max_points)


def _floor(session: SessionDep, job: Job) -> float | None:
    """0 when every value the job reported of its quality metric is >= 0 (a
    loss that cannot go below 0, as far as the job has shown), else None: a
    trainer may report a negative loss (a log-likelihood, say), and then its
    prediction must not be clamped."""
    if job.quality_metric == "loss":
        lowest = job.best_loss
    else:
        lowest = session.execute(
            select(func.min(col(MetricRecord.value)))
            .where(col(MetricRecord.job_id) == job.id, col(MetricRecord.split) == "eval",
                   col(MetricRecord.name) == job.quality_metric)).scalar_one_or_none()
    return 0.0 if lowest is not None and lowest >= 0 else None


@router.get("/{job_id}/prediction", response_model=Prediction)
def get_prediction(job_id: DbId, session: SessionDep, scope: CurrentTenant, client: RedisDep,
                   keys: KeysDep,
                   horizon: Annotated[int | None, Query(ge=1, le=1_000_000)] = None) -> Prediction:
    """The scheduler's current fit of the job's loss curve ahead, with its
    confidence band: the same belief its grants are decided on."""
    job = scope.get_owned(session, Job, job_id)
    fit = read_fit(client, keys, job.id or 0)
    if fit is None:
        # Not fitted yet (too little history), or the fit has lapsed.
        return Prediction(job_id=job.id or 0, from_iteration=job.iterations_done, points=[])
    prediction = Prediction.model_validate(
        fit_for_chart(fit, done=job.iterations_done, floor=_floor(session, job)))
    if horizon is not None:
        last = prediction.from_iteration + horizon
        prediction.points = [p for p in prediction.points if p.iteration <= last]
    return prediction


@router.get("/{job_id}/decisions", response_model=list[DecisionPublic])
def get_decisions(job_id: DbId, session: SessionDep, scope: CurrentTenant,
                  limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[DecisionPublic]:
    """The scheduler's recorded grants for this job, newest first."""
    job = scope.get_owned(session, Job, job_id)
    rows = session.execute(
        select(Decision).where(Decision.job_id == job.id)  # type: ignore[arg-type]
        .order_by(Decision.id.desc()).limit(limit)  # type: ignore[union-attr]
    ).scalars().all()
    return [DecisionPublic(chunk_seq=d.chunk_seq, iterations=d.iterations, policy=d.policy,
                           reason=d.reason, predicted_gain=d.predicted_gain,
                           created_at=d.created_at, pool=d.pool) for d in rows]


def _control(action: str, job_id: int, session: SessionDep, scope: CurrentTenant,
             client: RedisDep, keys: KeysDep) -> JobPublic:
    job = scope.get_owned(session, Job, job_id)
    job = job_service.change_state(session=session, job=job, action=action)
    wake_scheduler(client, keys, f"{action} {job_id}")
    publish_job_event(client, keys, job_id=job.id, tenant_id=job.tenant_id, status=job.status)
    return job_service.to_public(job, tags=job_tags(session, [job_id]).get(job_id, []))


@router.post("/{job_id}/pause", response_model=JobPublic)
def pause_job(job_id: DbId, session: SessionDep, scope: CurrentTenant, client: RedisDep,
              keys: KeysDep) -> JobPublic:
    """Pause: the job keeps its checkpoint and stops getting slots."""
    return _control("pause", job_id, session, scope, client, keys)


@router.post("/{job_id}/resume", response_model=JobPublic)
def resume_job(job_id: DbId, session: SessionDep, scope: CurrentTenant, client: RedisDep,
               keys: KeysDep) -> JobPublic:
    """Resume a paused job from its last checkpoint."""
    return _control("resume", job_id, session, scope, client, keys)


@router.post("/{job_id}/cancel", response_model=JobPublic)
def cancel_job(job_id: DbId, session: SessionDep, scope: CurrentTenant, client: RedisDep,
               keys: KeysDep) -> JobPublic:
    """Cancel: the job stops for good; its loss history is kept."""
    return _control("cancel", job_id, session, scope, client, keys)


@router.get("/{job_id}/checkpoint", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}},
                             "description": "The trained model in its trainer's format, "
                             "named by X-Model-Format: npz (numpy .npz archive, no pickle), "
                             "torch (torch.save file, .pt) or bytes (a plugin's or your own "
                             "trainer's state(), .bin); see /help/models"},
                       404: {"description": "No such job in your tenant, or no checkpoint yet"}})
def download_checkpoint(job_id: DbId, session: SessionDep, scope: CurrentTenant) -> Response:
    """Download the job's latest checkpoint (its model as trained so far; the
    final model once the job has finished)."""
    job = scope.get_owned(session, Job, job_id)
    if job.checkpoint_iteration <= 0:
        detail = (f"job {job_id} has no checkpoint yet: it has not finished a chunk"
                  if job.iterations_done <= 0 else
                  f"job {job_id} has no checkpoint yet: its trained state is still loaded on "
                  f"its worker slot; it is written when the job pauses, ends or leaves the "
                  f"slot, and while it trains every {get_settings().checkpoint_seconds:g} s "
                  f"(less often for a state slow to save)")
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail)
    store = CheckpointStore(get_settings().effective_checkpoint_dir)
    # Read at once: a running job's next chunk prunes this file once it has a newer one.
    data = store.load(job.id or 0, job.checkpoint_iteration)
    if data is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"the checkpoint file of job {job_id} (iteration "
                            f"{job.checkpoint_iteration}) is missing from the checkpoint store")
    kind = model_format(data)
    filename = f"job-{job_id}-iteration-{job.checkpoint_iteration}{kind.suffix}"
    return Response(data, media_type="application/octet-stream",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"',
                             "X-Model-Format": kind.key,
                             "Cache-Control": "no-store"})
