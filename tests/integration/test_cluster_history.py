"""The scheduler records the cluster's recent history in Redis, bounded by
age and count; GET /api/v1/cluster/history serves it, aggregates only."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis

from backend.core.cluster_history import (
    KEEP_SAMPLES,
    KEEP_SECONDS,
    ClusterSample,
    HistoryRecorder,
    append_sample,
    read_samples,
)
from backend.core.redis_keys import RedisKeys
from tests.integration.test_end_to_end import submit, wait_finished
from tests.utils.portal import Portal, make_user_token
from tests.utils.waiting import wait_until


@pytest.fixture
def api(portal: Portal) -> Iterator[httpx.Client]:
    token = make_user_token(portal.db_url, tenant="watchers", email="wanda@watchers.test")
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def test_history_route_serves_recorded_rounds(portal: Portal, api: httpx.Client) -> None:
    other = make_user_token(portal.db_url, tenant="secretive", email="sam@secretive.test")
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {other}"}) as them:
        # Long enough to span several samples (one every 2 s at most): a job
        # done within one sampling period may never be seen running.
        hidden = submit(them, algorithm="kmeans", dataset="iris", params={"n_clusters": 3},
                        name="codename-bluebird",
                        stopping={"max_iterations": 30_000, "tolerance": None})
        started = time.time()

        def busy_recorded() -> list[dict[str, float]] | None:
            got = api.get("/api/v1/cluster/history", params={"minutes": 5}).json()["samples"]
            return got if any(s["busy"] >= 1 and s["at"] >= started for s in got) else None

        samples = wait_until(busy_recorded, 60, "a recorded round with a busy slot")
        wait_finished(them, hidden["id"], timeout=180)
    assert [s["at"] for s in samples] == sorted(s["at"] for s in samples)
    for s in samples:
        assert s["busy"] + s["free"] == s["total"], s
    assert max(s["total"] for s in samples) == 2, "the portal has two worker slots"
    assert sum(s["granted"] for s in samples) >= 1
    # Aggregates only: another tenant's job name never leaves the server.
    raw = api.get("/api/v1/cluster/history").text
    assert "codename-bluebird" not in raw and "secretive" not in raw
    # "since" returns only what the page does not have yet.
    last = samples[-1]["at"]
    newer = api.get("/api/v1/cluster/history", params={"since": last}).json()["samples"]
    assert all(s["at"] > last for s in newer)
    assert api.get("/api/v1/cluster/history").status_code == 200
    assert api.get("/api/v1/cluster/history", params={"minutes": 0}).status_code == 422
    assert api.get("/api/v1/cluster/history", params={"minutes": 100_000}).status_code == 422
    assert httpx.get(f"{portal.base_url}/api/v1/cluster/history").status_code == 401


@pytest.fixture
def keys(redis_url: str) -> Iterator[tuple[redis.Redis, RedisKeys]]:
    client = redis.Redis.from_url(redis_url)
    keys = RedisKeys(prefix=f"history-test-{uuid.uuid4().hex[:8]}")
    try:
        yield client, keys
    finally:
        client.delete(keys.cluster_history)
        client.close()


def test_retention_is_bounded_by_age_and_count(
        keys: tuple[redis.Redis, RedisKeys]) -> None:
    client, k = keys
    now = time.time()
    old = ClusterSample.of(at=now - KEEP_SECONDS - 60, total=2, running=1, queued=3)
    kept = ClusterSample.of(at=now - KEEP_SECONDS + 60, total=2, running=2, queued=1)
    append_sample(client, k, old)
    append_sample(client, k, kept)
    append_sample(client, k, ClusterSample.of(at=now, total=2, running=0, queued=0))
    assert [s.at for s in read_samples(client, k, since=0)] == [kept.at, now], \
        "samples older than the retention are trimmed"
    # Faster than expected (a burst of rounds): the count bound holds.
    pipe = client.pipeline()
    start = now - 1000
    for i in range(KEEP_SAMPLES + 25):
        sample = ClusterSample.of(at=start + i * 0.1, total=1, running=1, queued=i)
        pipe.zadd(k.cluster_history, {json.dumps(sample.__dict__): sample.at})
    pipe.execute()
    append_sample(client, k, ClusterSample.of(at=now + 1, total=1, running=0, queued=0))
    assert client.zcard(k.cluster_history) == KEEP_SAMPLES
    newest = read_samples(client, k, since=now)
    assert [s.at for s in newest] == [now + 1]


def test_recorder_keeps_an_hour_and_counts_decisions_between_samples(
        keys: tuple[redis.Redis, RedisKeys]) -> None:
    client, k = keys
    recorder = HistoryRecorder(client, k, every=2.0)
    base = time.time() - 3600
    # A round every half second for an hour.
    written = sum(recorder.round_done(total=4, running=5, queued=lambda: 7, granted=1,
                                      rejected=0, reclaimed=0, now=base + i * 0.5)
                  for i in range(7200))
    samples = read_samples(client, k, since=0)
    assert written == len(samples) == 1800
    assert samples[-1].at - samples[0].at >= 3600 - 2.5, "an hour is kept"
    assert all(s.busy == 4 and s.free == 0 and s.running == 5 for s in samples), \
        "busy never exceeds the live slots"
    assert samples[1].granted == 4, "four rounds' grants between two samples"
