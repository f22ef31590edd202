"""Worker pools as the API sees them: the pools recorded by the scheduler,
what a job requires of them, and the platform admin's reservations."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from backend.core.models import Job, Tenant, WorkerPool
from backend.core.pools import DEFAULT_POOL
from backend.scheduling.placement import refusal, requirements_from
from backend.scheduling.types import PoolView
from backend.schemas import JobCreate, JobRequirements


def known_pools(session: Session) -> list[PoolView]:
    """Every recorded pool, and the default pool even before any worker joined
    it: what a submission is checked against."""
    views = {row.name: pool_view(row) for row in session.execute(select(WorkerPool)).scalars()}
    views.setdefault(DEFAULT_POOL, PoolView(name=DEFAULT_POOL))
    return [views[name] for name in sorted(views)]


def pool_view(row: WorkerPool) -> PoolView:
    return PoolView(name=row.name, gpu=row.gpu, gpu_memory_mb=row.gpu_memory_mb,
                    memory_mb=row.memory_mb, cores=row.cores,
                    reserved_for=frozenset(int(t) for t in row.reserved_for or ()))


def stored_requirements(job_in: JobCreate, *, uses_gpu: bool) -> dict[str, Any]:
    """The requirements kept with a job: the user's, and the soft GPU
    preference of a GPU-capable trainer unless the user said ``gpu: false``."""
    asked = job_in.requirements
    return {"gpu": asked.gpu, "min_memory_mb": asked.min_memory_mb, "pool": asked.pool,
            "prefer_gpu": asked.gpu is None and uses_gpu}


def placement_refusal(pools: list[PoolView], requirements: dict[str, Any],
                      tenant: Tenant) -> str | None:
    """Why no pool the tenant may use can ever run a job with these requirements."""
    return refusal(pools, requirements_from(requirements), tenant.id or 0)


def public_requirements(job: Job) -> JobRequirements:
    stored = job.requirements or {}
    return JobRequirements(gpu=stored.get("gpu"), min_memory_mb=int(stored.get("min_memory_mb")
                                                                    or 0),
                           pool=stored.get("pool"))
