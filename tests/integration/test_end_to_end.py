"""Jobs submitted over HTTP train to completion on real Celery workers."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from sqlalchemy import select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.leases import Leases
from backend.core.models import LossRecord
from backend.core.settings import get_settings
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

FINISHED = {"completed", "failed", "cancelled"}


def submit(api: httpx.Client, **spec: Any) -> dict[str, Any]:
    resp = api.post("/api/v1/jobs", json=spec)
    assert resp.status_code == 201, resp.text
    return resp.json()


def wait_finished(api: httpx.Client, job_id: int, timeout: float = 120) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        job = api.get(f"/api/v1/jobs/{job_id}").json()
        return job if job["status"] in FINISHED else None

    return wait_until(probe, timeout, f"job {job_id} to finish")


def stored_points(db_url: str, job_id: int) -> list[tuple[int, float]]:
    with session_scope(engine_for(db_url)) as session:
        rows = session.execute(
            select(col(LossRecord.iteration), col(LossRecord.loss))
            .where(col(LossRecord.job_id) == job_id)
            .order_by(col(LossRecord.iteration))
        ).all()
    return [(int(i), float(loss)) for i, loss in rows]


def stored_iterations(db_url: str, job_id: int) -> list[int]:
    return [i for i, _ in stored_points(db_url, job_id)]


def wait_scheduler_rounds(portal: Portal, rounds: int = 2) -> None:
    """Wait until ``rounds`` scheduler rounds have ended since now.

    A round publishes its status after taking its grants' leases, and rounds
    run one after another, so with two the second one saw the jobs as they
    are now and any grant decided from an older view already holds its lease.
    """
    client = portal.redis()

    def published() -> float:
        raw = client.hget(portal.keys.scheduler_status, "at")
        return float(json.loads(raw)) if raw else 0.0

    mark = time.time()
    for _ in range(rounds):
        since = mark

        def newer(since: float = since) -> float | None:
            at = published()
            return at if at > since else None

        mark = wait_until(newer, 30, "a scheduler round")


def wait_no_chunk_in_flight(portal: Portal, job_id: int) -> None:
    """Wait until no chunk of ``job_id`` can still write: every grant already
    decided has been dispatched and the last chunk released its lease."""
    wait_scheduler_rounds(portal)
    leases = Leases(portal.redis(), portal.keys)
    wait_until(lambda: leases.holder(job_id) is None, 60, f"job {job_id}'s chunk to finish")


def test_three_algorithms_train_to_completion(portal: Portal, api: httpx.Client) -> None:
    specs = [
        {"algorithm": "logistic_regression", "dataset": "breast_cancer",
         "stopping": {"max_iterations": 150, "tolerance": None}},
        {"algorithm": "kmeans", "dataset": "blobs", "params": {"n_clusters": 4, "init": "random"},
         "stopping": {"max_iterations": 150, "tolerance": None}},
        {"algorithm": "mlp", "dataset": "iris", "params": {"hidden_units": 16},
         "stopping": {"max_iterations": 150, "tolerance": None}},
    ]
    jobs = [submit(api, **spec) for spec in specs]
    for job in jobs:
        done = wait_finished(api, job["id"])
        assert done["status"] == "completed", done
        assert done["iterations_done"] == 150
        assert done["progress"] == 1.0
        iterations = stored_iterations(portal.db_url, job["id"])
        assert iterations == list(range(1, 151)), "iterations must be contiguous and unique"
        history = api.get(f"/api/v1/jobs/{job['id']}/losses").json()
        losses = history["losses"]
        assert len(losses) == 150
        # k-means starts from a seeding already near a good optimum; the others
        # start from zero or random weights and must fall well below their start.
        factor = 1.0 if job["algorithm"] == "kmeans" else 0.8
        assert losses[-1] < factor * losses[0], f"{job['algorithm']} loss did not decrease"
        assert done["best_loss"] <= min(losses) + 1e-12
        # The work really was split into chunks granted by the scheduler.
        decisions = api.get(f"/api/v1/jobs/{job['id']}/decisions").json()
        assert len(decisions) >= 2
        assert all(d["policy"] == "fair" for d in decisions)


def test_convergence_and_target_stop_early(api: httpx.Client) -> None:
    converge = submit(api, algorithm="kmeans", dataset="iris", params={"n_clusters": 3},
                      stopping={"max_iterations": 5000, "tolerance": 1e-3, "window": 5})
    target = submit(api, algorithm="linear_regression", dataset="diabetes",
                    stopping={"max_iterations": 5000, "target_loss": 0.4, "tolerance": None})
    conv = wait_finished(api, converge["id"])
    assert conv["status"] == "completed"
    assert conv["iterations_done"] < 5000
    assert "converged" in conv["end_reason"]
    hit = wait_finished(api, target["id"])
    assert hit["status"] == "completed"
    assert hit["current_loss"] <= 0.4
    assert "target" in hit["end_reason"]


def test_divergent_job_fails_alone(portal: Portal, api: httpx.Client) -> None:
    bad = submit(api, algorithm="linear_regression", dataset="diabetes",
                 params={"learning_rate": 10.0, "momentum": 0.99},
                 stopping={"max_iterations": 3000, "tolerance": None})
    good = submit(api, algorithm="logistic_regression", dataset="iris",
                  stopping={"max_iterations": 100, "tolerance": None})
    failed = wait_finished(api, bad["id"])
    assert failed["status"] == "failed"
    assert failed["error"] and ("diverged" in failed["error"] or "nan" in failed["error"].lower()
                                or "inf" in failed["error"])
    ok = wait_finished(api, good["id"])
    assert ok["status"] == "completed"
    assert stored_iterations(portal.db_url, good["id"]) == list(range(1, 101))


def test_pause_resume_cancel(portal: Portal, api: httpx.Client) -> None:
    job = submit(api, algorithm="mlp", dataset="digits",
                 stopping={"max_iterations": 100000, "tolerance": None})
    url = f"/api/v1/jobs/{job['id']}"
    wait_until(lambda: api.get(url).json()["iterations_done"] > 0, 60, "first chunk")
    paused = api.post(f"{url}/pause")
    assert paused.status_code == 200 and paused.json()["status"] == "paused"
    # A chunk in flight may still report; after that the count must stand still.
    wait_no_chunk_in_flight(portal, job["id"])
    before = api.get(url).json()["iterations_done"]
    wait_scheduler_rounds(portal)
    after = api.get(url).json()
    assert after["status"] == "paused" and after["iterations_done"] == before
    assert Leases(portal.redis(), portal.keys).holder(job["id"]) is None, "paused job was granted"
    assert stored_iterations(portal.db_url, job["id"]) == list(range(1, before + 1))
    assert api.post(f"{url}/pause").status_code == 409
    resumed = api.post(f"{url}/resume")
    assert resumed.json()["status"] == "queued"
    wait_until(lambda: api.get(url).json()["iterations_done"] > before,
               60, "progress after resume")
    cancelled = api.post(f"{url}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    wait_no_chunk_in_flight(portal, job["id"])
    final = api.get(url).json()
    assert final["status"] == "cancelled"
    assert api.post(f"{url}/resume").status_code == 409
    points = stored_points(portal.db_url, job["id"])
    done = final["iterations_done"]
    assert done > before
    assert [i for i, _ in points] == list(range(1, done + 1)), \
        "iterations must be contiguous and unique across pause and resume"
    # Training is deterministic from a checkpoint: pausing must not change a
    # single loss. The twin runs on the same workers, not in this process:
    # BLAS threading here may differ (it follows import order) and that moves
    # an MLP's losses in the last bit.
    twin = submit(api, algorithm=final["algorithm"], dataset=final["dataset"],
                  params=final["params"], dataset_params=final["dataset_params"],
                  seed=final["seed"], stopping={"max_iterations": done, "tolerance": None})
    assert wait_finished(api, twin["id"])["status"] == "completed"
    twin_points = stored_points(portal.db_url, twin["id"])
    assert [i for i, _ in twin_points] == [i for i, _ in points]
    # Equal to the last bits of a double: a restored array may sit at another
    # memory alignment, which can change the order of a SIMD reduction and so
    # the final rounding (seen: one ulp after a chunk boundary). A real resume
    # bug (a lost optimizer state, a reset RNG) moves losses by far more.
    mismatched = [(i, a, b) for (i, a), (_, b) in zip(points, twin_points, strict=True)
                  if not math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)]
    assert not mismatched, mismatched[:5]


def _autogroup_nice(pid: int) -> int:
    # "/autogroup-123 nice 10"
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def test_training_yields_the_cpu_to_the_api(portal: Portal) -> None:
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("this kernel has no autogroup scheduling")
    api, workers = portal.procs["api"].pid, portal.procs["workers"].pid
    # Each runs in its own session, so only the group's niceness ranks them.
    assert os.getsid(api) != os.getsid(workers)
    assert _autogroup_nice(workers) == get_settings().worker_nice > _autogroup_nice(api)


def test_sigkilled_worker_loses_nothing(portal: Portal, api: httpx.Client) -> None:
    """Kill every worker process mid-chunk: the job still completes with each
    iteration recorded exactly once."""
    job = submit(api, algorithm="mlp", dataset="digits",
                 params={"hidden_units": 128, "batch_size": 256},
                 stopping={"max_iterations": 400, "tolerance": None})
    client = portal.redis()
    stream = portal.keys.job_stream(job["id"])

    def mid_chunk() -> bool:
        # Points streamed beyond the committed progress = a chunk is running.
        committed = api.get(f"/api/v1/jobs/{job['id']}").json()["iterations_done"]
        # redis-py types every reply as a union over its sync and async clients.
        last = cast(list[tuple[str, dict[str, str]]], client.xrevrange(stream, count=1))
        return bool(last) and int(last[0][1]["iteration"]) > committed + 2

    wait_until(mid_chunk, 60, "a chunk in flight", interval=0.05)
    victims = portal.kill_slots()
    assert victims
    done = wait_finished(api, job["id"], timeout=180)
    assert done["status"] == "completed", done
    assert stored_iterations(portal.db_url, job["id"]) == list(range(1, 401))
    # The kill took: replacement processes took the slots (a chunk can be sized
    # to the whole job, so the rerun may be the same chunk, redelivered).
    wait_until(lambda: set(portal.slot_pids()) - set(victims), 30, "replacement workers")


def test_redis_wiped_mid_run_loses_no_job(portal: Portal, api: httpx.Client) -> None:
    """Redis is fast state only: after FLUSHDB (leases, heartbeats, queued
    messages, streams all gone) every job still completes exactly."""
    jobs = [submit(api, algorithm="mlp", dataset="digits", seed=s,
                   stopping={"max_iterations": 600, "tolerance": None}) for s in (1, 2, 3)]
    wait_until(lambda: any(api.get(f"/api/v1/jobs/{j['id']}").json()["iterations_done"] > 0
                           for j in jobs), 60, "training to start")
    portal.redis().flushdb()
    for job in jobs:
        done = wait_finished(api, job["id"], timeout=180)
        assert done["status"] == "completed", done
        assert stored_iterations(portal.db_url, job["id"]) == list(range(1, 601))
