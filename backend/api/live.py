"""Server-sent events: live loss points of one job, and job changes of a tenant.

Loss points come from the Redis stream the worker appends to while it trains
(not from the database commit at the end of a chunk), so a chart sees a point
well under a second after the iteration finished.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

import redis.asyncio as aioredis
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from backend.api.deps import CurrentTenant, DbId, KeysDep, SessionDep
from backend.core.models import Job
from backend.core.settings import get_settings

router = APIRouter(prefix="/api/v1", tags=["live"])

# How long one XREAD waits; also the keep-alive period of the connection.
BLOCK_MS = 15_000
LOOKBACK = 5_000


def _sse(event: str, data: Any, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _client() -> Any:
    # Typed as Any: redis-py's stubs type every reply as a union of bytes,
    # str and lists, which decode_responses=True narrows to str at run time.
    return aioredis.Redis.from_url(get_settings().redis_url, decode_responses=True)


async def _points(request: Request, stream: str, after_iteration: int,
                  job_id: int) -> AsyncIterator[bytes]:
    client = _client()
    try:
        recent = await client.xrevrange(stream, count=LOOKBACK)
        last_id = recent[0][0] if recent else "0-0"
        backlog = [(int(f["iteration"]), float(f["loss"])) for _, f in reversed(recent)
                   if int(f["iteration"]) > after_iteration]
        yield b"retry: 2000\n\n"
        if backlog:
            yield _sse("points", {"job_id": job_id, "points": backlog}, last_id)
        while not await request.is_disconnected():
            got = await client.xread({stream: last_id}, block=BLOCK_MS, count=1000)
            if not got:
                yield b": keep-alive\n\n"
                continue
            entries = got[0][1]
            last_id = entries[-1][0]
            points = [(int(f["iteration"]), float(f["loss"])) for _, f in entries]
            yield _sse("points", {"job_id": job_id, "points": points}, last_id)
    except asyncio.CancelledError:
        pass
    finally:
        await client.aclose()


@router.get("/jobs/{job_id}/stream")
async def stream_losses(
    job_id: DbId, request: Request, session: SessionDep, scope: CurrentTenant, keys: KeysDep,
    after_iteration: Annotated[int, Query(ge=0)] = 0,
) -> StreamingResponse:
    """Live loss points (SSE ``points`` events) with iteration > ``after_iteration``."""
    scope.get_owned(session, Job, job_id)
    session.close()  # don't hold a DB connection for the life of the stream
    return StreamingResponse(_points(request, keys.job_stream(job_id), after_iteration, job_id),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _events(request: Request, channel: str, tenant_id: int | None) -> AsyncIterator[bytes]:
    client = _client()
    pubsub = client.pubsub()
    await pubsub.subscribe(channel)
    try:
        yield b"retry: 2000\n\n"
        while not await request.is_disconnected():
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=15)
            if message is None:
                yield b": keep-alive\n\n"
                continue
            event = json.loads(message["data"])
            if tenant_id is None or event.get("tenant_id") == tenant_id:
                yield _sse("job", event)
    except asyncio.CancelledError:
        pass
    finally:
        await pubsub.aclose()
        await client.aclose()


@router.get("/events")
async def stream_events(request: Request, scope: CurrentTenant, keys: KeysDep,
                        session: SessionDep) -> StreamingResponse:
    """Live "job changed" events (SSE ``job``) for your tenant's jobs."""
    session.close()
    return StreamingResponse(_events(request, keys.events, scope.only_tenant_id),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})



