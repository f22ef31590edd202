"""Experiments: a sweep admitted as one, read back with its jobs, and
controlled as a whole (the same transition rules as single jobs)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import redis
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlmodel import Session, col

from backend.core.models import FINISHED, Experiment, Job, JobStatus, Tenant, User, as_utc
from backend.core.redis_keys import RedisKeys
from backend.scheduling.early_stopping import judged_at, rule_config
from backend.services import jobs as job_service
from backend.services.experiment_specs import ExperimentCreate, job_specs
from backend.services.specs import SpecError, SpecErrors

_METRIC_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class ExperimentJob(BaseModel):
    id: int
    name: str
    status: str
    params: dict[str, Any]
    iterations_done: int
    max_iterations: int
    current_loss: float | None
    best_loss: float | None
    last_eval: dict[str, float]
    objective_value: float | None = Field(description="The objective metric's latest value")
    end_reason: str | None
    stopped_early: bool
    why_running: str | None = Field(
        default=None, description="For a queued or running job its early-stopping rule "
        "judges: why the rule keeps it, in the rule's own numbers, as of its last judgement "
        "(e.g. \"predicted final val_loss 0.41 (at best 0.3), needs ≤ 0.35 to reach the top "
        "2\"); null before the rule first judged it, or without a rule")
    saved_slot_seconds: float | None = Field(
        default=None, description="For a job stopped early: its iterations left times its "
        "measured seconds per iteration (training seconds over iterations done)")


SAVED_ESTIMATE = ("each stopped run's iterations left (max_iterations - iterations_done) × "
                  "its measured seconds per iteration (training seconds / iterations done)")


class Configuration(BaseModel):
    job_id: int
    params: dict[str, Any] = Field(description="The swept parameters' values")


class ExperimentPublic(BaseModel):
    id: int
    tenant_id: int
    name: str
    status: str = Field(description="running, queued or paused while any job is; then "
                        "completed, cancelled or failed")
    created_at: datetime
    algorithm: str
    dataset: str
    job_ids: list[int]
    configurations: list[Configuration]
    jobs: list[ExperimentJob]
    counts: dict[str, int] = Field(description="Jobs by status")
    stopped_early: int = Field(description="Jobs its early-stopping rule stopped")
    saved_slot_seconds: float = Field(description="Slot-seconds the stopped jobs did not use, "
                                      "estimated as " + SAVED_ESTIMATE)
    saved_estimate: str = Field(description="How saved_slot_seconds is estimated, in words")
    rungs: list[int] = Field(description="The iterations at which the early-stopping rule "
                             "is sure to judge a job (its grants end there), for the jobs' "
                             "max_iterations; empty without a rule")
    best_job_id: int | None
    best_value: float | None
    objective: dict[str, Any]
    space: dict[str, Any]
    sampler: dict[str, Any]
    tags: list[str] = Field(default_factory=list, description="Labels the owner gave it")
    note: str = Field("", description="The owner's free-text note on the experiment")
    early_stopping: dict[str, Any]
    spec: dict[str, Any]


class ExperimentSummary(BaseModel):
    id: int
    name: str
    status: str
    created_at: datetime
    algorithm: str
    dataset: str
    counts: dict[str, int]
    jobs: int
    objective: dict[str, Any]


class ExperimentControlResult(ExperimentPublic):
    action: str
    changed: list[int] = Field(description="The jobs whose status this action changed")


def create_experiment(*, session: Session, body: ExperimentCreate, user: User,
                      tenant: Tenant) -> tuple[Experiment, list[Job]]:
    """Sample the configurations and admit them all, or none (SpecErrors or
    QuotaExceeded, with nothing created)."""
    metric = body.objective.metric
    if not _METRIC_NAME.match(metric):
        raise SpecErrors([SpecError(["objective", "metric"], f"{metric!r} is not a metric name; "
                                    "use 'loss', or an evaluation metric such as 'val_loss' "
                                    "or 'val_accuracy'")])
    if metric.startswith("val_") and body.eval_every == 0:
        raise SpecErrors([SpecError(["objective", "metric"], f"objective {metric} needs "
                                    "evaluations, but eval_every is 0: set eval_every > 0")])
    specs = job_specs(body)
    stored = body.model_dump(mode="json")
    stored["objective"] = {"metric": metric, "mode": body.objective.direction}
    experiment = Experiment(tenant_id=tenant.id or 0, user_id=user.id or 0,
                            name=body.name or f"{body.algorithm} sweep", spec=stored)
    jobs = job_service.admit_jobs(session=session, jobs_in=[s for _, s in specs], user=user,
                                  tenant=tenant, experiment=experiment)
    session.refresh(experiment)
    return experiment, jobs


def experiment_jobs(session: Session, experiment_id: int) -> list[Job]:
    return list(session.execute(select(Job).where(col(Job.experiment_id) == experiment_id)
                                .order_by(col(Job.id))).scalars().all())


def objective_value(job: Job, metric: str) -> float | None:
    if metric == "loss":
        return job.current_loss
    return job_service.last_eval_metrics(job).get(metric)


def _status(counts: dict[str, int]) -> str:
    for status in (JobStatus.running, JobStatus.queued, JobStatus.paused, JobStatus.completed,
                   JobStatus.cancelled, JobStatus.failed):
        if counts.get(status):
            return str(status)
    return str(JobStatus.queued)


def _counts(jobs: list[Job]) -> dict[str, int]:
    counts = {str(s): 0 for s in JobStatus}
    for job in jobs:
        counts[job.status] = counts.get(job.status, 0) + 1
    return counts


def rule_verdicts(client: redis.Redis, keys: RedisKeys, experiment_id: int) -> dict[int, str]:
    """Why the experiment's rule keeps each job running, as the scheduler last
    published it; empty when Redis has none (not judged yet, or wiped)."""
    try:
        raw = client.hgetall(keys.experiment_verdicts(experiment_id))
    except redis.RedisError:
        return {}
    out = {}
    for key, value in raw.items():
        text = key.decode() if isinstance(key, bytes) else str(key)
        if text.isdigit():
            out[int(text)] = value.decode() if isinstance(value, bytes) else str(value)
    return out


def saved_slot_seconds(job: Job) -> float | None:
    """A stopped job's iterations left times its measured seconds per iteration."""
    if not job.stopped_early or job.iterations_done <= 0:
        return None
    left = max(job.max_iterations - job.iterations_done, 0)
    return left * job.attained_seconds / job.iterations_done


