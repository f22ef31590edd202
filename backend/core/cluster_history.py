"""The cluster's recent history: what the scheduler saw, sampled each round.

The scheduler appends one sample per round, at most every
``SAMPLE_EVERY_SECONDS``, to a Redis sorted set scored by time; the cluster
page draws the last hour from it on load, so its charts do not start empty.
Samples hold aggregate numbers only (slots, queue length, decisions), never a
job or tenant name, so any signed-in user may read them.

Retention is bounded twice: by age (``KEEP_SECONDS``) and by count
(``KEEP_SAMPLES``, in case rounds are recorded faster than expected, e.g. by
two schedulers in a hand-over).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import redis

from backend.core.redis_keys import RedisKeys

log = logging.getLogger(__name__)

SAMPLE_EVERY_SECONDS = 2.0
KEEP_SECONDS = 2 * 3600
# Two hours at one sample every 2 s, with room for faster bursts.
KEEP_SAMPLES = 2 * int(KEEP_SECONDS / SAMPLE_EVERY_SECONDS)


@dataclass(frozen=True)
class ClusterSample:
    """One moment of the cluster; ``busy + free == total`` always."""

    at: float
    """Unix seconds."""
    total: int
    """Live worker slots."""
    busy: int
    """Slots running a chunk (at most ``total``)."""
    free: int
    queued: int
    """Jobs waiting for a slot."""
    running: int
    """Jobs holding a chunk lease (may briefly exceed ``total`` while a dead
    worker's leases are being reclaimed)."""
    granted: int
    """Chunks granted since the previous sample."""
    rejected: int
    """Grants dropped for breaking a hard limit since the previous sample."""
    reclaimed: int
    """Lost chunks returned to the queue since the previous sample."""

    @classmethod
    def of(cls, *, at: float, total: int, running: int, queued: int, granted: int = 0,
           rejected: int = 0, reclaimed: int = 0) -> ClusterSample:
        busy = min(max(running, 0), max(total, 0))
        return cls(at=at, total=max(total, 0), busy=busy, free=max(total, 0) - busy,
                   queued=max(queued, 0), running=max(running, 0), granted=granted,
                   rejected=rejected, reclaimed=reclaimed)


def append_sample(client: redis.Redis, keys: RedisKeys, sample: ClusterSample) -> None:
    """Store ``sample`` and trim the history by age and by count."""
    member = json.dumps(asdict(sample), separators=(",", ":"))
    pipe = client.pipeline()
    pipe.zadd(keys.cluster_history, {member: sample.at})
    pipe.zremrangebyscore(keys.cluster_history, "-inf", f"({sample.at - KEEP_SECONDS}")
    # Oldest first by score: keep only the newest KEEP_SAMPLES.
    pipe.zremrangebyrank(keys.cluster_history, 0, -(KEEP_SAMPLES + 1))
    pipe.execute()


def read_samples(client: redis.Redis, keys: RedisKeys, *, since: float,
                 until: float | None = None) -> list[ClusterSample]:
    """Samples taken after ``since`` (exclusive, Unix seconds), oldest first."""
    raw: Any = client.zrangebyscore(keys.cluster_history, f"({since}",
                                    "+inf" if until is None else until)
    out = []
    for member in raw:
        try:
            out.append(ClusterSample(**json.loads(member)))
        except (TypeError, ValueError):
            continue  # written by another version: skip rather than fail the page
    return out


class HistoryRecorder:
    """Counts decisions between samples and writes a sample at most every
    ``every`` seconds, so a scheduler woken many times a second still keeps
    an hour within the count bound."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, *,
                 every: float = SAMPLE_EVERY_SECONDS) -> None:
        self.client = client
        self.keys = keys
        self.every = every
        self._last = float("-inf")
        self._granted = 0
        self._rejected = 0
        self._reclaimed = 0

    def round_done(self, *, total: int, running: int, queued: Callable[[], int], granted: int,
                   rejected: int, reclaimed: int, now: float | None = None) -> bool:
        """Note one round; returns whether a sample was written. ``queued`` is
        only called when a sample is due (counting may cost a pass over the queue)."""
        self._granted += granted
        self._rejected += rejected
        self._reclaimed += reclaimed
        at = time.time() if now is None else now
        if at - self._last < self.every:
            return False
        sample = ClusterSample.of(at=at, total=total, running=running, queued=queued(),
                                  granted=self._granted, rejected=self._rejected,
                                  reclaimed=self._reclaimed)
        try:
            append_sample(self.client, self.keys, sample)
        except redis.RedisError as exc:
            log.warning("could not record cluster history: %s", exc)
            return False
        self._last = at
        self._granted = self._rejected = self._reclaimed = 0
        return True
