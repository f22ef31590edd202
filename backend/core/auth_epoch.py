"""Tell every API process when who-may-do-what has changed.

API processes remember which user and tenant a bearer token belongs to
(:mod:`backend.api.callers`). Any committed change to an account, an API token,
a web session or a tenant, by any process (API, CLI, seed), replaces the epoch
in Redis; a remembered caller is only used while the epoch it was read under
is still current, so a revoked token or a deactivated user is refused on the
very next request, in every API process.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import redis
from sqlalchemy import event
from sqlalchemy.orm import Session

from backend.core.models import ApiToken, Tenant, User, WebSession
from backend.core.redis_keys import RedisKeys

log = logging.getLogger(__name__)

WATCHED = (ApiToken, Tenant, User, WebSession)
_FLAG = "slaq_auth_changed"


def bump(client: redis.Redis | None = None, keys: RedisKeys | None = None) -> None:
    """A new epoch: every remembered caller is read again from the database."""
    from backend.core.redis_conn import get_keys, get_redis

    try:
        (client or get_redis()).set((keys or get_keys()).auth_epoch, uuid.uuid4().hex)
    except redis.RedisError as exc:
        # Remembered callers still lapse after backend.api.callers.TTL_SECONDS.
        log.warning("could not publish an account change to the API processes: %s", exc)


def _note_changes(session: Session, _context: Any, _instances: Any) -> None:
    if any(isinstance(row, WATCHED)
           for rows in (session.new, session.dirty, session.deleted) for row in rows):
        session.info[_FLAG] = True


def _after_commit(session: Session) -> None:
    if session.info.pop(_FLAG, False):
        bump()


def _after_rollback(session: Session) -> None:
    session.info.pop(_FLAG, None)


def watch_sessions() -> None:
    """Install the listeners on every ORM session of this process (idempotent)."""
    if not event.contains(Session, "before_flush", _note_changes):
        event.listen(Session, "before_flush", _note_changes)
        event.listen(Session, "after_commit", _after_commit)
        event.listen(Session, "after_rollback", _after_rollback)
