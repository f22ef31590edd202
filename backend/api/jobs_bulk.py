"""Bulk job control: cancel, pause or resume many jobs in one request."""

from __future__ import annotations

import json
import logging
from typing import Literal

import redis
from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field, model_validator
from sqlalchemy import select
from sqlmodel import col

from backend.api.deps import CurrentTenant, KeysDep, RedisDep, SessionDep
from backend.core.models import Job, JobStatus
from backend.core.notify import wake_scheduler
from backend.core.redis_keys import RedisKeys
from backend.services import jobs as job_service

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])
log = logging.getLogger(__name__)


class BulkFilter(BaseModel):
    status: JobStatus


class BulkRequest(BaseModel):
    action: Literal["cancel", "pause", "resume"]
    ids: list[int] | None = Field(None, max_length=job_service.BULK_MAX_IDS)
    filter: BulkFilter | None = None

    @model_validator(mode="after")
    def _one_selector(self) -> BulkRequest:
        if (self.ids is None) == (self.filter is None):
            raise ValueError("give either ids or filter, not both")
        return self


class BulkResult(BaseModel):
    action: str
    changed: int
    ids: list[int]


@router.post("/bulk", response_model=BulkResult)
def bulk_control(body: BulkRequest, session: SessionDep, scope: CurrentTenant,
                 client: RedisDep, keys: KeysDep) -> BulkResult:
    """Apply one action to the listed jobs, or to every job of yours in a status.

    Jobs the action does not apply to (already finished, say) are skipped;
    ``ids`` names the jobs that changed. Another tenant's ids are ignored as if
    they did not exist.
    """
    query = select(col(Job.id), col(Job.tenant_id))
    if body.ids is not None:
        if any(i < 1 for i in body.ids):
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "job ids start at 1")
        query = query.where(col(Job.id).in_(sorted(set(body.ids))))
    else:
        assert body.filter is not None
        query = query.where(col(Job.status) == body.filter.status)
    query = scope.filter(query, col(Job.tenant_id))
    changed = job_service.bulk_change_state(session=session, action=body.action,
                                            candidates=query)
    if changed:
        _announce(client, keys, body.action, changed)
    return BulkResult(action=body.action, changed=len(changed), ids=sorted(changed))


def _announce(client: redis.Redis, keys: RedisKeys, action: str,
              changed: dict[int, int]) -> None:
    # One event per tenant naming all its jobs: the scheduler and each
    # tenant's pages refresh those rows without a thousand messages.
    by_tenant: dict[int, list[int]] = {}
    for job_id, tenant_id in changed.items():
        by_tenant.setdefault(tenant_id, []).append(job_id)
    try:
        pipe = client.pipeline()
        for tenant_id, ids in by_tenant.items():
            pipe.publish(keys.events, json.dumps({"job_ids": sorted(ids), "tenant_id": tenant_id,
                                                  "bulk": action}))
        pipe.execute()
    except redis.RedisError as exc:
        # The scheduler's periodic reconciliation with the database catches up.
        log.warning("could not publish bulk job events: %s", exc)
    wake_scheduler(client, keys, f"bulk {action} {len(changed)}")
