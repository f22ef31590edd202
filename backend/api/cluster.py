"""The cluster at a glance: slots, who runs, who waits, the policy in force.

Costs the same with ten or ten thousand queued jobs: counts and the mean loss
ratio are SQL aggregates, and only the head of the queue is listed.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, replace
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy import Float, case, cast, func, select, union_all
from sqlmodel import col

from backend.api.deps import CurrentTenant, KeysDep, RedisDep, SessionDep
from backend.core.cluster_history import KEEP_SECONDS, read_samples
from backend.core.leases import Heartbeats
from backend.core.models import Job, JobStatus, Tenant
from backend.core.pools import DEFAULT_POOL, SlotInfo
from backend.core.portal_settings import active_policy_name
from backend.core.settings import get_settings
from backend.services.job_explanation import explain_job, read_waiting

router = APIRouter(prefix="/api/v1", tags=["cluster"])

OTHER = "other tenant"
# Queued jobs listed by name; the rest are only counted.
QUEUE_HEAD = 20
# Running jobs are bounded by the worker slots; this only guards a huge cluster.
RUNNING_SHOWN = 500
_ACTIVE = (JobStatus.running, JobStatus.queued)


@router.get("/cluster")
def cluster(session: SessionDep, scope: CurrentTenant, client: RedisDep,
            keys: KeysDep) -> dict[str, Any]:
    """Slots, running jobs and the head of the queue (other tenants' jobs
    anonymised), counts per status and tenant, the policy, and the mean loss of
    the caller's active jobs relative to their first loss."""
    adverts = Heartbeats(client, keys).alive_info()
    workers = list(adverts)
    names = {t: n for t, n in session.execute(select(col(Tenant.id), col(Tenant.name))).all()}
    columns = (col(Job.id), col(Job.name), col(Job.tenant_id), col(Job.status),
               col(Job.last_reason), col(Job.waiting_since))

    def view(row: Any) -> dict[str, Any]:
        job_id, name, tenant_id, status, *_ = row
        if scope.allows(tenant_id):
            return {"job_id": job_id, "name": name, "tenant_id": tenant_id,
                    "tenant_name": names.get(tenant_id), "status": status}
        return {"job_id": None, "name": OTHER, "tenant_id": None, "tenant_name": OTHER,
                "status": status}

    # Both lists in one statement, so one snapshot: read in two, a job granted
    # (queued -> running) or back from its chunk between them was in neither.
    running_part = (select(*columns).where(col(Job.status) == JobStatus.running)
                    .order_by(col(Job.waiting_since)).limit(RUNNING_SHOWN).subquery())
    queued_part = (select(*columns).where(col(Job.status) == JobStatus.queued)
                   .order_by(col(Job.waiting_since), col(Job.id)).limit(QUEUE_HEAD).subquery())
    rows = session.execute(union_all(select(running_part), select(queued_part))).all()
    running_rows = sorted((r for r in rows if r[3] == JobStatus.running),
                          key=lambda r: (r[5], r[0]))
    queued_rows = sorted((r for r in rows if r[3] == JobStatus.queued),
                         key=lambda r: (r[5], r[0]))
    waiting = read_waiting(client, keys, [int(r[0]) for r in queued_rows
                                          if scope.allows(r[2])])
    queued = []
    for position, row in enumerate(queued_rows, start=1):
        entry = view(row)
        entry["position"] = position
        # The same plain words as the job's own page, less the scheduler's
        # position (this list is in arrival order); another tenant's stay hidden.
        facts = waiting.get(int(row[0]))
        entry["reason"] = explain_job(
            status=JobStatus.queued, end_reason=None, error=None, last_reason=row[4],
            waiting=None if facts is None else replace(facts, position=0),
        ).summary if scope.allows(row[2]) else None
        queued.append(entry)
    counts: dict[str, int] = {str(s): 0 for s in _ACTIVE}
    by_tenant: dict[str, dict[str, int]] = {}
    for tenant_id, status, n in session.execute(
            select(col(Job.tenant_id), col(Job.status), func.count())
            .where(col(Job.status).in_(_ACTIVE))
            .group_by(col(Job.tenant_id), col(Job.status))).all():
        counts[str(status)] = counts.get(str(status), 0) + int(n)
        label = str(names.get(tenant_id)) if scope.allows(tenant_id) else OTHER
        per = by_tenant.setdefault(label, {str(s): 0 for s in _ACTIVE})
        per[str(status)] = per.get(str(status), 0) + int(n)
    ratio = case(
        ((col(Job.current_loss).is_not(None)) & (col(Job.initial_loss).is_not(None))
         & (col(Job.initial_loss) != 0),
         cast(col(Job.current_loss), Float) / col(Job.initial_loss)),
        else_=1.0)
    avg_norm = session.execute(
        scope.filter(select(func.avg(ratio)).where(col(Job.status).in_(_ACTIVE)),
                     col(Job.tenant_id))).scalar()
    raw = client.hgetall(keys.scheduler_status)
    return {
        "policy": active_policy_name(session, get_settings().policy),
        "total_slots": len(workers),
        "busy_slots": counts[JobStatus.running],
        # What the page shows: running jobs beyond the live slots (a dead
        # worker's, until reclaimed) do not make free slots negative.
        "free_slots": len(workers) - min(counts[JobStatus.running], len(workers)),
        "workers": sorted(workers),
        "pools": _pools(adverts, session.execute(
            select(col(Job.pool), func.count()).where(col(Job.status) == JobStatus.running)
            .group_by(col(Job.pool))).tuples().all()),
        "running": [view(r) for r in running_rows],
        "queued": queued,
        "queued_total": counts[JobStatus.queued],
        "running_total": counts[JobStatus.running],
        "by_tenant": by_tenant,
        "avg_norm_loss": None if avg_norm is None else float(avg_norm),
        "scheduler": {k: json.loads(v) for k, v in raw.items()},
    }


def _pools(adverts: dict[str, SlotInfo], running: Any) -> list[dict[str, Any]]:
    """Live slots per pool with the GPU they offer, and chunks running there."""
    busy = {str(pool or DEFAULT_POOL): int(n) for pool, n in running}
    slots = Counter(info.pool for info in adverts.values())
    gpus = {info.pool: info.gpu for info in adverts.values() if info.gpu}
    return [{"name": name, "slots": slots[name], "busy": min(busy.get(name, 0), slots[name]),
             "gpu": gpus.get(name)} for name in sorted(set(slots) | set(busy))]


@router.get("/cluster/history")
def cluster_history(
    _scope: CurrentTenant, client: RedisDep, keys: KeysDep,
    minutes: Annotated[float, Query(gt=0, le=KEEP_SECONDS / 60,
                                    description="How far back to read")] = 60,
    since: Annotated[float | None, Query(ge=0, description="Only samples after this Unix "
                                         "time (seconds): what a page already has is not "
                                         "sent again")] = None,
) -> dict[str, Any]:
    """The scheduler's per-round samples of the last ``minutes``, oldest first:
    slots (``total``, ``busy``, ``free``), jobs ``queued`` and ``running``, and
    the decisions since the previous sample (``granted``, ``rejected``,
    ``reclaimed``). Aggregates over every tenant, no job names: any signed-in
    user may read them."""
    now = time.time()
    start = now - minutes * 60
    if since is not None:
        start = max(start, since)
    samples = read_samples(client, keys, since=start)
    return {"now": now, "keep_seconds": KEEP_SECONDS,
            "samples": [asdict(s) for s in samples]}
