"""Labels on runs: rename, tag and annotate a job or an experiment, and
delete a finished one with its data. Deletions are audited like admin actions."""

from __future__ import annotations

import redis
from fastapi import APIRouter, Response, status

from backend.api.deps import CurrentTenant, DbId, KeysDep, RedisDep, SessionDep
from backend.core.models import Experiment, Job
from backend.core.notify import publish_job_event
from backend.core.settings import get_settings
from backend.schemas import JobPublic
from backend.services import audit, labels
from backend.services import experiments as experiment_service
from backend.services import jobs as job_service

router = APIRouter(prefix="/api/v1", tags=["labels"])


def _forget(client: RedisDep, keys: KeysDep, job_ids: list[int]) -> None:
    """Drop the deleted jobs' live loss streams and fits from Redis; the rows
    are already gone, so a Redis outage here costs only keys that expire."""
    names = [k for j in job_ids for k in (keys.job_stream(j), keys.fit(j))]
    try:
        if names:
            client.delete(*names)
    except redis.RedisError:
        pass


@router.patch("/jobs/{job_id}", response_model=JobPublic)
def label_job(job_id: DbId, change: labels.LabelsUpdate, session: SessionDep,
              scope: CurrentTenant, client: RedisDep, keys: KeysDep) -> JobPublic:
    """Rename the job, replace its tags or its note (fields left out stay)."""
    job = scope.get_owned(session, Job, job_id)
    labels.label_job(session=session, job=job, change=change)
    # Open pages of the job and the jobs list refresh their row.
    publish_job_event(client, keys, job_id=job.id, tenant_id=job.tenant_id, status=job.status)
    return job_service.to_public(job, tags=labels.job_tags(session, [job_id]).get(job_id, []))


@router.delete("/jobs/{job_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_job(job_id: DbId, session: SessionDep, scope: CurrentTenant, client: RedisDep,
               keys: KeysDep) -> Response:
    """Delete a finished job with its losses, metrics, decisions and model
    (409 while it is queued, running or paused: cancel it first)."""
    job = scope.get_owned(session, Job, job_id)
    labels.delete_job(session=session, job=job)
    audit.record(session, actor=scope.user, action="job.delete", target=f"job {job_id}",
                 tenant_id=job.tenant_id, name=job.name, status=job.status,
                 iterations=job.iterations_done)
    session.commit()
    labels.delete_jobs_files(get_settings().effective_checkpoint_dir, [job_id])
    _forget(client, keys, [job_id])
    publish_job_event(client, keys, job_id=job_id, tenant_id=job.tenant_id, status="deleted")
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.patch("/experiments/{experiment_id}", response_model=experiment_service.ExperimentPublic)
def label_experiment(experiment_id: DbId, change: labels.LabelsUpdate, session: SessionDep,
                     scope: CurrentTenant) -> experiment_service.ExperimentPublic:
    """Rename the experiment, replace its tags or its note (fields left out stay)."""
    experiment = scope.get_owned(session, Experiment, experiment_id)
    labels.label_experiment(session=session, experiment=experiment, change=change)
    return experiment_service.to_public(
        experiment, experiment_service.experiment_jobs(session, experiment_id),
        tags=labels.experiment_tags(session, experiment_id))


@router.delete("/experiments/{experiment_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_experiment(experiment_id: DbId, session: SessionDep, scope: CurrentTenant,
                      client: RedisDep, keys: KeysDep) -> Response:
    """Delete a finished experiment with all its jobs and their data (409
    while any of its jobs is queued, running or paused)."""
    experiment = scope.get_owned(session, Experiment, experiment_id)
    tenant_id, name = experiment.tenant_id, experiment.name
    job_ids = labels.delete_experiment(session=session, experiment=experiment)
    audit.record(session, actor=scope.user, action="experiment.delete",
                 target=f"experiment {experiment_id}", tenant_id=tenant_id, name=name,
                 jobs=job_ids)
    session.commit()
    labels.delete_jobs_files(get_settings().effective_checkpoint_dir, job_ids)
    _forget(client, keys, job_ids)
    for job_id in job_ids:
        publish_job_event(client, keys, job_id=job_id, tenant_id=tenant_id, status="deleted")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
