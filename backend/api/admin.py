"""Administration: tenants and quotas, users and roles, the active policy
and its completion guard, and the audit log. Platform admins manage
everything; tenant admins read their own tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from backend.api.deps import DbId, KeysDep, PlatformAdmin, RedisDep, SessionDep, TenantAdmin
from backend.core.models import AuditLog, Role, Tenant, User
from backend.core.notify import wake_scheduler
from backend.core.portal_settings import (
    policy_choice,
    policy_defaults,
    set_active_policy,
    set_completion_guard,
    set_completion_weight,
)
from backend.core.settings import get_settings
from backend.scheduling.registry import GUARDED, live_policy_names
from backend.schemas import (
    AuditEntry,
    PolicyChange,
    PolicyState,
    Quotas,
    QuotaUpdate,
    TenantCreate,
    TenantPublic,
    UsagePublic,
    UserCreate,
    UserPublic,
    UserUpdate,
)
from backend.security import hash_password, password_problem
from backend.services import audit
from backend.services.quotas import QUOTA_FIELDS, Usage, usage_by_tenant

router = APIRouter(prefix="/api/v1/admin", tags=["admin"])


def _tenant_public(tenant: Tenant, usage: Usage | None) -> TenantPublic:
    usage = usage or Usage(0, 0, 0)
    return TenantPublic(
        id=tenant.id or 0, name=tenant.name,
        quotas=Quotas(**{f: getattr(tenant, f) for f in QUOTA_FIELDS}),
        usage=UsagePublic(running_slots=usage.running_slots, active_jobs=usage.active_jobs,
                          queued_jobs=usage.queued_jobs),
        allow_code_uploads=tenant.allow_code_uploads, pool_slots=dict(tenant.pool_slots or {}))


def _user_public(user: User) -> UserPublic:
    return UserPublic(id=user.id or 0, email=user.email, role=user.role,
                      tenant_id=user.tenant_id, is_active=user.is_active)


@router.get("/tenants", response_model=list[TenantPublic])
def list_tenants(session: SessionDep, scope: TenantAdmin) -> list[TenantPublic]:
    """Tenants with quotas and current usage (a tenant admin sees only their own)."""
    query = scope.filter(select(Tenant).order_by(col(Tenant.id)), col(Tenant.id))
    usage = usage_by_tenant(session)
    return [_tenant_public(t, usage.get(t.id or 0))
            for t in session.execute(query).scalars().all()]


def _insert_unique(session: SessionDep, row: Tenant | User, conflict: str) -> None:
    """Add ``row``; a unique-constraint clash (a name or email taken, even by a
    concurrent request) is a 409 with ``conflict`` as its message."""
    session.add(row)
    try:
        session.flush()
    except IntegrityError:
        session.rollback()
        raise HTTPException(status.HTTP_409_CONFLICT, conflict) from None


@router.post("/tenants", response_model=TenantPublic, status_code=status.HTTP_201_CREATED)
def create_tenant(body: TenantCreate, session: SessionDep, scope: PlatformAdmin) -> TenantPublic:
    """Create a tenant (team)."""
    quotas = body.quotas.model_dump(exclude_none=True)
    tenant = Tenant(name=body.name, **quotas)
    _insert_unique(session, tenant, f"a tenant named {body.name!r} exists already")
    audit.record(session, actor=scope.user, action="tenant.create", target=body.name,
                 tenant_id=tenant.id, quotas=quotas)
    session.commit()
    return _tenant_public(tenant, None)


@router.patch("/tenants/{tenant_id}", response_model=TenantPublic)
def update_quotas(tenant_id: DbId, body: QuotaUpdate, session: SessionDep, scope: PlatformAdmin,
                  client: RedisDep, keys: KeysDep) -> TenantPublic:
    """Change a tenant's quotas; takes effect at the next submission and scheduling round."""
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"tenant {tenant_id} not found")
    changes = body.model_dump(exclude_none=True)
    before = {f: getattr(tenant, f) for f in changes}
    for name, value in changes.items():
        setattr(tenant, name, value)
    session.add(tenant)
    audit.record(session, actor=scope.user, action="tenant.quotas", target=tenant.name,
                 tenant_id=tenant.id, before=before, after=changes)
    session.commit()
    wake_scheduler(client, keys, f"quotas {tenant_id}")
    return _tenant_public(tenant, usage_by_tenant(session).get(tenant_id))


@router.get("/users", response_model=list[UserPublic])
def list_users(session: SessionDep, scope: TenantAdmin) -> list[UserPublic]:
    """Users (a tenant admin sees their own tenant's)."""
    query = scope.filter(select(User).order_by(col(User.id)), col(User.tenant_id))
    return [_user_public(u) for u in session.execute(query).scalars().all()]


