"""Worker pools and placement on a real portal: a CPU pool, a GPU pool (its
worker advertises a GPU this machine lacks) and a pool a platform admin
reserves for one tenant, each with its own Celery workers and queue.

Checks what the scheduler decided (the pool of every chunk) and what the
workers did (jobs finish, and a job needing a GPU is only ever run by the GPU
pool's worker), not wall-clock figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.core.models import Role
from tests.utils.portal import Portal, make_user_token, start_portal, token_client
from tests.utils.waiting import wait_until

# Long enough to be running whenever the test looks; cancelled at the end.
LONG = 50_000
FAKE_GPU = "Test GPU:16384"

pytestmark = pytest.mark.one_database


@pytest.fixture(scope="module")
def pooled(module_db_url: str, redis_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    data: Path = tmp_path_factory.mktemp("pools")
    portal = start_portal(data_dir=data, db_url=module_db_url, redis_url=redis_url, workers=1,
                          policy="slaq", extra_env={"CHUNK_SECONDS": "0.3"})
    try:
        portal.start_workers(1, name="gpu-workers", pool="gpu", gpu=FAKE_GPU)
        portal.start_workers(1, name="acme-workers", pool="tenant-acme")
        portal.wait_for_slots(3)
        yield portal
    finally:
        portal.close()


@pytest.fixture(scope="module")
def admin(pooled: Portal) -> Iterator[httpx.Client]:
    token = make_user_token(pooled.db_url, tenant="platform", email="root@pools.test",
                            role=Role.platform_admin)
    with token_client(pooled, token) as client:
        # The scheduler records a pool once it sees the pool's heartbeats.
        wait_until(lambda: {"cpu", "gpu", "tenant-acme"} <= {
            p["name"] for p in client.get("/api/v1/admin/pools").json()}, 30,
            "the three pools recorded")
        yield client


@pytest.fixture(scope="module")
def lab(pooled: Portal) -> Iterator[httpx.Client]:
    token = make_user_token(pooled.db_url, tenant="lab", email="m@lab.test", max_slots=10)
    with token_client(pooled, token) as client:
        yield client


@pytest.fixture(scope="module")
def acme(pooled: Portal) -> Iterator[httpx.Client]:
    token = make_user_token(pooled.db_url, tenant="acme", email="m@acme.test", max_slots=10)
    with token_client(pooled, token) as client:
        yield client


def _spec(seed: int, iterations: int = LONG, **requirements: Any) -> dict[str, Any]:
    return {"algorithm": "logistic_regression", "dataset": "digits", "seed": seed,
            "stopping": {"max_iterations": iterations, "tolerance": None},
            "requirements": requirements}


@contextmanager
def submitted(api: httpx.Client, specs: list[dict[str, Any]]) -> Iterator[list[int]]:
    ids = []
    try:
        for spec in specs:
            answer = api.post("/api/v1/jobs", json=spec)
            assert answer.status_code == 201, answer.text
            ids.append(int(answer.json()["id"]))
        yield ids
    finally:
        if ids:
            api.post("/api/v1/jobs/bulk", json={"action": "cancel", "ids": ids})


def _pools_run(api: httpx.Client, job_id: int) -> list[str | None]:
    decisions: list[dict[str, Any]] = api.get(f"/api/v1/jobs/{job_id}/decisions").json()
    return [d["pool"] for d in decisions]


def test_pools_advertise_what_their_workers_have(admin: httpx.Client) -> None:
    pools = {p["name"]: p for p in admin.get("/api/v1/admin/pools").json()}
    assert pools["gpu"]["gpu"] == "Test GPU" and pools["gpu"]["gpu_memory_mb"] == 16384
    assert pools["cpu"]["gpu"] is None
    assert pools["cpu"]["cores"] >= 1 and pools["cpu"]["memory_mb"] > 0
    assert [pools[name]["slots"] for name in ("cpu", "gpu", "tenant-acme")] == [1, 1, 1]


def test_a_gpu_job_waits_for_the_gpu_pool_while_cpu_jobs_run(
        admin: httpx.Client, lab: httpx.Client) -> None:
    specs = [_spec(1, gpu=True), _spec(2, gpu=True), _spec(3, gpu=False), _spec(4, gpu=False)]
    with submitted(lab, specs) as (gpu_a, gpu_b, cpu_a, cpu_b):
        said: list[str] = []

        def one_gpu_job_waits_saying_why() -> bool:
            jobs = [lab.get(f"/api/v1/jobs/{j}").json() for j in (gpu_a, gpu_b)]
            waiting = [j for j in jobs if j["status"] == "queued"]
            said[:] = [j["explanation"]["summary"] for j in waiting]
            return len(waiting) == 1 and "GPU slot: 0 of 1 free" in said[0]

        wait_until(one_gpu_job_waits_saying_why, 60,
                   f"a GPU job waiting for the GPU slot (it says {said})", interval=0.2)
        wait_until(lambda: all(len(_pools_run(lab, j)) >= 2 for j in (cpu_a, cpu_b)), 60,
                   "both CPU jobs granted twice")
        gpu_runs = _pools_run(lab, gpu_a) + _pools_run(lab, gpu_b)
        cpu_runs = _pools_run(lab, cpu_a) + _pools_run(lab, cpu_b)
        assert gpu_runs and set(gpu_runs) == {"gpu"}, gpu_runs
        # The GPU pool is wanted by a waiting GPU job: CPU work goes elsewhere
        # (the CPU pool, or tenant-acme while nobody has reserved it).
        assert cpu_runs and "gpu" not in cpu_runs, cpu_runs


def test_a_reserved_pool_runs_only_its_tenants_jobs(
        admin: httpx.Client, lab: httpx.Client, acme: httpx.Client) -> None:
    reserved = admin.patch("/api/v1/admin/pools/tenant-acme", json={"reserved_for": ["acme"]})
    assert reserved.status_code == 200, reserved.text
    assert reserved.json()["reserved_for"] == ["acme"]
    refused = lab.post("/api/v1/jobs", json=_spec(5, pool="tenant-acme"))
    assert refused.status_code == 422, refused.text
    assert "reserved for other teams" in refused.text or "tenant-acme" in refused.text
    # Four lab jobs for one CPU slot: the idle acme pool would take them, were it open.
    with submitted(lab, [_spec(10 + i, gpu=False) for i in range(4)]) as lab_jobs, \
            submitted(acme, [_spec(20, gpu=False)]) as (acme_job,):
        wait_until(lambda: len(_pools_run(acme, acme_job)) >= 2 and sum(
            len(_pools_run(lab, j)) for j in lab_jobs) >= 6, 90,
            "the acme job and the lab jobs granted several chunks")
        lab_runs = [p for j in lab_jobs for p in _pools_run(lab, j)]
        assert "tenant-acme" not in lab_runs, lab_runs
        # acme's job prefers its own pool to the shared one.
        assert set(_pools_run(acme, acme_job)) == {"tenant-acme"}
    opened = admin.patch("/api/v1/admin/pools/tenant-acme", json={"reserved_for": []})
    assert opened.status_code == 200 and opened.json()["reserved_for"] == []


def test_a_job_no_pool_can_ever_run_is_refused_at_submit(lab: httpx.Client) -> None:
    before = lab.get("/api/v1/jobs", params={"limit": 200}).json()["total"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"pool": "nowhere"}, "no worker pool named 'nowhere'"),
        ({"min_memory_mb": 60_000_000}, "MiB of memory")]
    for requirements, words in cases:
        answer = lab.post("/api/v1/jobs", json=_spec(30, **requirements))
        assert answer.status_code == 422, answer.text
        assert words in answer.text, answer.text
    assert lab.get("/api/v1/jobs", params={"limit": 200}).json()["total"] == before


def test_unknown_pool_and_tenant_are_clear_errors(admin: httpx.Client) -> None:
    missing = admin.patch("/api/v1/admin/pools/nowhere", json={"reserved_for": []})
    assert missing.status_code == 404 and "slaq worker --pool nowhere" in missing.text
    nobody = admin.patch("/api/v1/admin/pools/gpu", json={"reserved_for": ["no-such-team"]})
    assert nobody.status_code == 422 and "no-such-team" in nobody.text


def test_pools_are_for_platform_admins_only(lab: httpx.Client) -> None:
    assert lab.get("/api/v1/admin/pools").status_code == 403
    assert lab.patch("/api/v1/admin/pools/gpu", json={"reserved_for": ["lab"]}).status_code == 403


def test_a_per_pool_quota_holds_a_tenants_gpu_jobs(
        admin: httpx.Client, pooled: Portal) -> None:
    token = make_user_token(pooled.db_url, tenant="thrifty", email="m@thrifty.test",
                            max_slots=10)
    tenants = {t["name"]: t["id"] for t in admin.get("/api/v1/admin/tenants").json()}
    capped = admin.patch(f"/api/v1/admin/tenants/{tenants['thrifty']}",
                         json={"pool_slots": {"gpu": 0}})
    assert capped.status_code == 200 and capped.json()["pool_slots"] == {"gpu": 0}, capped.text
    bad = admin.patch(f"/api/v1/admin/tenants/{tenants['thrifty']}",
                      json={"pool_slots": {"Not A Pool": 1}})
    assert bad.status_code == 422 and "Not A Pool" in bad.text
    with token_client(pooled, token) as thrifty, \
            submitted(thrifty, [_spec(40, gpu=True), _spec(41, gpu=False)]) as (gpu_job, cpu_job):
        said: list[str] = []

        def held_by_its_quota() -> bool:
            said[:] = [thrifty.get(f"/api/v1/jobs/{gpu_job}").json()["explanation"]["summary"]]
            return "0 in pool gpu" in said[0]

        wait_until(held_by_its_quota, 30, f"the GPU job held by the pool quota (says {said})")
        wait_until(lambda: len(_pools_run(thrifty, cpu_job)) >= 2, 60, "the CPU job running")
        assert _pools_run(thrifty, gpu_job) == []
        raised = admin.patch(f"/api/v1/admin/tenants/{tenants['thrifty']}",
                             json={"pool_slots": {"gpu": 1}})
        assert raised.status_code == 200
        wait_until(lambda: len(_pools_run(thrifty, gpu_job)) >= 1, 30,
                   "the GPU job granted once allowed")
        assert set(_pools_run(thrifty, gpu_job)) == {"gpu"}
