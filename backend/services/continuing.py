"""Continuing finished runs: a job trains on past the end it reached, and an
experiment gains configurations.

A continued job keeps its id, its loss history and its checkpoint. Its
stopping rule changes (a larger ``max_iterations``, a new target, another
tolerance) and it is queued again, admitted like a new submission: the spec
is checked against the catalogues as they are now and the tenant's quotas
count it (a continued job is queued, so it is active). Its next chunk
restores the checkpoint the job ended with and steps on from there; training
is deterministic from a checkpoint, so the points after it are those the
job would have made had its rule allowed more from the start, and the
points before it are never written again (they are unique per iteration).

An experiment is extended with more of its search space (axes added or
widened, sampled by its sampler) or with configurations named one by one;
each configuration it does not hold yet becomes a queued job of it,
admitted whole or refused whole like the experiment itself.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session

from backend.core.models import Experiment, Job, JobStatus, Tenant, User, utcnow
from backend.core.settings import get_settings
from backend.services import jobs as job_service
from backend.services.errors import Conflict
from backend.services.experiment_specs import (
    MAX_CONFIGURATIONS,
    Axis,
    ExperimentCreate,
    Sampler,
    configurations,
    job_spec,
)
from backend.services.experiments import experiment_jobs
from backend.services.quotas import QuotaExceeded, check_submission, lock_tenant
from backend.services.specs import SpecError, SpecErrors, validate_job_spec

CONTINUABLE = (JobStatus.completed, JobStatus.cancelled)
"""Statuses a job may be continued from. A failed job is not: its checkpoint
is the last good state before what broke it, and training is deterministic,
so it would break again the same way."""


class NotContinuable(Conflict):
    """The job is not finished, or finished in a way it cannot go on from."""


class ContinueRequest(BaseModel):
    """How a finished job goes on; a field left out stays as it was."""

    model_config = ConfigDict(extra="forbid")

    max_iterations: int | None = Field(
        None, ge=1, description="The new iteration limit: more than the iterations it has "
        "done. Left out: unchanged (enough for a job that was cancelled before its limit)")
    target_loss: float | None = Field(
        None, allow_inf_nan=False,
        description="A new target for its quality metric; null removes the target")
    tolerance: float | None = Field(
        None, gt=0, lt=1, description="A new convergence tolerance; null turns the "
        "convergence test off")


def _stopping_after(job: Job, change: ContinueRequest) -> tuple[int, float | None, float | None]:
    given = change.model_fields_set
    most = change.max_iterations if "max_iterations" in given and \
        change.max_iterations is not None else job.max_iterations
    target = change.target_loss if "target_loss" in given else job.target_loss
    tolerance = change.tolerance if "tolerance" in given else job.tolerance
    return most, target, tolerance


def _quality_now(job: Job) -> float | None:
    if job.quality_metric == "loss":
        return job.current_loss
    return job_service.last_eval_metrics(job).get(job.quality_metric)


def _check_change(job: Job, change: ContinueRequest, tenant: Tenant) -> None:
    """SpecErrors (422) for a change under which the job could not train on."""
    most, target, tolerance = _stopping_after(job, change)
    given = change.model_fields_set
    errors: list[SpecError] = []
    if most <= job.iterations_done:
        where = "raise it" if "max_iterations" not in given else "ask for more"
        errors.append(SpecError(["max_iterations"], (
            f"max_iterations {most} is not more than the {job.iterations_done} iterations "
            f"job {job.id} has done: {where} (at least {job.iterations_done + 1})")))
    limit = min(get_settings().max_iterations_limit, tenant.max_iterations_per_job)
    if most > limit:
        errors.append(SpecError(["max_iterations"], (
            f"max_iterations {most} is over the limit of {limit} for tenant {tenant.name}")))
    now = _quality_now(job)
    if target is not None and now is not None and now <= target:
        errors.append(SpecError(["target_loss"], (
            f"job {job.id} has already reached target {job.quality_metric} {target:g} "
            f"(it is at {now:.6g}): it would stop again at once; lower the target or "
            "remove it (null)")))
    ended = job.end_reason or ""
    if ended.startswith("converged") and tolerance is not None and \
            job.tolerance is not None and tolerance >= job.tolerance:
        errors.append(SpecError(["tolerance"], (
            f"job {job.id} converged under tolerance {job.tolerance:g}: with tolerance "
            f"{tolerance:g} it would stop again at once; give a smaller tolerance or turn "
            "the test off (null)")))
    if errors:
        raise SpecErrors(errors)


def continue_job(*, session: Session, job: Job, change: ContinueRequest) -> dict[str, Any]:
    """Queue the finished ``job`` again under its changed stopping rule, with
    the quota check of a submission; the caller commits (with its audit
    entry). Returns the stopping rule before
    the change, for the audit log. Raises :class:`NotContinuable` (409),
    SpecErrors (422) or QuotaExceeded (409)."""
    if job.status not in CONTINUABLE:
        if job.status == JobStatus.failed:
            raise NotContinuable(
                f"job {job.id} failed ({job.end_reason or 'no reason recorded'}): from its "
                "last good checkpoint it would fail the same way; clone it with other "
                "parameters instead")
        raise NotContinuable(f"job {job.id} is {job.status}: only a finished job (completed "
                             "or cancelled) can be continued")
    tenant = session.get(Tenant, job.tenant_id)
    assert tenant is not None  # the foreign key
    _check_change(job, change, tenant)
    # The algorithm and dataset as they are now: an upload deleted, or tenant
    # code switched off since, refuses here rather than failing on a worker.
    validate_job_spec(algorithm=job.algorithm, dataset=job.dataset, params=job.params,
                      dataset_params=job.dataset_params, tenant_id=job.tenant_id,
                      session=session)
    before = {"max_iterations": job.max_iterations, "target_loss": job.target_loss,
              "tolerance": job.tolerance, "status": str(job.status),
              "iterations_done": job.iterations_done}
    most, target, tolerance = _stopping_after(job, change)
    lock_tenant(session=session, tenant_id=job.tenant_id)
    try:
        check_submission(session=session, tenant=tenant)
    except QuotaExceeded:
        session.rollback()
        raise
    session.refresh(job)
    if job.status not in CONTINUABLE:  # changed while we checked
        session.rollback()
        raise NotContinuable(f"job {job.id} is {job.status} now: try again")
    job.max_iterations, job.target_loss, job.tolerance = most, target, tolerance
    job.status = JobStatus.queued
    job.waiting_since = utcnow()
    job.finished_at = None
    job.end_reason = None
    job.error = None
    session.add(job)
    return before


# ---- experiments ----


class ExtendRequest(BaseModel):
    """More configurations for an experiment."""

    model_config = ConfigDict(extra="forbid")

    space: dict[str, Axis] = Field(
        default_factory=dict, description="Axes to add to the search space, or to replace "
        "the axis of the same name (a wider range, more values); the experiment's sampler "
        "(or ``sampler``) samples the whole space again and every configuration not in the "
        "experiment yet becomes a job. A parameter fixed so far becomes swept")
    sampler: Sampler | None = Field(None, description="Left out: the experiment's sampler")
    configurations: list[dict[str, Any]] = Field(
        default_factory=list, max_length=MAX_CONFIGURATIONS,
        description="Configurations named one by one: a value for each swept parameter")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and \
            not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return bool(a == b)


def _held(values: dict[str, Any], existing: list[dict[str, Any]]) -> bool:
    return any(all(_same(values[k], params.get(k)) for k in values) for params in existing)


def extend_experiment(*, session: Session, experiment: Experiment, body: ExtendRequest,
                      user: User) -> list[Job]:
    """Admit the configurations ``body`` adds as queued jobs of ``experiment``
    (all or none) and store the widened space; commits. Raises SpecErrors
    (422) or QuotaExceeded (409)."""
    if not body.space and not body.configurations:
        raise SpecErrors([SpecError([], "nothing to add: give space (axes to add or widen) "
                                    "or configurations")])
    stored = dict(experiment.spec or {})
    fields = {k: v for k, v in stored.items()
              if k in ExperimentCreate.model_fields and k != "objective"}
    most = (stored.get("stopping") or {}).get("max_iterations")
    if isinstance(most, int) and isinstance(fields.get("eval_every"), int) and \
            fields["eval_every"] > most:
        # The default, which each job shortened to its length: let it again.
        del fields["eval_every"]
    spec = ExperimentCreate.model_validate(fields)
    space = {**spec.space, **body.space}
    params = {k: v for k, v in spec.params.items() if k not in body.space}
    widened = spec.model_copy(update={"space": space, "params": params,
                                      "sampler": body.sampler or spec.sampler})
    jobs = experiment_jobs(session, experiment.id or 0)
    existing = [dict(j.params) for j in jobs]
    wanted: list[dict[str, Any]] = configurations(widened) if body.space else []
    errors: list[SpecError] = []
    for index, values in enumerate(body.configurations):
        unknown = sorted(set(values) - set(space))
        missing = sorted(set(space) - set(values))
        if unknown or missing:
            errors.append(SpecError(["configurations", index], "; ".join(filter(None, [
                f"not swept by this experiment: {', '.join(unknown)}" if unknown else "",
                f"give a value for {', '.join(missing)}" if missing else "",
            ])) + f" (its swept parameters: {', '.join(sorted(space)) or 'none'})"))
            continue
        wanted.append({k: values[k] for k in space})
    if errors:
        raise SpecErrors(errors)
    new: list[dict[str, Any]] = []
    for values in wanted:
        if not _held(values, existing + new):
            new.append(values)
    if not new:
        raise SpecErrors([SpecError([], f"nothing to add: every configuration asked for is in "
                                    f"experiment {experiment.id} already")])
    if len(jobs) + len(new) > MAX_CONFIGURATIONS:
        raise SpecErrors([SpecError(["configurations"], (
            f"experiment {experiment.id} has {len(jobs)} configurations; {len(new)} more "
            f"would make {len(jobs) + len(new)}, over the most of {MAX_CONFIGURATIONS}"))])
    specs = [job_spec(widened, len(jobs) + i, values) for i, values in enumerate(new, start=1)]
    tenant = session.get(Tenant, experiment.tenant_id)
    assert tenant is not None
    stored["space"] = {k: v.model_dump(mode="json") for k, v in space.items()}
    stored["params"] = params
    stored["sampler"] = widened.sampler.model_dump(mode="json")
    experiment.spec = stored  # a new dict: the JSON column sees the change
    return job_service.admit_jobs(session=session, jobs_in=specs, user=user, tenant=tenant,
                                  experiment=experiment)
