"""Per-tenant quotas: current usage, and the atomic check at submit time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlmodel import Session, col

from backend.core.models import Job, JobStatus, Tenant
from backend.services.errors import Conflict

QUOTA_FIELDS = ("max_slots", "max_active_jobs", "max_queued_jobs", "max_iterations_per_job",
                "share_weight")
ACTIVE = (JobStatus.queued, JobStatus.running, JobStatus.paused)


@dataclass(frozen=True)
class Usage:
    running_slots: int
    active_jobs: int
    queued_jobs: int


class QuotaExceeded(Conflict):
    """A tenant quota the request would break: which, its limit and the usage."""

    def __init__(self, quota: str, limit: int, usage: int, message: str) -> None:
        super().__init__(message)
        self.quota = quota
        self.limit = limit
        self.usage = usage

    def detail(self) -> Any:
        return {"quota": self.quota, "limit": self.limit, "usage": self.usage,
                "message": self.message}


def usage_by_tenant(session: Session) -> dict[int, Usage]:
    rows = session.execute(
        select(col(Job.tenant_id), col(Job.status), func.count())
        .where(col(Job.status).in_(ACTIVE))
        .group_by(col(Job.tenant_id), col(Job.status))
    ).all()
    counts: dict[int, dict[str, int]] = {}
    for tenant_id, status, n in rows:
        counts.setdefault(int(tenant_id), {})[str(status)] = int(n)
    return {
        tid: Usage(running_slots=c.get(JobStatus.running, 0),
                   active_jobs=sum(c.values()),
                   queued_jobs=c.get(JobStatus.queued, 0))
        for tid, c in counts.items()
    }


def tenant_usage(*, session: Session, tenant_id: int) -> Usage:
    return usage_by_tenant(session).get(tenant_id, Usage(0, 0, 0))


def lock_tenant(*, session: Session, tenant_id: int) -> None:
    """Serialise submissions of one tenant until the transaction ends.

    A no-op UPDATE takes PostgreSQL's row lock and SQLite's write lock, so a
    concurrent submission waits here and then counts our committed job.
    """
    session.execute(update(Tenant).where(Tenant.id == tenant_id)  # type: ignore[arg-type]
                    .values(max_slots=Tenant.max_slots))


def check_submission(*, session: Session, tenant: Tenant, count: int = 1) -> None:
    """Raise QuotaExceeded if ``count`` more queued jobs would break a quota.
    Call after :func:`lock_tenant`, in the same transaction as the insert."""
    # The caller's tenant may be a remembered copy (backend.api.callers): the
    # quotas are read from the row this transaction has locked.
    tenant = session.get(Tenant, tenant.id, populate_existing=True) or tenant
    usage = tenant_usage(session=session, tenant_id=tenant.id or 0)
    if count > 1:
        _check_many(tenant, usage, count)
    if usage.active_jobs >= tenant.max_active_jobs:
        raise QuotaExceeded("max_active_jobs", tenant.max_active_jobs, usage.active_jobs,
                            f"quota max_active_jobs reached: tenant {tenant.name} has "
                            f"{usage.active_jobs} of {tenant.max_active_jobs} active jobs; "
                            "wait for one to finish or cancel one")
    if usage.queued_jobs >= tenant.max_queued_jobs:
        raise QuotaExceeded("max_queued_jobs", tenant.max_queued_jobs, usage.queued_jobs,
                            f"quota max_queued_jobs reached: tenant {tenant.name} has "
                            f"{usage.queued_jobs} of {tenant.max_queued_jobs} jobs waiting")


def _check_many(tenant: Tenant, usage: Usage, count: int) -> None:
    # A sweep is admitted whole or not at all: say how many of its jobs fit.
    for quota, limit, used in (("max_active_jobs", tenant.max_active_jobs, usage.active_jobs),
                               ("max_queued_jobs", tenant.max_queued_jobs, usage.queued_jobs)):
        if used + count > limit:
            raise QuotaExceeded(quota, limit, used,
                                f"quota {quota} would be exceeded: this submission adds "
                                f"{count} jobs, tenant {tenant.name} has {used} of {limit}, "
                                f"so only {max(limit - used, 0)} more fit; nothing was created")
