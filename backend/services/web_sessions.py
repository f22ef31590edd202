"""Browser sessions: random cookie ids stored hashed, each with a CSRF token."""

from __future__ import annotations

import secrets
from datetime import timedelta

from sqlalchemy import delete, select
from sqlmodel import Session

from backend.core.models import User, WebSession, as_utc, utcnow
from backend.security import hash_token

SESSION_COOKIE = "slaq_session"
CSRF_HEADER = "X-CSRF-Token"
SESSION_LIFETIME = timedelta(hours=12)


def open_session(session: Session, user: User) -> tuple[str, WebSession]:
    """Returns (cookie value, row); the cookie value is never stored."""
    cookie = secrets.token_urlsafe(32)
    row = WebSession(user_id=user.id or 0, session_hash=hash_token(cookie),
                     csrf_token=secrets.token_urlsafe(24),
                     expires_at=utcnow() + SESSION_LIFETIME)
    session.add(row)
    session.commit()
    return cookie, row


def find_session(session: Session, cookie: str) -> tuple[WebSession, User] | None:
    row = session.execute(
        select(WebSession, User).join(User, WebSession.user_id == User.id)  # type: ignore[arg-type]
        .where(WebSession.session_hash == hash_token(cookie))  # type: ignore[arg-type]
    ).first()
    if row is None:
        return None
    web, user = row
    if as_utc(web.expires_at) <= utcnow() or not user.is_active:
        return None
    return web, user


def close_session(session: Session, cookie: str) -> None:
    session.execute(delete(WebSession).where(WebSession.session_hash == hash_token(cookie)))  # type: ignore[arg-type]
    session.commit()
