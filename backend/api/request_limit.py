"""Bound how many requests are inside the application at once.

Blocking routes run on a thread pool and each holds a database connection
from its first query to its teardown, across several thread hops. Without a
bound, a burst of clients makes more requests hold connections than the pool
has, the rest wait out the pool timeout, and every client gets a 500 after
seconds. With the bound, extra requests wait in the event loop, holding
nothing, and are served in arrival order as soon as a place frees: latency
grows with the queue, throughput does not fall.

Long-lived streams (Server-Sent Events) and static files hold no connection
and are not counted, or a few open browser tabs would take every place.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Receive, Scope, Send


class ConcurrencyLimit:
    """Pure ASGI middleware: at most ``limit`` counted requests run at once."""

    def __init__(self, app: ASGIApp, *, limit: int, exempt_prefixes: tuple[str, ...] = (),
                 exempt_suffixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.exempt_prefixes = exempt_prefixes
        self.exempt_suffixes = exempt_suffixes
        self._places = asyncio.Semaphore(limit)

    def _counted(self, scope: Scope) -> bool:
        if scope["type"] != "http":
            return False
        path: str = scope["path"]
        return not (path.startswith(self.exempt_prefixes) or path.endswith(self.exempt_suffixes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._counted(scope):
            await self.app(scope, receive, send)
            return
        async with self._places:
            await self.app(scope, receive, send)