@router.post("/users", response_model=UserPublic, status_code=status.HTTP_201_CREATED)
def create_user(body: UserCreate, session: SessionDep, scope: TenantAdmin) -> UserPublic:
    """Add a user; a tenant admin may add members and tenant admins to their own tenant."""
    if not scope.allows(body.tenant_id) or (
        not scope.is_platform_admin and body.role == Role.platform_admin
    ):
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            "tenant admins may only add non-platform users to their own tenant")
    if session.get(Tenant, body.tenant_id) is None:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, [{
            "loc": ["body", "tenant_id"], "msg": f"tenant {body.tenant_id} does not exist",
            "type": "value_error"}])
    problem = password_problem(body.password, email=body.email)
    if problem:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, [{
            "loc": ["body", "password"], "msg": problem, "type": "value_error"}])
    user = User(tenant_id=body.tenant_id, email=body.email.strip().lower(),
                password_hash=hash_password(body.password), role=body.role)
    _insert_unique(session, user, f"a user with email {body.email!r} exists already")
    audit.record(session, actor=scope.user, action="user.create", target=user.email,
                 tenant_id=user.tenant_id, role=user.role)
    session.commit()
    return _user_public(user)


@router.patch("/users/{user_id}", response_model=UserPublic)
def update_user(user_id: DbId, body: UserUpdate, session: SessionDep,
                scope: TenantAdmin) -> UserPublic:
    """Change a user's role or deactivate them."""
    user = scope.get_owned(session, User, user_id)
    if not scope.is_platform_admin and (
        body.role == Role.platform_admin or user.role == Role.platform_admin
    ):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only platform admins manage that role")
    if user.id == scope.user.id and (body.is_active is False or (
            body.role is not None and body.role != user.role)):
        raise HTTPException(status.HTTP_409_CONFLICT,
                            "you cannot change your own role or deactivate yourself")
    changes = body.model_dump(exclude_none=True)
    before = {k: getattr(user, k) for k in changes}
    for name, value in changes.items():
        setattr(user, name, value)
    session.add(user)
    audit.record(session, actor=scope.user, action="user.update", target=user.email,
                 tenant_id=user.tenant_id, before=before, after=changes)
    session.commit()
    return _user_public(user)


@router.get("/policy", response_model=PolicyState)
def get_policy(session: SessionDep, _scope: TenantAdmin) -> PolicyState:
    """The scheduling policy in force, its completion guard and the policies to choose from."""
    return _policy_state(session)


@router.put("/policy", response_model=PolicyState)
def change_policy(body: PolicyChange, session: SessionDep, scope: PlatformAdmin,
                  client: RedisDep, keys: KeysDep) -> PolicyState:
    """Switch the live scheduler's policy, its completion guard, slaq's
    completion weight, or several at once; they apply from the next round."""
    settings = get_settings()
    available = live_policy_names()
    if body.name is not None and body.name not in available:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, [{
            "loc": ["body", "name"], "type": "value_error",
            "msg": f"unknown policy {body.name!r}; choose one of {', '.join(available)}"}])
    # Only what changes is written and audited: the page sends both fields.
    before = policy_choice(session, policy_defaults(settings))
    if body.name is not None and body.name != before.name:
        audit.record(session, actor=scope.user, action="policy.change", target=body.name,
                     before=before.name)
        set_active_policy(session, body.name)
    if body.completion_guard is not None and body.completion_guard != before.completion_guard:
        audit.record(session, actor=scope.user, action="policy.completion_guard",
                     target=f"{body.completion_guard:g}",
                     before=f"{before.completion_guard:g}")
        set_completion_guard(session, body.completion_guard)
    if body.completion_weight is not None and body.completion_weight != before.completion_weight:
        audit.record(session, actor=scope.user, action="policy.completion_weight",
                     target=f"{body.completion_weight:g}",
                     before=f"{before.completion_weight:g}")
        set_completion_weight(session, body.completion_weight)
    wake_scheduler(client, keys, "policy")
    return _policy_state(session)


def _policy_state(session: Session) -> PolicyState:
    settings = get_settings()
    choice = policy_choice(session, policy_defaults(settings))
    available = live_policy_names()
    return PolicyState(active=choice.name, available=available,
                       completion_guard=choice.completion_guard,
                       guarded=sorted(GUARDED & set(available)),
                       completion_weight=choice.completion_weight)


@router.get("/audit", response_model=list[AuditEntry])
def read_audit(session: SessionDep, scope: TenantAdmin,
               limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[AuditEntry]:
    """Admin actions, newest first (a tenant admin sees those about their tenant)."""
    query = scope.filter(
        select(AuditLog, col(User.email)).join(User, col(AuditLog.actor_id) == col(User.id))
        .order_by(col(AuditLog.id).desc()).limit(limit),
        col(AuditLog.tenant_id))
    return [AuditEntry(id=a.id or 0, actor_email=email, tenant_id=a.tenant_id, action=a.action,
                       target=a.target, details=a.details, created_at=a.created_at)
            for a, email in session.execute(query).all()]
