"""Request dependencies: database session, caller, and the caller's tenant.

Every route that touches tenant data takes ``CurrentTenant`` (or
``CurrentUser``) and scopes its reads with ``TenantScope.filter`` and
``TenantScope.get_owned``; this is the one place that decides who the caller
is and which tenants' rows they may see.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Annotated, Any, Protocol, TypeVar

import redis
from fastapi import Depends, HTTPException, Path, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Select, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped
from sqlmodel import Session

from backend.api.callers import callers
from backend.api.token_use import token_use
from backend.core.db import get_engine
from backend.core.models import ApiToken, Role, Tenant, User, as_utc, utcnow
from backend.core.owned import find_owned
from backend.core.redis_conn import get_keys, get_redis, quick_client_for
from backend.core.redis_keys import RedisKeys
from backend.core.settings import get_settings
from backend.security import hash_token
from backend.services.web_sessions import CSRF_HEADER, SESSION_COOKIE, find_session


async def get_session() -> AsyncIterator[Session]:
    # Async so that opening and closing cost no thread-pool hops: a Session
    # connects lazily, on the route's first query (in the route's thread),
    # and closing only hands its connection back to the pool.
    with Session(get_engine(), expire_on_commit=False) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


@lru_cache(maxsize=8)
def _autocommit(engine: Engine) -> Engine:
    return engine.execution_options(isolation_level="AUTOCOMMIT")


async def get_read_session() -> AsyncIterator[Session]:
    # For routes that only read: each statement is its own transaction, so a
    # request sends no BEGIN and no ROLLBACK (two of a PostgreSQL read's four
    # round trips, the ROLLBACK on the event loop as the session closes).
    with Session(_autocommit(get_engine()), expire_on_commit=False) as session:
        yield session


ReadSessionDep = Annotated[Session, Depends(get_read_session)]
"""A session that must not write: reads see committed rows, statement by statement."""

# Ids and offsets are database integers (32-bit on PostgreSQL): a larger value
# is refused with a 422 instead of overflowing the column into a 500.
DB_INT_MAX = 2**31 - 1
DbId = Annotated[int, Path(ge=1, le=DB_INT_MAX)]
Offset = Annotated[int, Query(ge=0, le=DB_INT_MAX)]


# Async on purpose: a plain function dependency costs a thread-pool hop per
# request, and these only hand back process-wide objects.
async def _redis_client() -> redis.Redis:
    return get_redis()


async def _redis_keys() -> RedisKeys:
    return get_keys()


RedisDep = Annotated[redis.Redis, Depends(_redis_client)]
KeysDep = Annotated[RedisKeys, Depends(_redis_keys)]

_UNAUTHORIZED = HTTPException(
    status_code=status.HTTP_401_UNAUTHORIZED,
    detail="Sign in first: send 'Authorization: Bearer <API token>' or sign in in the browser",
    headers={"WWW-Authenticate": "Bearer"},
)
_BAD_TOKEN = HTTPException(
    status_code=status.HTTP_401_UNAUTHORIZED,
    detail="This API token is not valid: it is wrong, expired or revoked. Create a new one "
    "(POST /api/v1/auth/token, or 'slaq login')",
    headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
)
_EXPIRED_SESSION = HTTPException(
    status_code=status.HTTP_401_UNAUTHORIZED,
    detail="Your session has ended; sign in again",
    headers={"WWW-Authenticate": "Bearer"},
)
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def _caller_from_token(session: Session, token_hash: str) -> tuple[User, Tenant, datetime | None]:
    """User, tenant and token expiry, in one query."""
    row = session.execute(
        select(ApiToken, User, Tenant)
        .join(User, ApiToken.user_id == User.id)  # type: ignore[arg-type]
        .join(Tenant, User.tenant_id == Tenant.id)  # type: ignore[arg-type]
        .where(ApiToken.token_hash == token_hash)  # type: ignore[arg-type]
    ).first()
    if row is None:
        raise _BAD_TOKEN
    api_token, user, tenant = row
    now = utcnow()
    if api_token.revoked_at is not None or (
        api_token.expires_at is not None and as_utc(api_token.expires_at) <= now
    ) or not user.is_active:
        raise _BAD_TOKEN
    return user, tenant, api_token.expires_at


def _user_from_cookie(request: Request, session: Session, cookie: str) -> User:
    found = find_session(session, cookie)
    if found is None:
        raise _EXPIRED_SESSION
    web, user = found
    # Cookies ride along on cross-site requests; the CSRF header cannot.
    if request.method not in _SAFE_METHODS and not secrets.compare_digest(
        request.headers.get(CSRF_HEADER, ""), web.csrf_token
    ):
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            f"missing or wrong {CSRF_HEADER} header; reload the page")
    return user


def _caller_from_cookie(request: Request, session: Session) -> tuple[User, Tenant]:
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        raise _UNAUTHORIZED
    user = _user_from_cookie(request, session, cookie)
    tenant = session.get(Tenant, user.tenant_id)
    if tenant is None:
        raise _UNAUTHORIZED
    return user, tenant


def _auth_epoch() -> str | None:
    """The current auth epoch; None when Redis cannot say, and then nothing
    remembered may be trusted. A blocking read on purpose: a local GET costs
    less than the asyncio client's machinery (measured per request)."""
    try:
        # From the event loop, so never a long wait: a slow Redis sends the
        # caller to the database instead.
        value = quick_client_for(get_settings().redis_url).get(get_keys().auth_epoch)
    except redis.RedisError:
        return None
    return str(value or "")


