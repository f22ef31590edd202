"""``GET /metrics``: the cluster in Prometheus's text format, for operators.

What a scrape shows, all computed when it is asked (``docs/metrics.md``):

* from Redis, by pool: worker slots alive (live heartbeats) and busy (live
  slots holding a chunk's lease claim);
* from SQL aggregates, never job rows: queued jobs and the oldest one's wait,
  per tenant and per pool (the pool a job's requirements name, else ``any``);
* from the cluster's counters and histograms in Redis
  (:mod:`backend.core.metrics_store`), the same whichever API process
  answers: chunks granted, reclaimed and failed, chunk duration and
  overhead, scheduling decision and round time;
* API request latency (until the response starts) and counts by route
  template, recorded by :class:`RequestMetrics`. One API process keeps them
  in memory; with several (``API_PROCESSES`` > 1) ``slaq api`` points
  prometheus-client's multiprocess mode at a directory of its own
  (``PROMETHEUS_MULTIPROC_DIR``), so every process answers with the sum.

Every tenant's queue is in it, so it takes a platform admin's API token (or
browser session), or the ``METRICS_TOKEN`` bearer Prometheus is given.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
from collections import Counter as Tally
from collections.abc import Iterator, Sequence
from typing import Any

import redis
from fastapi import APIRouter, HTTPException, Request, Response, status
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlmodel import Session, col
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.api.deps import SessionDep, lookup_caller
from backend.core import metrics_store as store
from backend.core.leases import Heartbeats, Leases
from backend.core.models import Job, JobStatus, Tenant, WorkerPool, as_utc, utcnow
from backend.core.pools import DEFAULT_POOL
from backend.core.redis_conn import get_keys, get_redis
from backend.core.redis_keys import RedisKeys
from backend.core.settings import get_settings
from backend.services.web_sessions import SESSION_COOKIE

log = logging.getLogger(__name__)

router = APIRouter(tags=["metrics"])

ANY_POOL = "any"
"""The pool label of queued jobs whose requirements name no pool."""
UNMATCHED = "unmatched"
"""The route label of requests no route matched (404s): never the raw path."""

# Counters' and histograms' *_created series only add noise to every scrape.
disable_created_metrics()

MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
"""Set (by ``slaq api`` with several processes) before prometheus-client is
imported: request figures then live in files there, summed at each scrape."""

# Own figures: in a private registry in one process, in the multiprocess
# directory's files otherwise (then registered nowhere, collected from files).
_OWN = None if MULTIPROC_DIR else CollectorRegistry()
REQUEST_SECONDS = Histogram(
    "slaq_api_request_duration_seconds",
    "API request latency until the response starts, by method and route template",
    ["method", "route"], registry=_OWN)
REQUESTS = Counter("slaq_api_requests", "API requests, by method, route template and status",
                   ["method", "route", "status"], registry=_OWN)


def route_label(scope: Scope, routes: Sequence[BaseRoute] = (),
                arrived: Scope | None = None) -> str:
    """The template of the route that served the request (``/api/v1/jobs/{job_id}``).

    A request that was not routed (answered by the JSON guard first, or by a
    mounted app such as the static files) is matched against ``routes`` as it
    ``arrived`` (a mount rewrites the scope's ``root_path``); one no route
    matches is ``unmatched``.
    """
    route = scope.get("route")
    if route is None:
        probe = arrived if arrived is not None else scope
        route = next((r for r in routes if r.matches(probe)[0] is not Match.NONE), None)
    if route is None:
        return UNMATCHED
    return str(getattr(route, "path_format", None) or getattr(route, "path", None) or UNMATCHED)


def flat_routes(routes: Sequence[BaseRoute]) -> list[BaseRoute]:
    """Every route with a path, routers included by FastAPI opened up (recent
    FastAPI keeps an included router as one entry holding ``original_router``).
    The app includes its routers without a prefix, so their paths are whole."""
    out: list[BaseRoute] = []
    for route in routes:
        nested = getattr(getattr(route, "original_router", None), "routes", None)
        if nested is not None:
            out.extend(flat_routes(nested))
        elif getattr(route, "path", None):
            out.append(route)
    return out


class RequestMetrics:
    """Pure ASGI middleware, outermost: times each HTTP request until its
    response starts (so a live stream counts its time to first byte, not its
    hours open) and labels it with the matched route's template."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self._routes = routes
        self._flat: list[BaseRoute] | None = None

    @property
    def routes(self) -> list[BaseRoute]:
        # Opened up at the first request: the app's routes are all in by then.
        if self._flat is None:
            self._flat = flat_routes(self._routes)
        return self._flat

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        arrived = dict(scope)
        answered: list[tuple[int, float]] = []

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start" and not answered:
                answered.append((int(message["status"]), time.perf_counter() - began))
            await send(message)

        try:
            await self.app(scope, receive, timed)
        finally:
            code, seconds = answered[0] if answered else (500, time.perf_counter() - began)
            method = str(scope.get("method", ""))
            route = route_label(scope, self.routes, arrived)
            REQUEST_SECONDS.labels(method=method, route=route).observe(seconds)
            REQUESTS.labels(method=method, route=route, status=str(code)).inc()


def _own_figures() -> Collector:
    if MULTIPROC_DIR:
        # Registered nowhere: it reads every API process's files when collected.
        return MultiProcessCollector(None, MULTIPROC_DIR)
    assert _OWN is not None
    return _OWN


class ClusterCollector(Collector):
    """Slots, queues and the cluster's counters, read when scraped.

    Costs O(pools + tenants): a few Redis reads and three grouped SQL
    aggregates; no job row is loaded, however long the queue.
    """

    def __init__(self, session: Session, client: redis.Redis, keys: RedisKeys) -> None:
        self.session, self.client, self.keys = session, client, keys

    def collect(self) -> Iterator[Metric]:
        adverts = Heartbeats(self.client, self.keys).alive_info()
        claims = Leases(self.client, self.keys).claimed_slots()
        alive = Tally(info.pool for info in adverts.values())
        busy = Tally(adverts[slot].pool for slot in set(claims.values()) if slot in adverts)
        recorded = self.session.execute(select(col(WorkerPool.name))).scalars().all()
        pools = sorted(set(alive) | set(recorded) | {DEFAULT_POOL})
        yield _gauge("slaq_slots_alive", "Worker slots with a live heartbeat, by pool",
                     "pool", {p: alive[p] for p in pools})
        yield _gauge("slaq_slots_busy",
                     "Live worker slots running a chunk (holding its lease claim), by pool",
                     "pool", {p: busy[p] for p in pools})
        now = utcnow()
        by_pool = self._queued_by_pool()
        for pool in [*pools, ANY_POOL]:
            by_pool.setdefault(pool, (0, None))
        yield _gauge("slaq_queue_jobs",
                     f"Queued jobs by the pool their requirements name ('{ANY_POOL}': none)",
                     "pool", {p: n for p, (n, _) in by_pool.items()})
        yield _gauge("slaq_queue_oldest_wait_seconds",
                     "How long the longest-waiting queued job has waited, by requirements' "
                     "pool (0: none queued)", "pool",
                     {p: _waited(now, t) for p, (_, t) in by_pool.items()})
        by_tenant = self._queued_by_tenant()
        yield _gauge("slaq_tenant_queue_jobs", "Queued jobs by tenant", "tenant",
                     {t: n for t, (n, _) in by_tenant.items()})
        yield _gauge("slaq_tenant_queue_oldest_wait_seconds",
                     "How long the tenant's longest-waiting queued job has waited "
                     "(0: none queued)", "tenant",
                     {t: _waited(now, at) for t, (_, at) in by_tenant.items()})
        yield from cluster_families(store.read(self.client, self.keys), pools)

    def _queued_by_tenant(self) -> dict[str, tuple[int, Any]]:
        # Every tenant, with 0 when none of its jobs waits: a series that
        # vanished would read as "no data", not as an empty queue.
        rows = self.session.execute(
            select(col(Tenant.name), func.count(col(Job.id)), func.min(col(Job.waiting_since)))
            .select_from(Tenant)
            .outerjoin(Job, (col(Job.tenant_id) == col(Tenant.id))
                       & (col(Job.status) == JobStatus.queued))
            .group_by(col(Tenant.id), col(Tenant.name))).all()
        return {str(name): (int(n), oldest) for name, n, oldest in rows}

    def _queued_by_pool(self) -> dict[str, tuple[int, Any]]:
        # Grouped in a subquery: a JSON path expression in both SELECT and
        # GROUP BY binds its path twice, which PostgreSQL would not match up.
        queued = (select(col(Job.requirements)["pool"].as_string().label("pool"),
                         col(Job.waiting_since).label("since"))
                  .where(col(Job.status) == JobStatus.queued).subquery())
        rows = self.session.execute(
            select(queued.c.pool, func.count(), func.min(queued.c.since))
            .group_by(queued.c.pool)).all()
        out: dict[str, tuple[int, Any]] = {}
        for pool, n, oldest in rows:
            name = str(pool) if pool else ANY_POOL
            count, since = out.get(name, (0, None))
            out[name] = (count + int(n), _earliest(since, oldest))
        return out


def _earliest(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return a if b is None else b
    return min(as_utc(a), as_utc(b))


def _waited(now: Any, since: Any) -> float:
    return 0.0 if since is None else max((now - as_utc(since)).total_seconds(), 0.0)


def _gauge(name: str, documentation: str, label: str,
           values: dict[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key in sorted(values):
        family.add_metric([key], values[key])
    return family


def cluster_families(figures: store.Figures, pools: list[str]) -> Iterator[Metric]:
    """The cluster's counters and histograms, summed over hosts."""
    zero = [(p,) for p in pools]
    yield store.counter_family(figures, store.CHUNKS_GRANTED, "slaq_chunks_granted",
                               "Chunks the scheduler dispatched, by pool", ["pool"], zero=zero)
    yield store.counter_family(figures, store.CHUNKS_RECLAIMED, "slaq_chunks_reclaimed",
                               "Lost chunks returned to the queue, by the pool they ran on",
                               ["pool"], zero=zero)
    yield store.counter_family(
        figures, store.CHUNKS_FAILED, "slaq_chunks_failed",
        "Chunks that failed their job (reason job_failed) or whose task raised (error)",
        ["pool", "reason"])
    yield store.counter_family(figures, store.GRANTS_REJECTED, "slaq_grants_rejected",
                               "Grants the scheduler's limits check dropped", zero=[()])
    yield store.histogram_family(
        figures, store.CHUNK_SECONDS, "slaq_chunk_duration_seconds",
        "Wall time of a stored chunk in its worker, lease claim to release, by pool",
        store.CHUNK_BUCKETS, ["pool"])
    yield store.histogram_family(
        figures, store.CHUNK_OVERHEAD, "slaq_chunk_overhead_seconds",
        "Chunk wall time less its training iterations' own seconds, by pool",
        store.OVERHEAD_BUCKETS, ["pool"])
    yield store.histogram_family(
        figures, store.DECISION_SECONDS, "slaq_decision_seconds",
        "Scheduling round start until its grants were dispatched (rounds that granted)",
        store.DECISION_BUCKETS)
    yield store.histogram_family(figures, store.ROUND_SECONDS, "slaq_round_seconds",
                                 "Duration of a scheduling round", store.DECISION_BUCKETS)


class _Scrape(Collector):
    """What one scrape exposes: the collectors, in order."""

    def __init__(self, *collectors: Collector) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            yield from collector.collect()


_NO_CREDENTIALS = HTTPException(
    status.HTTP_401_UNAUTHORIZED,
    "/metrics needs 'Authorization: Bearer <token>': a platform admin's API token, or "
    "the METRICS_TOKEN the portal was started with",
    headers={"WWW-Authenticate": "Bearer"})
_WRONG_TOKEN = HTTPException(
    status.HTTP_401_UNAUTHORIZED,
    "/metrics: this bearer token is neither the METRICS_TOKEN nor a valid API token",
    headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
_NOT_ADMIN = HTTPException(
    status.HTTP_403_FORBIDDEN,
    "/metrics shows every tenant's queue: only platform admins (or Prometheus with the "
    "METRICS_TOKEN) may read it")


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return (value.strip() or None) if scheme.lower() == "bearer" else None


def _metrics_token() -> str:
    try:
        return get_settings().effective_metrics_token
    except OSError as exc:
        # The error names the file, never its content.
        log.error("METRICS_TOKEN_FILE unreadable (%s); only platform admins may scrape",
                  type(exc).__name__)
        return ""


def same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison; digests first, so neither length leaks."""
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(),
                               hashlib.sha256(expected.encode()).digest())


def authorize(request: Request, session: Session) -> None:
    """Let Prometheus (METRICS_TOKEN) and platform admins in; 401 or 403 otherwise."""
    token = _bearer(request)
    expected = _metrics_token()
    if token is not None and expected and same_secret(token, expected):
        return
    if token is None and not request.cookies.get(SESSION_COOKIE):
        raise _NO_CREDENTIALS
    try:
        scope = lookup_caller(request, session)
    except HTTPException as refused:
        if refused.status_code == status.HTTP_401_UNAUTHORIZED and token is not None:
            raise _WRONG_TOKEN from None
        raise
    if not scope.is_platform_admin:
        raise _NOT_ADMIN


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request, session: SessionDep) -> Response:
    """The cluster's figures in Prometheus's text format (platform admins,
    or the METRICS_TOKEN bearer)."""
    authorize(request, session)
    try:
        body = generate_latest(_Scrape(ClusterCollector(session, get_redis(), get_keys()),
                                       _own_figures()))
    except redis.RedisError as exc:
        # Prometheus records the scrape as failed (up == 0): no half figures.
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"/metrics: Redis is unreachable ({type(exc).__name__})") from exc
    return Response(body, media_type=CONTENT_TYPE_LATEST)

