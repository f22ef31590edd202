"""Signing in: browser sessions, API tokens, and who am I."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, HTTPException, Request, Response, status
from sqlalchemy import select

from backend.api.client_address import client_address
from backend.api.deps import CurrentUser, DbId, KeysDep, RedisDep, SessionDep
from backend.core.models import ApiToken, Tenant, User, as_utc, utcnow
from backend.core.settings import get_settings
from backend.rate_limit import blocked_for, clear, record_failure
from backend.schemas import LoginRequest, Me, SignIn, TokenCreated, TokenInfo, TokenRequest
from backend.security import (
    hash_token,
    new_api_token,
    token_display_prefix,
    verify_password_of,
)
from backend.services.web_sessions import (
    SESSION_COOKIE,
    SESSION_LIFETIME,
    close_session,
    find_session,
    open_session,
)

router = APIRouter(prefix="/api/v1/auth", tags=["auth"])


def _check_password(request: Request, session: SessionDep, client: RedisDep, keys: KeysDep,
                    email: str, password: str) -> User:
    email = email.strip().lower()
    address = client_address(request)
    wait = blocked_for(client, keys, email, address)
    if wait:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                            f"too many failed sign-ins; try again in {wait} seconds",
                            headers={"Retry-After": str(wait)})
    user = session.execute(select(User).where(User.email == email)).scalar_one_or_none()  # type: ignore[arg-type]
    if user is not None and not user.is_active:
        user = None  # answered exactly as an unknown account, in words and in time
    # Always one argon2 check, even without an account: the time taken must
    # not tell whether the email has one.
    right = verify_password_of(user.password_hash if user else None, password)
    if user is None or not right:
        record_failure(client, keys, email, address)
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "wrong email or password")
    clear(client, keys, email, address)
    return user


def _issue_token(session: SessionDep, user: User, name: str,
                 expires_in_days: int | None = None) -> TokenCreated:
    token = new_api_token()
    expires = utcnow() + timedelta(days=expires_in_days) if expires_in_days else None
    session.add(ApiToken(user_id=user.id or 0, name=name, token_hash=hash_token(token),
                         prefix=token_display_prefix(token), expires_at=expires))
    session.commit()
    return TokenCreated(token=token, name=name, prefix=token_display_prefix(token))


@router.post("/token", response_model=TokenCreated, status_code=status.HTTP_201_CREATED)
def create_token_with_password(body: LoginRequest, request: Request, session: SessionDep,
                               client: RedisDep, keys: KeysDep) -> TokenCreated:
    """Sign in with email and password; returns a new API token, shown once."""
    user = _check_password(request, session, client, keys, body.email, body.password)
    return _issue_token(session, user, body.token_name)


@router.post("/login", response_model=Me)
def sign_in(body: SignIn, request: Request, response: Response, session: SessionDep,
            client: RedisDep, keys: KeysDep) -> Me:
    """Browser sign-in: sets an HttpOnly session cookie and returns the CSRF token."""
    user = _check_password(request, session, client, keys, body.email, body.password)
    cookie, web = open_session(session, user)
    response.set_cookie(SESSION_COOKIE, cookie, httponly=True, samesite="lax",
                        secure=get_settings().environment == "production",
                        max_age=int(SESSION_LIFETIME.total_seconds()), path="/")
    return _me(session, user, web.csrf_token)


@router.post("/logout", status_code=status.HTTP_204_NO_CONTENT)
def sign_out(request: Request, response: Response, session: SessionDep) -> None:
    """End the browser session."""
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        close_session(session, cookie)
    response.delete_cookie(SESSION_COOKIE, path="/")


def _me(session: SessionDep, user: User, csrf: str | None) -> Me:
    tenant = session.get(Tenant, user.tenant_id)
    return Me(id=user.id or 0, email=user.email, role=user.role, tenant_id=user.tenant_id,
              tenant_name=tenant.name if tenant else "?",
              allow_code_uploads=bool(tenant and tenant.allow_code_uploads), csrf_token=csrf)


@router.get("/me", response_model=Me)
def who_am_i(request: Request, user: CurrentUser, session: SessionDep) -> Me:
    """The signed-in user, their role and tenant (and CSRF token for browser sessions)."""
    cookie = request.cookies.get(SESSION_COOKIE)
    found = find_session(session, cookie) if cookie else None
    return _me(session, user, found[0].csrf_token if found else None)


@router.get("/tokens", response_model=list[TokenInfo])
def list_tokens(user: CurrentUser, session: SessionDep) -> list[TokenInfo]:
    """Your API tokens (names and prefixes only; a token is shown once, at creation)."""
    rows = session.execute(select(ApiToken).where(ApiToken.user_id == user.id)  # type: ignore[arg-type]
                           .order_by(ApiToken.id)).scalars().all()  # type: ignore[arg-type]
    return [TokenInfo(id=t.id or 0, name=t.name, prefix=t.prefix, created_at=as_utc(t.created_at),
                      expires_at=as_utc(t.expires_at) if t.expires_at else None,
                      revoked_at=as_utc(t.revoked_at) if t.revoked_at else None,
                      last_used_at=as_utc(t.last_used_at) if t.last_used_at else None)
            for t in rows]


@router.post("/tokens", response_model=TokenCreated, status_code=status.HTTP_201_CREATED)
def create_token(body: TokenRequest, user: CurrentUser, session: SessionDep) -> TokenCreated:
    """Create an API token for scripts; copy it now, it is not shown again."""
    return _issue_token(session, user, body.name, body.expires_in_days)


@router.delete("/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_token(token_id: DbId, user: CurrentUser, session: SessionDep) -> None:
    """Revoke one of your API tokens; it stops working at once."""
    token = session.get(ApiToken, token_id)
    if token is None or token.user_id != user.id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"token {token_id} not found")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.add(token)
        session.commit()
