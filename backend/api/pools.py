"""Worker pools, for platform admins: what each pool offers and runs now,
and which tenants a pool is reserved for."""

from __future__ import annotations

from collections import Counter

from fastapi import APIRouter, HTTPException, status
from sqlalchemy import select
from sqlmodel import col

from backend.api.deps import KeysDep, PlatformAdmin, RedisDep, SessionDep
from backend.core.leases import Heartbeats, Leases
from backend.core.models import Tenant, WorkerPool
from backend.core.notify import wake_scheduler
from backend.schemas import PoolPublic, PoolUpdate
from backend.services import audit

router = APIRouter(prefix="/api/v1/admin/pools", tags=["admin"])


@router.get("", response_model=list[PoolPublic])
def list_pools(session: SessionDep, scope: PlatformAdmin, client: RedisDep,
               keys: KeysDep) -> list[PoolPublic]:
    """Every pool a worker has joined, with its live and busy slots now."""
    adverts = Heartbeats(client, keys).alive_info()
    live = Counter(info.pool for info in adverts.values())
    busy = Counter(adverts[slot].pool for slot in Leases(client, keys).claimed_slots().values()
                   if slot in adverts)
    names = dict(session.execute(select(col(Tenant.id), col(Tenant.name))).tuples().all())
    rows = session.execute(select(WorkerPool).order_by(col(WorkerPool.name))).scalars().all()
    return [PoolPublic(name=row.name, slots=live[row.name], busy=busy[row.name], cores=row.cores,
                       memory_mb=row.memory_mb, gpu=row.gpu, gpu_memory_mb=row.gpu_memory_mb,
                       reserved_for=sorted(names.get(t, f"tenant {t}")
                                           for t in row.reserved_for or ()),
                       last_seen=row.last_seen)
            for row in rows]


@router.patch("/{name}", response_model=PoolPublic)
def reserve_pool(name: str, body: PoolUpdate, session: SessionDep, scope: PlatformAdmin,
                 client: RedisDep, keys: KeysDep) -> PoolPublic:
    """Reserve a pool for the named tenants ([] opens it to all). Jobs already
    running there finish their chunk; the next grants follow the reservation."""
    row = session.get(WorkerPool, name)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"no worker pool {name!r}: a pool exists once a worker joined it "
                            f"(slaq worker --pool {name})")
    wanted = sorted(set(body.reserved_for))
    found = dict(session.execute(select(col(Tenant.name), col(Tenant.id))
                                 .where(col(Tenant.name).in_(wanted))).tuples().all())
    unknown = [t for t in wanted if t not in found]
    if unknown:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY,
                            f"no tenant named {', '.join(repr(t) for t in unknown)}")
    before = list(row.reserved_for or ())
    row.reserved_for = sorted(int(found[t]) for t in wanted)
    session.add(row)
    audit.record(session, actor=scope.user, action="pool.reserve", target=name,
                 tenant_id=None, before=before, after=wanted)
    session.commit()
    wake_scheduler(client, keys, f"pool {name}")
    return next(p for p in list_pools(session, scope, client, keys) if p.name == name)
