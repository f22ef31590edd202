"""The cluster's Prometheus counters and histograms, kept in one Redis hash.

Chunks are granted by one scheduler process (any standby may take over) and
run in Celery prefork children on any number of hosts, while ``/metrics`` is
served by whichever of several API processes a scrape reaches. A
prometheus-client registry in each process would give every process figures
of its own, so the figures all of them must agree on (chunks granted,
reclaimed and failed, chunk duration and overhead, decision time) are added
to the hash :attr:`RedisKeys.metrics` by the processes that see the events,
and turned into metric families at scrape time by custom collectors
(:mod:`backend.api.metrics`, :mod:`workers.metrics`).

Writers batch a chunk's or a round's increments and apply them in one
MULTI/EXEC, so a histogram's bucket, sum and count move together and a
reader (one HGETALL) never sees half an observation. A bucket field counts
the observations that fell in that bucket alone (the smallest bound at least
the value, or ``+Inf``); readers add them up into Prometheus's cumulative
buckets. Labels are stored as written; a reader keeps the ones it exposes and
sums over the rest (the API sums workers' ``host`` away, a worker's own
endpoint keeps only its host's series).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from backend.core.redis_keys import RedisKeys

log = logging.getLogger(__name__)

# Names in the hash; each endpoint exposes them under a prefix of its own.
CHUNKS_GRANTED = "chunks_granted"
"""Counter {pool}: chunks the scheduler dispatched."""
CHUNKS_RECLAIMED = "chunks_reclaimed"
"""Counter {pool}: chunks the scheduler returned to the queue (lease lost, worker dead)."""
GRANTS_REJECTED = "grants_rejected"
"""Counter: grants the limits check dropped (a policy asking past a quota or the slots)."""
CHUNKS_FINISHED = "chunks"
"""Counter {pool, host, outcome}: chunks a worker slot finished (ran, failed, discarded)."""
CHUNKS_FAILED = "chunks_failed"
"""Counter {pool, host, reason}: ``job_failed`` (the chunk ran and failed its job:
training error, divergence, trainer could not start) or ``error`` (the task raised)."""
CHUNK_SECONDS = "chunk_duration_seconds"
"""Histogram {pool, host}: a stored chunk's wall time in the worker, lease claim to release."""
CHUNK_OVERHEAD = "chunk_overhead_seconds"
"""Histogram {pool, host}: that wall time less the training iterations' own seconds."""
DECISION_SECONDS = "decision_seconds"
"""Histogram: round start until its grants were dispatched, for rounds that granted."""
ROUND_SECONDS = "round_seconds"
"""Histogram: a whole scheduling round."""

CHUNK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
OVERHEAD_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0)

_SUM, _COUNT, _TOTAL, _BUCKET = "sum", "count", "total", "b:"

Labels = tuple[tuple[str, str], ...]
"""A series' labels, sorted by name."""


def _field(name: str, labels: Mapping[str, str], suffix: str) -> str:
    encoded = json.dumps({k: str(v) for k, v in labels.items()}, sort_keys=True,
                         separators=(",", ":"))
    return f"{name}|{encoded}|{suffix}"


def bucket_of(value: float, buckets: Sequence[float]) -> float:
    """The upper bound of the bucket ``value`` falls in (``inf`` past the last)."""
    for bound in buckets:
        if value <= bound:
            return float(bound)
    return math.inf


class Batch:
    """Increments to the hash, applied together by :func:`push`."""

    def __init__(self) -> None:
        self.ints: dict[str, int] = {}
        self.floats: dict[str, float] = {}

    def __bool__(self) -> bool:
        return bool(self.ints or self.floats)

    def inc(self, name: str, labels: Mapping[str, str] | None = None, amount: int = 1) -> Batch:
        key = _field(name, labels or {}, _TOTAL)
        self.ints[key] = self.ints.get(key, 0) + amount
        return self

    def observe(self, name: str, labels: Mapping[str, str] | None, value: float,
                buckets: Sequence[float]) -> Batch:
        labels = labels or {}
        if not math.isfinite(value):
            return self
        bound = _field(name, labels, _BUCKET + repr(bucket_of(value, buckets)))
        self.ints[bound] = self.ints.get(bound, 0) + 1
        count = _field(name, labels, _COUNT)
        self.ints[count] = self.ints.get(count, 0) + 1
        total = _field(name, labels, _SUM)
        self.floats[total] = self.floats.get(total, 0.0) + value
        return self


def push(client: redis.Redis, keys: RedisKeys, batch: Batch) -> bool:
    """Apply ``batch`` in one MULTI/EXEC; False (logged) when Redis is
    unreachable: losing a figure must never fail a chunk or a round."""
    if not batch:
        return True
    try:
        pipe = client.pipeline(transaction=True)
        for name, amount in batch.ints.items():
            pipe.hincrby(keys.metrics, name, amount)
        for name, value in batch.floats.items():
            pipe.hincrbyfloat(keys.metrics, name, value)
        pipe.execute()
        return True
    except redis.RedisError as exc:
        log.warning("could not record metrics: %s", exc)
        return False


