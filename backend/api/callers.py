"""Which user and tenant a bearer token belongs to, remembered between requests.

Looking the caller up (token, user and tenant, joined) was about a fifth of
the API's CPU per request and cost a thread-pool hop. An API process now
remembers the answer per token hash and reuses it while the Redis auth epoch
it was read under is unchanged (:mod:`backend.core.auth_epoch`: any change to
an account, token or tenant replaces it), the token has not expired, and for
at most ``TTL_SECONDS``. If Redis cannot be read, nothing remembered is used.

The remembered rows are detached copies, shared by every request that
presents the token: read their columns, never add them to a session or
change them (a route that changes a user or tenant loads its own row).
Copies per request cost more than the lookup they replace.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from sqlalchemy.orm import make_transient_to_detached

from backend.core.models import Tenant, User, as_utc, utcnow

TTL_SECONDS = 30.0
"""Bounds how long a change made behind the portal's back (SQL by hand) can go
unnoticed; changes made through the portal are seen on the next request."""
MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class _Caller:
    user: User
    tenant: Tenant
    token_expires_at: datetime | None
    epoch: str
    stored_at: float


_Row = TypeVar("_Row", User, Tenant)


def _detached_copy(row: _Row) -> _Row:
    copy = type(row).model_validate(row.model_dump())
    make_transient_to_detached(copy)
    return copy


class CallerCache:
    def __init__(self, ttl: float = TTL_SECONDS, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: OrderedDict[str, _Caller] = OrderedDict()

    def get(self, token_hash: str, epoch: str) -> tuple[User, Tenant] | None:
        """The caller (read-only rows), or None when not remembered under this
        epoch (the caller must then be looked up and :meth:`put`)."""
        entry = self._entries.get(token_hash)
        if entry is None:
            return None
        if (entry.epoch != epoch or time.monotonic() - entry.stored_at > self.ttl
                or (entry.token_expires_at is not None
                    and as_utc(entry.token_expires_at) <= utcnow())):
            self._entries.pop(token_hash, None)
            return None
        return entry.user, entry.tenant

    def put(self, token_hash: str, epoch: str, user: User, tenant: Tenant,
            token_expires_at: datetime | None) -> None:
        """Remember a caller looked up while ``epoch`` was current (read before
        the lookup, so a change during it is not remembered as current)."""
        self._entries[token_hash] = _Caller(_detached_copy(user), _detached_copy(tenant),
                                            token_expires_at, epoch, time.monotonic())
        self._entries.move_to_end(token_hash)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


callers = CallerCache()
"""This process's cache. Only the event loop's thread touches it."""