def to_public(experiment: Experiment, jobs: list[Job],
              verdicts: Mapping[int, str] | None = None,
              tags: list[str] | None = None) -> ExperimentPublic:
    """The experiment as the API shows it; ``verdicts`` (from :func:`rule_verdicts`)
    say why its rule keeps each queued or running job."""
    spec = experiment.spec or {}
    objective = spec.get("objective") or {"metric": "loss", "mode": "min"}
    metric = str(objective.get("metric", "loss"))
    maximise = objective.get("mode") == "max"
    space = spec.get("space") or {}
    verdicts = verdicts or {}
    rows = [ExperimentJob(
        id=job.id or 0, name=job.name, status=job.status, params=job.params,
        iterations_done=job.iterations_done, max_iterations=job.max_iterations,
        current_loss=job.current_loss, best_loss=job.best_loss,
        last_eval=job_service.last_eval_metrics(job),
        objective_value=objective_value(job, metric), end_reason=job.end_reason,
        stopped_early=job.stopped_early,
        why_running=(verdicts.get(job.id or 0) if job.status in (JobStatus.queued,
                                                                  JobStatus.running)
                     and not job.stopped_early else None),
        saved_slot_seconds=saved_slot_seconds(job)) for job in jobs]
    scored = [r for r in rows if r.objective_value is not None]
    best = (max if maximise else min)(scored, key=lambda r: r.objective_value or 0.0,
                                      default=None)
    counts = _counts(jobs)
    config = rule_config(spec)
    budget = max((job.max_iterations for job in jobs), default=0)
    return ExperimentPublic(
        id=experiment.id or 0, tenant_id=experiment.tenant_id, name=experiment.name,
        status=_status(counts), created_at=as_utc(experiment.created_at),
        algorithm=str(spec.get("algorithm", "")), dataset=str(spec.get("dataset", "")),
        job_ids=[r.id for r in rows],
        configurations=[Configuration(job_id=r.id, params={k: r.params.get(k) for k in space})
                        for r in rows],
        jobs=rows, counts=counts, stopped_early=sum(1 for r in rows if r.stopped_early),
        saved_slot_seconds=round(sum(r.saved_slot_seconds or 0.0 for r in rows), 3),
        saved_estimate=SAVED_ESTIMATE,
        rungs=[] if config is None else judged_at(config, budget),
        best_job_id=best.id if best else None,
        best_value=best.objective_value if best else None,
        objective=objective, space=space, sampler=spec.get("sampler") or {},
        early_stopping=spec.get("early_stopping") or {"rule": "none"}, spec=spec,
        tags=tags or [], note=experiment.note)


def to_summary(experiment: Experiment, jobs: list[Job]) -> ExperimentSummary:
    spec = experiment.spec or {}
    counts = _counts(jobs)
    return ExperimentSummary(id=experiment.id or 0, name=experiment.name, status=_status(counts),
                             created_at=as_utc(experiment.created_at),
                             algorithm=str(spec.get("algorithm", "")),
                             dataset=str(spec.get("dataset", "")), counts=counts,
                             jobs=len(jobs), objective=spec.get("objective") or {})


def control(*, session: Session, experiment: Experiment, action: str,
            include_stopped: bool = False) -> dict[int, int]:
    """Apply ``action`` to every job of the experiment its status allows;
    job id -> tenant id of those that changed. A whole-experiment resume
    leaves the jobs its rule stopped early paused unless ``include_stopped``."""
    candidates = select(col(Job.id), col(Job.tenant_id)).where(
        col(Job.experiment_id) == experiment.id)
    if action == "resume" and not include_stopped:
        candidates = candidates.where(col(Job.stopped_early).is_(False))
    return job_service.bulk_change_state(session=session, action=action, candidates=candidates)


def nothing_to_do(action: str, experiment: Experiment, jobs: list[Job]) -> str:
    """Why ``action`` changed no job, in words."""
    if all(j.status in FINISHED for j in jobs):
        return f"cannot {action} experiment {experiment.id}: all its jobs have finished"
    if action == "resume":
        return (f"nothing to resume in experiment {experiment.id}: no job is paused (jobs "
                "stopped early resume with include_stopped=true, or one by one)")
    return f"nothing to {action} in experiment {experiment.id}: no job is in a state it applies to"