@dataclass
class HistogramData:
    buckets: dict[float, float] = field(default_factory=dict)
    """Upper bound -> observations in that bucket alone (not cumulative)."""
    sum: float = 0.0

    def add(self, other: HistogramData) -> None:
        for bound, count in other.buckets.items():
            self.buckets[bound] = self.buckets.get(bound, 0.0) + count
        self.sum += other.sum

    @property
    def count(self) -> float:
        return sum(self.buckets.values())

    def cumulative(self, bounds: Sequence[float]) -> list[tuple[str, float]]:
        """Prometheus buckets over ``bounds`` (stored bounds not among them,
        from an older bucket layout, count in every bucket above them)."""
        out = []
        for bound in [*sorted(float(b) for b in bounds if math.isfinite(b)), math.inf]:
            out.append((floatToGoString(bound),
                        sum(n for b, n in self.buckets.items() if b <= bound)))
        return out


@dataclass
class Figures:
    """One read of the hash."""

    counters: dict[tuple[str, Labels], float] = field(default_factory=dict)
    histograms: dict[tuple[str, Labels], HistogramData] = field(default_factory=dict)

    def counter(self, name: str, keep: Sequence[str] = (),
                where: Mapping[str, str] | None = None) -> dict[tuple[str, ...], float]:
        """Totals of counter ``name`` per values of the ``keep`` labels, over
        the series whose labels match ``where``; other labels are summed over."""
        out: dict[tuple[str, ...], float] = {}
        for labels, value in self._series(self.counters, name, where):
            key = _values(labels, keep)
            out[key] = out.get(key, 0.0) + value
        return out

    def histogram(self, name: str, keep: Sequence[str] = (),
                  where: Mapping[str, str] | None = None) -> dict[tuple[str, ...], HistogramData]:
        out: dict[tuple[str, ...], HistogramData] = {}
        for labels, data in self._series(self.histograms, name, where):
            out.setdefault(_values(labels, keep), HistogramData()).add(data)
        return out

    @staticmethod
    def _series(table: Mapping[tuple[str, Labels], Any], name: str,
                where: Mapping[str, str] | None) -> Iterator[tuple[Labels, Any]]:
        for (series, labels), value in table.items():
            if series != name:
                continue
            found = dict(labels)
            if where and any(found.get(k) != v for k, v in where.items()):
                continue
            yield labels, value


def _values(labels: Labels, keep: Sequence[str]) -> tuple[str, ...]:
    found = dict(labels)
    return tuple(found.get(name, "") for name in keep)


def parse(raw: Mapping[Any, Any]) -> Figures:
    """Figures from the hash's fields; a field that does not parse is skipped."""
    figures = Figures()
    for key, value in raw.items():
        text = key.decode() if isinstance(key, bytes) else str(key)
        name, _, rest = text.partition("|")
        encoded, _, suffix = rest.rpartition("|")
        try:
            labels: Labels = tuple(sorted((str(k), str(v))
                                          for k, v in json.loads(encoded).items()))
            number = float(value)
        except (ValueError, AttributeError, TypeError):
            continue
        if suffix == _TOTAL:
            figures.counters[(name, labels)] = number
            continue
        data = figures.histograms.setdefault((name, labels), HistogramData())
        if suffix == _SUM:
            data.sum = number
        elif suffix.startswith(_BUCKET):
            try:
                data.buckets[float(suffix[len(_BUCKET):])] = number
            except ValueError:
                continue
        # _COUNT is the sum of the buckets, kept for readers of the raw hash.
    return figures


def read(client: redis.Redis, keys: RedisKeys) -> Figures:
    raw: Any = client.hgetall(keys.metrics)
    return parse(raw)


def counter_family(figures: Figures, name: str, exposed: str, documentation: str,
                   labels: Sequence[str] = (), where: Mapping[str, str] | None = None,
                   zero: Iterable[tuple[str, ...]] = ()) -> CounterMetricFamily:
    """Counter ``exposed`` (``_total`` added) from the stored counter ``name``;
    ``zero`` lists label values shown as 0 before their first event."""
    family = CounterMetricFamily(exposed, documentation, labels=list(labels))
    totals = {key: 0.0 for key in zero}
    totals.update(figures.counter(name, labels, where))
    for key in sorted(totals):
        family.add_metric(list(key), totals[key])
    return family


def histogram_family(figures: Figures, name: str, exposed: str, documentation: str,
                     buckets: Sequence[float], labels: Sequence[str] = (),
                     where: Mapping[str, str] | None = None) -> HistogramMetricFamily:
    family = HistogramMetricFamily(exposed, documentation, labels=list(labels))
    found = figures.histogram(name, labels, where)
    if not found and not labels:
        found = {(): HistogramData()}
    for key in sorted(found):
        data = found[key]
        family.add_metric(list(key), data.cumulative(buckets), data.sum)
    return family


def serve_endpoint(registry: CollectorRegistry, port: int, host: str, what: str) -> bool:
    """Serve ``registry`` on ``host:port`` from a thread; False (logged) if off
    (port 0) or the port is taken: the process runs on without its endpoint
    rather than not at all."""
    if port <= 0:
        return False
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.error("%s metrics endpoint not started on %s:%d: %s", what, host, port, exc)
        return False
    log.info("%s metrics on http://%s:%d/metrics", what, host, port)
    return True
