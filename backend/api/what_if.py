"""``POST /api/v1/admin/what-if``: the portal's recent history replayed under
other policies (platform admins: it spans every tenant's jobs)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field, field_validator

from backend.api.deps import KeysDep, PlatformAdmin, RedisDep, SessionDep
from backend.core.leases import Heartbeats
from backend.core.models import utcnow
from backend.core.portal_settings import active_policy_name
from backend.core.settings import get_settings
from backend.services.portal_trace import WorkloadTooLarge, record_portal_workload
from backend.services.what_if import (
    DEFAULT_POLICIES,
    NothingToReplay,
    check_policies,
    replay,
    report,
    tenant_views,
)

router = APIRouter(prefix="/api/v1/admin", tags=["admin"])

MAX_HOURS = 24 * 30


class WhatIfRequest(BaseModel):
    hours: float = Field(24.0, gt=0, le=MAX_HOURS,
                         description="Replay the jobs submitted in the last this many hours")
    slots: int | None = Field(None, ge=1, le=4096,
                              description="Worker slots to simulate (default: the slots up now)")
    policies: list[str] = Field(default_factory=lambda: list(DEFAULT_POLICIES),
                                min_length=1, max_length=6)

    @field_validator("policies")
    @classmethod
    def _known(cls, policies: list[str]) -> list[str]:
        check_policies(policies)
        return list(dict.fromkeys(policies))


@router.post("/what-if")
def what_if(body: WhatIfRequest, session: SessionDep, scope: PlatformAdmin,
            client: RedisDep, keys: KeysDep) -> dict[str, Any]:
    """Every job submitted in the window that completed, replayed in the
    simulator under each policy (its real curves, speeds and chunk costs;
    today's tenant quotas), next to how it actually ran."""
    slots = body.slots or len(Heartbeats(client, keys).alive_info())
    if slots < 1:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY,
                            "No worker slot is up to size the replay on: give the number "
                            "of slots to simulate.")
    until = utcnow()
    try:
        workload = record_portal_workload(session, until - timedelta(hours=body.hours), until)
        replays = replay(workload, body.policies, slots=slots,
                         chunk_seconds=get_settings().chunk_seconds,
                         tenants=tenant_views(session))
    except (WorkloadTooLarge, NothingToReplay) as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, str(exc)) from exc
    return {**report(workload, replays), "slots": slots,
            "chunk_seconds": get_settings().chunk_seconds,
            "active_policy": active_policy_name(session, get_settings().policy)}
