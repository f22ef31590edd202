"""Administration of API tokens: list and revoke other users' tokens.

The same rules as for users (``backend/api/admin.py``): a tenant admin sees
and revokes the tokens of their own tenant's users, a platform admin every
tenant's. Only platform admins touch a platform admin's tokens. A token's
secret is never shown again, only its name and prefix.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, Field
from sqlalchemy import Select, select
from sqlmodel import col

from backend.api.deps import DbId, SessionDep, TenantAdmin
from backend.core.models import ApiToken, Role, User, as_utc, utcnow
from backend.services import audit

router = APIRouter(prefix="/api/v1/admin/tokens", tags=["admin"])


class AdminTokenInfo(BaseModel):
    id: int
    name: str
    prefix: str = Field(description="The first characters of the token, to recognise it by")
    user_id: int
    user_email: str
    tenant_id: int
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    state: Literal["active", "expired", "revoked"]


def _info(token: ApiToken, user: User) -> AdminTokenInfo:
    expires = as_utc(token.expires_at) if token.expires_at else None
    state: Literal["active", "expired", "revoked"] = (
        "revoked" if token.revoked_at is not None
        else "expired" if expires is not None and expires <= utcnow() else "active")
    return AdminTokenInfo(
        id=token.id or 0, name=token.name, prefix=token.prefix, user_id=user.id or 0,
        user_email=user.email, tenant_id=user.tenant_id, created_at=as_utc(token.created_at),
        expires_at=expires, revoked_at=as_utc(token.revoked_at) if token.revoked_at else None,
        last_used_at=as_utc(token.last_used_at) if token.last_used_at else None, state=state)


def _tokens_query(scope: TenantAdmin) -> Select[ApiToken, User]:
    query = select(ApiToken, User).join(User, col(ApiToken.user_id) == col(User.id))
    return scope.filter(query, col(User.tenant_id))


@router.get("", response_model=list[AdminTokenInfo])
def list_tokens(session: SessionDep, scope: TenantAdmin,
                user_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
                include_revoked: bool = False) -> list[AdminTokenInfo]:
    """API tokens of your tenant's users (a platform admin sees every tenant's),
    newest first; revoked ones only with ``include_revoked``."""
    query = _tokens_query(scope)
    if user_id is not None:
        query = query.where(col(ApiToken.user_id) == user_id)
    if not include_revoked:
        query = query.where(col(ApiToken.revoked_at).is_(None))
    rows = session.execute(query.order_by(col(ApiToken.id).desc())).all()
    return [_info(token, user) for token, user in rows]


@router.delete("/{token_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses={404: {"description": "No such token in your tenant"}})
def revoke_token(token_id: DbId, session: SessionDep, scope: TenantAdmin) -> None:
    """Revoke a user's API token; it stops working at once. Revoking a revoked
    token changes nothing."""
    row = session.execute(_tokens_query(scope).where(col(ApiToken.id) == token_id)).first()
    if row is None:
        # Another tenant's token is reported as missing, as with every row.
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"token {token_id} not found")
    token, user = row
    if user.role == Role.platform_admin and not scope.is_platform_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            "only platform admins revoke a platform admin's tokens")
    if token.revoked_at is not None:
        return
    token.revoked_at = utcnow()
    session.add(token)
    audit.record(session, actor=scope.user, action="token.revoke",
                 target=f"{user.email}: {token.name} ({token.prefix}…)", tenant_id=user.tenant_id)
    session.commit()