async def _caller(request: Request, session: Session) -> tuple[User, Tenant]:
    token = _bearer(request)
    if token is None:
        return await run_in_threadpool(_caller_from_cookie, request, session)
    token_hash = hash_token(token)
    epoch = _auth_epoch()
    remembered = callers.get(token_hash, epoch) if epoch is not None else None
    if remembered is not None:
        user, tenant = remembered
    else:
        user, tenant, expires_at = await run_in_threadpool(_caller_from_token, session,
                                                           token_hash)
        if epoch is not None:
            callers.put(token_hash, epoch, user, tenant, expires_at)
    # Only a valid token gets here (a bad one raised above); its use is
    # written at most once a minute, so most requests pay nothing for it.
    if token_use.due(token_hash) and not await run_in_threadpool(token_use.record, token_hash):
        token_use.forget(token_hash)
    return user, tenant


async def get_current_user(request: Request, session: SessionDep) -> User:
    """The caller, from a bearer API token or a browser session cookie."""
    return (await _caller(request, session))[0]


CurrentUser = Annotated[User, Depends(get_current_user)]


class _TenantOwned(Protocol):
    tenant_id: int


_Row = TypeVar("_Row", bound=_TenantOwned)
_Query = TypeVar("_Query", bound=Select[*tuple[Any, ...]])


@dataclass(frozen=True)
class TenantScope:
    """Whose data the caller may see: one tenant, or every tenant for a
    platform admin. ``tenant`` and ``user`` may be shared, remembered rows
    (:mod:`backend.api.callers`): read them, load a row to change it."""

    tenant: Tenant
    user: User

    @property
    def is_platform_admin(self) -> bool:
        return self.user.role == Role.platform_admin

    @property
    def only_tenant_id(self) -> int | None:
        """The one tenant the caller is confined to; None for a platform admin."""
        return None if self.is_platform_admin else self.tenant.id

    def allows(self, tenant_id: int) -> bool:
        return self.is_platform_admin or tenant_id == self.tenant.id

    def filter(self, query: _Query, tenant_column: Mapped[Any]) -> _Query:
        """``query`` restricted to rows whose ``tenant_column`` is the caller's
        tenant; a platform admin's query is left whole."""
        if self.is_platform_admin:
            return query
        return query.where(tenant_column == self.tenant.id)

    def get_owned(self, session: Session, model: type[_Row], row_id: int, *,
                  noun: str | None = None) -> _Row:
        """The row, or a 404 naming ``noun`` (default: the model's name)."""
        # Another tenant's row is reported as missing, not forbidden: its
        # existence is none of the caller's business.
        row = find_owned(session, model, row_id, self.only_tenant_id)
        if row is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND,
                                f"{noun or model.__name__.lower()} {row_id} not found")
        return row


def lookup_caller(request: Request, session: Session) -> TenantScope:
    """The caller, read from the database now (for blocking code; routes take
    ``CurrentTenant``)."""
    token = _bearer(request)
    if token is None:
        user, tenant = _caller_from_cookie(request, session)
    else:
        user, tenant, _ = _caller_from_token(session, hash_token(token))
    return TenantScope(tenant=tenant, user=user)


async def get_current_tenant(request: Request, session: SessionDep) -> TenantScope:
    """The caller and their tenant, found together (one dependency, at most one
    query; none for a bearer token this process remembers, see
    :mod:`backend.api.callers`)."""
    user, tenant = await _caller(request, session)
    return TenantScope(tenant=tenant, user=user)


CurrentTenant = Annotated[TenantScope, Depends(get_current_tenant)]


# Async: a check this small is not worth a thread-pool hop.
async def require_tenant_admin(scope: CurrentTenant) -> TenantScope:
    if scope.user.role not in (Role.tenant_admin, Role.platform_admin):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "tenant admins only")
    return scope


async def require_platform_admin(scope: CurrentTenant) -> TenantScope:
    if not scope.is_platform_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "platform admins only")
    return scope


TenantAdmin = Annotated[TenantScope, Depends(require_tenant_admin)]
PlatformAdmin = Annotated[TenantScope, Depends(require_platform_admin)]
