"""Continuing finished runs: a job trains on from its last checkpoint under a
changed stopping rule; an experiment gains configurations. Both are audited
like deletions, and admitted against the quotas like submissions."""

from __future__ import annotations

from fastapi import APIRouter, status
from pydantic import Field

from backend.api.deps import CurrentTenant, DbId, KeysDep, RedisDep, SessionDep
from backend.api.jobs_bulk import _announce
from backend.core.models import Experiment, Job
from backend.core.notify import publish_job_event, wake_scheduler
from backend.schemas import JobPublic
from backend.services import audit, continuing
from backend.services import experiments as experiment_service
from backend.services import jobs as job_service
from backend.services.labels import experiment_tags, job_tags

router = APIRouter(prefix="/api/v1", tags=["continuing"])


class ExperimentExtended(experiment_service.ExperimentPublic):
    added: list[int] = Field(description="The jobs this extension created")


@router.post("/jobs/{job_id}/continue", response_model=JobPublic)
def continue_job(job_id: DbId, change: continuing.ContinueRequest, session: SessionDep,
                 scope: CurrentTenant, client: RedisDep, keys: KeysDep) -> JobPublic:
    """Continue a finished job from its last checkpoint under a changed
    stopping rule (409 unless completed or cancelled; 422 for a rule it
    could not train on under)."""
    job = scope.get_owned(session, Job, job_id)
    # Its refusals (409, 422) are service errors: backend.api.errors answers them.
    before = continuing.continue_job(session=session, job=job, change=change)
    audit.record(session, actor=scope.user, action="job.continue", target=f"job {job_id}",
                 tenant_id=job.tenant_id, name=job.name, before=before,
                 after={"max_iterations": job.max_iterations, "target_loss": job.target_loss,
                        "tolerance": job.tolerance})
    session.commit()
    session.refresh(job)
    wake_scheduler(client, keys, f"continue {job_id}")
    publish_job_event(client, keys, job_id=job.id, tenant_id=job.tenant_id, status=job.status)
    return job_service.to_public(job, tags=job_tags(session, [job_id]).get(job_id, []))


@router.post("/experiments/{experiment_id}/configurations", status_code=status.HTTP_201_CREATED,
             response_model=ExperimentExtended)
def extend_experiment(experiment_id: DbId, body: continuing.ExtendRequest, session: SessionDep,
                      scope: CurrentTenant, client: RedisDep,
                      keys: KeysDep) -> ExperimentExtended:
    """Add configurations to an experiment: axes added to or widened in its
    search space, or configurations named one by one; each one it does not
    hold yet becomes a queued job (all admitted, or none)."""
    experiment = scope.get_owned(session, Experiment, experiment_id)
    tenant_id, name = experiment.tenant_id, experiment.name
    jobs = continuing.extend_experiment(session=session, experiment=experiment, body=body,
                                        user=scope.user)
    added = [j.id or 0 for j in jobs]
    audit.record(session, actor=scope.user, action="experiment.extend",
                 target=f"experiment {experiment_id}", tenant_id=tenant_id, name=name,
                 jobs=added, space=sorted(body.space), configurations=len(body.configurations))
    session.commit()
    _announce(client, keys, "submit", dict.fromkeys(added, tenant_id))
    wake_scheduler(client, keys, f"experiment {experiment_id} extended")
    public = experiment_service.to_public(
        experiment, experiment_service.experiment_jobs(session, experiment_id),
        experiment_service.rule_verdicts(client, keys, experiment_id),
        tags=experiment_tags(session, experiment_id))
    return ExperimentExtended(**public.model_dump(), added=added)
