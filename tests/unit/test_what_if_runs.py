"""A what-if replay's process, against a real Redis and a real spawned process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis

from backend.core.db import engine_for, migrate, session_scope
from backend.core.models import Job, JobStatus, LossRecord, Role, utcnow
from backend.core.redis_keys import RedisKeys
from backend.seed import ensure_tenant, ensure_user
from backend.services import what_if_runs
from backend.services.what_if import NO_COMPLETED_JOB
from backend.services.what_if_runs import ReplayBusy, ReplayJob, Window
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


def test_the_replaying_process_reads_the_window_from_the_database(
        store: tuple[redis.Redis, RedisKeys], db_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    client, keys = store
    migrate(db_url)
    monkeypatch.setenv("DATABASE_URL", db_url)
    # A job that completed with a single loss point: counted in the window,
    # but no curve to replay, which only reading its points tells.
    with session_scope(engine_for(db_url)) as session:
        tenant = ensure_tenant(session, "a")
        user, _ = ensure_user(session, email="u@a.test", password="pw-u@a.test", tenant=tenant,
                              role=Role.member)
        job = Job(tenant_id=tenant.id or 0, user_id=user.id or 0, algorithm="mlp",
                  dataset="digits", max_iterations=10, status=JobStatus.completed,
                  iterations_done=1, finished_at=utcnow())
        session.add(job)
        session.commit()
        session.add(LossRecord(job_id=job.id or 0, iteration=1, loss=1.0, seconds=0.1))
        session.commit()
    now = utcnow()
    window = Window(now - timedelta(hours=1), now + timedelta(seconds=1), jobs=1)
    run_id = what_if_runs.start(client, keys, ReplayJob(window, ["fair"], slots=2,
                                                        chunk_seconds=1.0), started_by="o@t")
    run = wait_until(lambda: _ended(client, keys, run_id), 120, "the replay to end")
    assert run["state"] == "failed" and run["error"] == NO_COMPLETED_JOB
    assert run["jobs"] == 0  # what it read, in place of the window's count
