"""Liveness and cluster facts for operators."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from sqlalchemy import text

from backend.api.deps import KeysDep, RedisDep, SessionDep
from backend.core.leases import Heartbeats

router = APIRouter(prefix="/api/v1", tags=["health"])


@router.get("/health")
def health(session: SessionDep, client: RedisDep, keys: KeysDep) -> dict[str, Any]:
    """Database and Redis reachability, live worker slots, the scheduler's last round."""
    session.execute(text("SELECT 1"))
    slots = Heartbeats(client, keys).alive()
    raw = client.hgetall(keys.scheduler_status)
    return {"database": "ok", "redis": "ok", "worker_slots": len(slots),
            "scheduler": {k: json.loads(v) for k, v in raw.items()}}
