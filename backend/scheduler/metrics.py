"""The scheduler's Prometheus figures: its own, and its share of the cluster's.

Its own registry is served on ``SCHEDULER_METRICS_PORT`` (0: off) by
:func:`serve`: round duration, decision time, grants, reclaims and rejected
grants, counted by this process since it started, and
``slaq_scheduler_active`` (1 while it holds the scheduler lock; a standby
shows 0 and counts nothing). The same events are added to the cluster's
figures in Redis (:mod:`backend.core.metrics_store`), which the API's
``/metrics`` exposes, so those keep counting across restarts and failovers.

The service calls :func:`observe_round` and :func:`observe_reclaimed`, one
line each; nothing here may fail a round (Redis errors are logged).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from sqlalchemy import select
from sqlmodel import Session, col

from backend.core import metrics_store as store
from backend.core.models import Job
from backend.core.pools import DEFAULT_POOL
from backend.core.redis_keys import RedisKeys
from backend.scheduling.types import Grant

log = logging.getLogger(__name__)

# Counters' and histograms' *_created series only add noise to every scrape.
disable_created_metrics()

REGISTRY = CollectorRegistry()
"""This process's figures (not the default registry: nothing else lands here)."""
ROUND_SECONDS = Histogram("slaq_scheduler_round_seconds", "Duration of a scheduling round",
                          buckets=store.DECISION_BUCKETS, registry=REGISTRY)
DECISION_SECONDS = Histogram(
    "slaq_scheduler_decision_seconds",
    "From a round's start until its grants were dispatched (rounds that granted)",
    buckets=store.DECISION_BUCKETS, registry=REGISTRY)
GRANTS = Counter("slaq_scheduler_grants", "Chunks dispatched, by worker pool", ["pool"],
                 registry=REGISTRY)
RECLAIMS = Counter("slaq_scheduler_reclaims",
                   "Lost chunks returned to the queue, by the pool they were lost on",
                   ["pool"], registry=REGISTRY)
REJECTIONS = Counter("slaq_scheduler_rejections",
                     "Grants the limits check dropped (a policy bug guarded against)",
                     registry=REGISTRY)
ACTIVE = Gauge("slaq_scheduler_active",
               "1 while this process holds the scheduler lock and grants; 0 on standby",
               registry=REGISTRY)
ProcessCollector(registry=REGISTRY)


def observe_round(client: redis.Redis, keys: RedisKeys, began: float, granted_ms: float,
                  granted: Sequence[Grant], rejected: Sequence[Any]) -> None:
    """A round that started at ``began`` (``time.perf_counter()``) ends now;
    its grants were dispatched ``granted_ms`` after it started."""
    round_s = time.perf_counter() - began
    batch = store.Batch().observe(store.ROUND_SECONDS, None, round_s, store.DECISION_BUCKETS)
    ROUND_SECONDS.observe(round_s)
    if granted:
        DECISION_SECONDS.observe(granted_ms / 1000)
        batch.observe(store.DECISION_SECONDS, None, granted_ms / 1000, store.DECISION_BUCKETS)
    for grant in granted:
        pool = grant.pool or DEFAULT_POOL
        GRANTS.labels(pool=pool).inc()
        batch.inc(store.CHUNKS_GRANTED, {"pool": pool})
    if rejected:
        REJECTIONS.inc(len(rejected))
        batch.inc(store.GRANTS_REJECTED, None, len(rejected))
    store.push(client, keys, batch)


def observe_reclaimed(client: redis.Redis, keys: RedisKeys, session: Session,
                      job_ids: Sequence[int]) -> None:
    """Count chunks returned to the queue, by the pool the job's chunk ran on
    (one small query, only in the rare rounds that reclaim)."""
    if not job_ids:
        return
    pools = dict(session.execute(select(col(Job.id), col(Job.pool))
                                 .where(col(Job.id).in_(list(job_ids)))).all())
    batch = store.Batch()
    for job_id in job_ids:
        pool = pools.get(job_id) or DEFAULT_POOL
        RECLAIMS.labels(pool=pool).inc()
        batch.inc(store.CHUNKS_RECLAIMED, {"pool": pool})
    store.push(client, keys, batch)


def serve(port: int, host: str, active: Callable[[], bool]) -> bool:
    """Serve :data:`REGISTRY` on ``host:port`` from a thread; ``active`` says
    whether this process holds the lock. False (logged) if the port is taken:
    a scheduler runs on without its endpoint rather than not at all."""
    ACTIVE.set_function(lambda: 1.0 if active() else 0.0)
    return store.serve_endpoint(REGISTRY, port, host, "scheduler")
