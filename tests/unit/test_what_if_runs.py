"""A what-if replay's process, against a real Redis and a real spawned process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from backend.core.redis_keys import RedisKeys
from backend.services import what_if_runs
from backend.services.what_if_runs import ReplayBusy, ReplayJob
from tests.bench.what_if import workload
from tests.utils.waiting import wait_until


@pytest.fixture
def store(redis_url: str, monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[tuple[redis.Redis, RedisKeys]]:
    monkeypatch.setenv("REDIS_URL", redis_url)  # the spawned process's Redis
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = RedisKeys(f"slaqtest-what-if-{uuid.uuid4().hex[:8]}")
    yield client, keys
    for key in client.scan_iter(f"{keys.prefix}:*"):
        client.delete(key)


def _ended(client: redis.Redis, keys: RedisKeys, run_id: str) -> dict[str, Any] | None:
    run = what_if_runs.read(client, keys, run_id)
    assert run is not None
    return None if run["state"] == "running" else run


def test_a_runaway_replay_is_stopped_and_frees_the_portal_for_the_next(
        store: tuple[redis.Redis, RedisKeys]) -> None:
    client, keys = store
    # Hundreds of jobs on two slots take slaq seconds; it may have a fifth of one.
    job = ReplayJob(workload(600, 2, seed=1), ["slaq"], slots=2, chunk_seconds=1.0,
                    max_seconds=0.2)
    run_id = what_if_runs.start(client, keys, job, started_by="ops@test")
    with pytest.raises(ReplayBusy, match="started by ops@test"):
        what_if_runs.start(client, keys, job, started_by="other@test")
    run = wait_until(lambda: _ended(client, keys, run_id), 120, "the replay to be stopped")
    assert run["state"] == "failed" and run["result"] is None
    assert "ran longer than 0.2 s" in run["error"]
    assert run["progress"]["jobs_finished"] < 600
    assert what_if_runs.latest(client, keys) == run
    # The lease went with it: the next replay starts and finishes.
    quick = ReplayJob(workload(20, 2, seed=2), ["fair"], slots=2, chunk_seconds=1.0)
    next_id = what_if_runs.start(client, keys, quick, started_by="other@test")
    done = wait_until(lambda: _ended(client, keys, next_id), 120, "the next replay")
    assert done["state"] == "done", done["error"]
    assert [r["label"] for r in done["result"]["runs"]] == ["as run", "fair"]
    assert done["progress"] == {"policy": "fair", "jobs_finished": 20}
