"""The cluster at a glance: slots, who runs, who waits, the policy in force."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from sqlalchemy import select

from backend.api.deps import CurrentTenant, KeysDep, RedisDep, SessionDep
from backend.core.leases import Heartbeats
from backend.core.models import Job, JobStatus, Tenant
from backend.core.portal_settings import active_policy_name
from backend.core.settings import get_settings

router = APIRouter(prefix="/api/v1", tags=["cluster"])

OTHER = "other tenant"


@router.get("/cluster")
def cluster(session: SessionDep, scope: CurrentTenant, client: RedisDep,
            keys: KeysDep) -> dict[str, Any]:
    """Slots, running and queued jobs (other tenants' jobs anonymised), policy,
    and the mean loss of active jobs relative to their first loss."""
    workers = Heartbeats(client, keys).alive()
    names = {t.id: t.name for t in session.execute(select(Tenant)).scalars()}
    jobs = session.execute(
        select(Job).where(Job.status.in_([JobStatus.running, JobStatus.queued]))  # type: ignore[attr-defined]
        .order_by(Job.waiting_since)  # type: ignore[arg-type]
    ).scalars().all()

    def view(job: Job) -> dict[str, Any]:
        if scope.allows(job.tenant_id):
            return {"job_id": job.id, "name": job.name, "tenant_id": job.tenant_id,
                    "tenant_name": names.get(job.tenant_id), "status": job.status}
        return {"job_id": None, "name": OTHER, "tenant_id": None, "tenant_name": OTHER,
                "status": job.status}

    running = [view(j) for j in jobs if j.status == JobStatus.running]
    queued = []
    for position, job in enumerate((j for j in jobs if j.status == JobStatus.queued), start=1):
        entry = view(job)
        entry["position"] = position
        entry["reason"] = job.last_reason if scope.allows(job.tenant_id) else None
        queued.append(entry)
    ratios = [
        (j.current_loss / j.initial_loss)
        if j.current_loss is not None and j.initial_loss not in (None, 0) else 1.0
        for j in jobs if scope.allows(j.tenant_id)
    ]
    raw = client.hgetall(keys.scheduler_status)
    return {
        "policy": active_policy_name(session, get_settings().policy),
        "total_slots": len(workers),
        "busy_slots": len(running),
        "workers": sorted(workers),
        "running": running,
        "queued": queued,
        "avg_norm_loss": sum(ratios) / len(ratios) if ratios else None,
        "scheduler": {k: json.loads(v) for k, v in raw.items()},
    }
