"""Workers' Prometheus figures: chunk duration, overhead, outcomes, failures.

Chunks run in Celery prefork children, which come and go; their figures are
pushed to Redis rather than kept in memory (no multiprocess directory to
create, clean and share): each child adds a chunk's figures to the cluster's
hash (:mod:`backend.core.metrics_store`, one MULTI/EXEC per chunk) labelled
with its host and pool. The API's ``/metrics`` sums them over hosts; a
worker's main process serves ``WORKER_METRICS_PORT`` (0: off) with the series
of its own host and pool, read back from Redis at scrape time
(:class:`HostCollector`), plus its host's live slots in the pool.

* duration: a stored chunk's wall time in the worker, from the lease claim to
  the lease release (restore, training, checkpoint, commit, notify); the
  Celery queue wait before it is not included;
* overhead: that duration less the seconds the training iterations
  themselves took (what the chunk cost beyond training);
* failed: ``job_failed`` when the chunk ran and failed its job (training
  error, divergence, the trainer could not start), ``error`` when the task
  raised (database or Redis down, commit retries exhausted).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator, Sequence
from functools import lru_cache

import redis
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from backend.core import metrics_store as store
from backend.core.leases import Heartbeats
from backend.core.redis_conn import get_keys, get_redis
from backend.core.redis_keys import RedisKeys
from backend.core.settings import get_settings

log = logging.getLogger(__name__)

PREFIX = "slaq_worker_"

Point = tuple[int, float, float]


@lru_cache(maxsize=1)
def _host() -> str:
    return socket.gethostname()


def _labels() -> dict[str, str]:
    return {"pool": get_settings().worker_pool, "host": _host()}


def observe_chunk(client: redis.Redis, keys: RedisKeys, began: float,
                  points: Sequence[Point]) -> None:
    """A chunk whose run started at ``began`` (``time.perf_counter()``) has
    been stored; ``points`` are its (iteration, loss, seconds)."""
    wall = time.perf_counter() - began
    training = sum(p[2] for p in points)
    labels = _labels()
    store.push(client, keys, store.Batch()
               .observe(store.CHUNK_SECONDS, labels, wall, store.CHUNK_BUCKETS)
               .observe(store.CHUNK_OVERHEAD, labels, max(wall - training, 0.0),
                        store.OVERHEAD_BUCKETS))


def count_outcome(client: redis.Redis, keys: RedisKeys, outcome: str) -> None:
    """A delivered chunk ended as ``outcome`` (ran, failed, discarded)."""
    labels = _labels()
    batch = store.Batch().inc(store.CHUNKS_FINISHED, {**labels, "outcome": outcome})
    if outcome == "failed":
        batch.inc(store.CHUNKS_FAILED, {**labels, "reason": "job_failed"})
    store.push(client, keys, batch)


def count_error(client: redis.Redis, keys: RedisKeys) -> None:
    """The chunk task raised (its lease lapses and the chunk is reclaimed)."""
    labels = _labels()
    store.push(client, keys, store.Batch()
               .inc(store.CHUNKS_FINISHED, {**labels, "outcome": "error"})
               .inc(store.CHUNKS_FAILED, {**labels, "reason": "error"}))


class HostCollector(Collector):
    """One host's and pool's worker figures, read from Redis at scrape time."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, host: str, pool: str) -> None:
        self.client, self.keys, self.host, self.pool = client, keys, host, pool

    def collect(self) -> Iterator[Metric]:
        where = {"host": self.host, "pool": self.pool}
        figures = store.read(self.client, self.keys)
        labels = ("pool", "host")
        yield store.histogram_family(
            figures, store.CHUNK_SECONDS, PREFIX + store.CHUNK_SECONDS,
            "Wall time of a stored chunk in this host's worker slots", store.CHUNK_BUCKETS,
            labels, where)
        yield store.histogram_family(
            figures, store.CHUNK_OVERHEAD, PREFIX + store.CHUNK_OVERHEAD,
            "Chunk wall time less its training iterations' seconds", store.OVERHEAD_BUCKETS,
            labels, where)
        yield store.counter_family(
            figures, store.CHUNKS_FINISHED, PREFIX + store.CHUNKS_FINISHED,
            "Chunks this host's slots finished, by outcome", (*labels, "outcome"), where)
        yield store.counter_family(
            figures, store.CHUNKS_FAILED, PREFIX + store.CHUNKS_FAILED,
            "Chunks that failed their job (job_failed) or raised (error)",
            (*labels, "reason"), where)
        slots = GaugeMetricFamily(PREFIX + "slots_alive",
                                  "This host's worker slots in the pool with a live heartbeat",
                                  labels=list(labels))
        alive = Heartbeats(self.client, self.keys).alive_info().values()
        slots.add_metric([self.pool, self.host],
                         sum(1 for info in alive
                             if info.host == self.host and info.pool == self.pool))
        yield slots


def serve(port: int, host: str) -> bool:
    """Serve this host's and pool's figures on ``host:port`` from a thread of
    the Celery main process; False (logged) if off or the port is taken."""
    if port <= 0:
        return False
    registry = CollectorRegistry()
    registry.register(HostCollector(get_redis(), get_keys(), _host(),
                                    get_settings().worker_pool))
    return store.serve_endpoint(registry, port, host, "worker")
