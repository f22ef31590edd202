"""Experiments: submit a sweep as one, read it with its jobs, and cancel,
pause or resume all its jobs at once."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy import func, select
from sqlmodel import col

from backend.api.deps import CurrentTenant, DbId, KeysDep, Offset, RedisDep, SessionDep
from backend.api.jobs_bulk import _announce
from backend.core.models import Experiment, Job
from backend.core.notify import wake_scheduler
from backend.schemas import Page
from backend.services import experiments as service
from backend.services.experiment_specs import ExperimentCreate
from backend.services.labels import experiment_tags

router = APIRouter(prefix="/api/v1/experiments", tags=["experiments"])


@router.post("", status_code=status.HTTP_201_CREATED,
             response_model=service.ExperimentPublic)
def submit_experiment(body: ExperimentCreate, session: SessionDep, scope: CurrentTenant,
                      client: RedisDep, keys: KeysDep) -> service.ExperimentPublic:
    """Submit a sweep: every configuration of the search space becomes a queued
    job, checked like a single job; the quotas count them together, so the
    sweep is admitted whole or refused whole (nothing created)."""
    # SpecErrors (422) and QuotaExceeded (409) become responses in backend.api.errors.
    experiment, jobs = service.create_experiment(session=session, body=body, user=scope.user,
                                                 tenant=scope.tenant)
    _announce(client, keys, "submit", {job.id or 0: job.tenant_id for job in jobs})
    wake_scheduler(client, keys, f"experiment {experiment.id}")
    return service.to_public(experiment, jobs)


@router.get("", response_model=Page[service.ExperimentSummary])
def list_experiments(session: SessionDep, scope: CurrentTenant,
                     limit: Annotated[int, Query(ge=1, le=200)] = 50,
                     offset: Offset = 0) -> Page[service.ExperimentSummary]:
    """Your tenant's experiments, newest first."""
    query = scope.filter(select(Experiment), col(Experiment.tenant_id))
    total = session.execute(scope.filter(select(func.count()).select_from(Experiment),
                                         col(Experiment.tenant_id))).scalar_one()
    rows = list(session.execute(query.order_by(col(Experiment.id).desc()).limit(limit)
                                .offset(offset)).scalars().all())
    by_experiment: dict[int, list[Job]] = {e.id or 0: [] for e in rows}
    if rows:
        for job in session.execute(select(Job).where(
                col(Job.experiment_id).in_(list(by_experiment)))).scalars().all():
            by_experiment[job.experiment_id or 0].append(job)
    return Page[service.ExperimentSummary](
        items=[service.to_summary(e, by_experiment[e.id or 0]) for e in rows],
        total=int(total), limit=limit, offset=offset)


@router.get("/{experiment_id}", response_model=service.ExperimentPublic)
def get_experiment(experiment_id: DbId, session: SessionDep, scope: CurrentTenant,
                   client: RedisDep, keys: KeysDep) -> service.ExperimentPublic:
    """The experiment with each job's parameters, progress, objective value and,
    for a job stopped early, why (for one still running, why the rule keeps it);
    how many jobs were stopped and the slot-seconds that saved; the best job so far."""
    experiment = scope.get_owned(session, Experiment, experiment_id)
    return service.to_public(experiment, service.experiment_jobs(session, experiment_id),
                             service.rule_verdicts(client, keys, experiment_id),
                             tags=experiment_tags(session, experiment_id))


def _control(action: str, experiment_id: int, session: SessionDep, scope: CurrentTenant,
             client: RedisDep, keys: KeysDep,
             include_stopped: bool = False) -> service.ExperimentControlResult:
    experiment = scope.get_owned(session, Experiment, experiment_id)
    changed = service.control(session=session, experiment=experiment, action=action,
                              include_stopped=include_stopped)
    jobs = service.experiment_jobs(session, experiment_id)
    if not changed:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            service.nothing_to_do(action, experiment, jobs))
    _announce(client, keys, action, changed)
    public = service.to_public(experiment, jobs,
                               service.rule_verdicts(client, keys, experiment_id))
    return service.ExperimentControlResult(**public.model_dump(), action=action,
                                           changed=sorted(changed))


@router.post("/{experiment_id}/cancel", response_model=service.ExperimentControlResult)
def cancel_experiment(experiment_id: DbId, session: SessionDep, scope: CurrentTenant,
                      client: RedisDep, keys: KeysDep) -> service.ExperimentControlResult:
    """Cancel every unfinished job of the experiment."""
    return _control("cancel", experiment_id, session, scope, client, keys)


@router.post("/{experiment_id}/pause", response_model=service.ExperimentControlResult)
def pause_experiment(experiment_id: DbId, session: SessionDep, scope: CurrentTenant,
                     client: RedisDep, keys: KeysDep) -> service.ExperimentControlResult:
    """Pause every queued or running job of the experiment (checkpoints kept)."""
    return _control("pause", experiment_id, session, scope, client, keys)


@router.post("/{experiment_id}/resume", response_model=service.ExperimentControlResult)
def resume_experiment(experiment_id: DbId, session: SessionDep, scope: CurrentTenant,
                      client: RedisDep, keys: KeysDep,
                      include_stopped: bool = False) -> service.ExperimentControlResult:
    """Resume every paused job of the experiment; jobs its rule stopped early
    stay paused unless ``include_stopped=true``."""
    return _control("resume", experiment_id, session, scope, client, keys, include_stopped)
