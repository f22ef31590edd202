"""Server-sent events: live loss points of one job, and job changes of a tenant.

Loss points come from the Redis stream the worker appends to while it trains
(not from the database commit at the end of a chunk), so a chart sees a point
well under a second after the iteration finished.

Every ``points`` event carries the last iteration it holds as its SSE ``id``.
A client that reconnects (a browser's EventSource sends ``Last-Event-ID`` by
itself) gets the points after it from the database, which is the truth and
keeps what the trimmed Redis stream may have lost, then the running chunk's
points from Redis: no point is lost and none is sent twice.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator, Iterable
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy import select
from sqlmodel import Session, col
from starlette.concurrency import run_in_threadpool

from backend.api.deps import DB_INT_MAX, CurrentTenant, DbId, KeysDep, SessionDep
from backend.core.db import get_engine
from backend.core.models import Job, LossRecord
from backend.core.redis_conn import ASYNC_SOCKET_TIMEOUT, get_async_redis
from backend.core.settings import get_settings

router = APIRouter(prefix="/api/v1", tags=["live"])

DB_PAGE = 2_000
"""Stored points per event (and per query) while catching up from the database."""
READ_COUNT = 1_000
"""Stream entries per XREAD."""
SCAN_PAGE = 1_000
SCAN_LIMIT = 20_000
"""The worker trims the job's stream to about this many entries, so a backward
scan never has more to look at."""
RETRY = b"retry: 2000\n\n"
KEEP_ALIVE = b": keep-alive\n\n"
_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

Point = tuple[int, float]


def _sse(event: str, data: Any, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _wait_seconds() -> tuple[float, float]:
    """(keep-alive period, longest single blocking wait on Redis)."""
    keepalive = get_settings().stream_keepalive_seconds
    # redis-py aborts any read that outlasts the shared client's socket timeout.
    return keepalive, min(keepalive, ASYNC_SOCKET_TIMEOUT / 2)


def _resume_point(after_iteration: int, last_event_id: str | None) -> int:
    """The iteration the client already has: the later of the query parameter
    (the page's own record) and Last-Event-ID (what this stream sent before a
    drop; the browser repeats the original URL on reconnect, so this is newer).
    An id this API did not write, e.g. an older Redis stream id, is ignored."""
    value = (last_event_id or "").strip()
    if not value.isdigit() or len(value) > 12:
        return after_iteration
    return max(after_iteration, min(int(value), DB_INT_MAX))


def _stored_after(job_id: int, after: int) -> list[tuple[int, float]]:
    with Session(get_engine()) as session:
        rows = session.execute(
            select(col(LossRecord.iteration), col(LossRecord.loss))
            .where(col(LossRecord.job_id) == job_id, col(LossRecord.iteration) > after)
            .order_by(col(LossRecord.iteration)).limit(DB_PAGE)
        ).all()
    return [(int(i), float(loss)) for i, loss in rows]


def _entry_point(fields: dict[str, str]) -> Point:
    return int(fields["iteration"]), float(fields["loss"])


async def _unstored(client: Any, stream: str, upto_id: str, after: int) -> list[Point]:
    """Stream entries up to ``upto_id`` with an iteration past ``after``, in
    stream order: the points of a chunk still running, not in the database yet.

    Scans backwards and stops at the first point the client has: the entries
    before it belong to chunks already committed, or to a chunk that was lost
    and whose iterations are being trained again after it.
    """
    found: list[Point] = []
    upper, scanned = upto_id, 0
    while scanned < SCAN_LIMIT:
        page = await client.xrevrange(stream, max=upper, min="-", count=SCAN_PAGE)
        for _entry_id, fields in page:
            point = _entry_point(fields)
            if point[0] <= after:
                return found[::-1]
            found.append(point)
        if len(page) < SCAN_PAGE:
            break
        upper, scanned = f"({page[-1][0]}", scanned + len(page)
    return found[::-1]


class _Sent:
    """The last iteration sent: later points only, so a chunk streamed twice
    (a lost one trained again) never shows an iteration twice."""

    def __init__(self, iteration: int) -> None:
        self.iteration = iteration

    def event(self, job_id: int, points: Iterable[Point]) -> bytes | None:
        fresh: list[Point] = []
        for iteration, loss in points:
            if iteration > self.iteration:
                self.iteration = iteration
                # JSON has no NaN or infinity: the chart could not parse the event.
                if math.isfinite(loss):
                    fresh.append((iteration, loss))
        if not fresh:
            return None
        return _sse("points", {"job_id": job_id, "points": fresh}, str(self.iteration))


async def _points(request: Request, stream: str, after_iteration: int,
                  job_id: int) -> AsyncIterator[bytes]:
    client: Any = get_async_redis()
    keepalive, block = _wait_seconds()
    yield RETRY
    # Where the stream ends before reading the database: every stored point
    # was streamed before its commit, so it is in the database read below or
    # in the stream up to here, and everything later comes from XREAD.
    tail = await client.xrevrange(stream, count=1)
    last_id = tail[0][0] if tail else "0-0"
    sent = _Sent(after_iteration)
    while True:
        page = await run_in_threadpool(_stored_after, job_id, sent.iteration)
        event = sent.event(job_id, page)
        if event is not None:
            yield event
        if len(page) < DB_PAGE:
            break
    if tail:
        event = sent.event(job_id, await _unstored(client, stream, last_id, sent.iteration))
        if event is not None:
            yield event
    quiet_since = time.monotonic()
    while not await request.is_disconnected():
        got = await client.xread({stream: last_id}, block=int(block * 1000), count=READ_COUNT)
        if got:
            entries = got[0][1]
            last_id = entries[-1][0]
            event = sent.event(job_id, (_entry_point(fields) for _, fields in entries))
            if event is not None:
                yield event
                quiet_since = time.monotonic()
                continue
        if time.monotonic() - quiet_since >= keepalive:
            yield KEEP_ALIVE
            quiet_since = time.monotonic()


@router.get("/jobs/{job_id}/stream")
async def stream_losses(
    job_id: DbId, request: Request, session: SessionDep, scope: CurrentTenant, keys: KeysDep,
    after_iteration: Annotated[int, Query(ge=0, le=DB_INT_MAX)] = 0,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """Live loss points (SSE ``points`` events, each with its last iteration as
    ``id``) after ``after_iteration``, or after ``Last-Event-ID`` when the
    client reconnects; an SSE comment keeps an idle stream open."""
    scope.get_owned(session, Job, job_id)
    session.close()  # don't hold a DB connection for the life of the stream
    after = _resume_point(after_iteration, last_event_id)
    return StreamingResponse(_points(request, keys.job_stream(job_id), after, job_id),
                             media_type="text/event-stream", headers=_HEADERS)


async def _events(request: Request, channel: str, tenant_id: int | None) -> AsyncIterator[bytes]:
    keepalive, block = _wait_seconds()
    pubsub: Any = get_async_redis().pubsub()
    try:
        await pubsub.subscribe(channel)
        yield RETRY
        quiet_since = time.monotonic()
        while not await request.is_disconnected():
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=block)
            if message is not None:
                event = json.loads(message["data"])
                if tenant_id is None or event.get("tenant_id") == tenant_id:
                    yield _sse("job", event)
                    quiet_since = time.monotonic()
                    continue
            if time.monotonic() - quiet_since >= keepalive:
                yield KEEP_ALIVE
                quiet_since = time.monotonic()
    finally:
        # A disconnect cancels this generator; unshielded, the cancellation
        # would interrupt the close and keep the connection out of the pool.
        with anyio.CancelScope(shield=True):
            await pubsub.aclose()


@router.get("/events")
async def stream_events(request: Request, scope: CurrentTenant, keys: KeysDep,
                        session: SessionDep) -> StreamingResponse:
    """Live "job changed" events (SSE ``job``) for your tenant's jobs."""
    session.close()
    return StreamingResponse(_events(request, keys.events, scope.only_tenant_id),
                             media_type="text/event-stream", headers=_HEADERS)
