"""When each API token was last used, recorded cheaply.

A token's ``last_used_at`` is what its owner reads to tell a live token from
a forgotten one ("Last used" on the account and admin pages), so minute
precision is enough; a write per request is not (the caller lookup itself is
cached, :mod:`backend.api.callers`). So an API process writes a token's time
at most once per ``EVERY_SECONDS``, and the UPDATE itself skips a row written
less than that long ago, which bounds the writes across processes too.
A failed write is logged and the request goes on: it is bookkeeping.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from datetime import timedelta

from sqlalchemy import or_, update
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import col

from backend.core.db import get_engine
from backend.core.models import ApiToken, utcnow

log = logging.getLogger(__name__)

EVERY_SECONDS = 60.0
"""A token's last use is written at most this often (so it is at most this stale)."""
MAX_ENTRIES = 10_000


class TokenUse:
    """Which tokens this process wrote a use for, and when (monotonic)."""

    def __init__(self, every: float = EVERY_SECONDS, max_entries: int = MAX_ENTRIES) -> None:
        self.every = every
        self.max_entries = max_entries
        self._written: OrderedDict[str, float] = OrderedDict()

    def due(self, token_hash: str) -> bool:
        """True when this process has not written the token's use for ``every``
        seconds; it then counts as written (one request per token writes)."""
        now = time.monotonic()
        last = self._written.get(token_hash)
        if last is not None and now - last < self.every:
            return False
        self._written[token_hash] = now
        self._written.move_to_end(token_hash)
        while len(self._written) > self.max_entries:
            self._written.popitem(last=False)
        return True

    def forget(self, token_hash: str) -> None:
        """Make the token due again (its write failed)."""
        self._written.pop(token_hash, None)

    def record(self, token_hash: str) -> bool:
        """Set the token's ``last_used_at`` to now unless another process did
        within ``every`` seconds; False if the write failed. Blocking: call
        it from a worker thread."""
        now = utcnow()
        stale = now - timedelta(seconds=self.every)
        try:
            with get_engine().begin() as conn:
                conn.execute(
                    update(ApiToken)
                    .where(col(ApiToken.token_hash) == token_hash,
                           or_(col(ApiToken.last_used_at).is_(None),
                               col(ApiToken.last_used_at) < stale))
                    .values(last_used_at=now))
        except SQLAlchemyError as exc:
            log.warning("could not record an API token's last use: %s", exc)
            return False
        return True


token_use = TokenUse()
"""This process's record. Only the event loop's thread calls :meth:`TokenUse.due`."""
