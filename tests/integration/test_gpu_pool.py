"""On a host with a GPU: a torch job that needs a GPU runs on a worker of the
GPU pool, and that worker trains on the GPU. Skips, saying why, elsewhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.core.models import Role
from backend.core.pools import detect_gpu
from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.waiting import wait_until

torch = pytest.importorskip("torch", reason="the [torch] extra is not installed")

pytestmark = [
    pytest.mark.one_database,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="no CUDA GPU on this host: the GPU pool cannot be checked here"),
]


@pytest.fixture(scope="module")
def gpu_portal(module_db_url: str, redis_url: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    data: Path = tmp_path_factory.mktemp("gpu-pool")
    portal = start_portal(data_dir=data, db_url=module_db_url, redis_url=redis_url, workers=1)
    try:
        portal.start_workers(1, name="gpu-workers", pool="gpu", gpu=None)  # detected
        portal.wait_for_slots(2)
        yield portal
    finally:
        portal.close()


def test_a_torch_job_needing_a_gpu_trains_on_the_gpu_pool_worker(gpu_portal: Portal) -> None:
    model, memory = detect_gpu()
    assert model is not None and memory > 0, "nvidia-smi should see the GPU torch sees"
    admin_token = make_user_token(gpu_portal.db_url, tenant="platform", email="root@gpu.test",
                                  role=Role.platform_admin)
    token = make_user_token(gpu_portal.db_url, tenant="lab", email="m@gpu.test")
    with httpx.Client(base_url=gpu_portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {admin_token}"}) as admin:
        wait_until(lambda: any(p["name"] == "gpu" and p["gpu"] == model
                               for p in admin.get("/api/v1/admin/pools").json()), 30,
                   "the GPU pool recorded with its detected GPU")
    with httpx.Client(base_url=gpu_portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as api:
        spec: dict[str, Any] = {
            "algorithm": "torch_mlp", "dataset": "digits", "seed": 3,
            "stopping": {"max_iterations": 300, "tolerance": None},
            "requirements": {"gpu": True}}
        answer = api.post("/api/v1/jobs", json=spec)
        assert answer.status_code == 201, answer.text
        job_id = answer.json()["id"]
        wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "completed",
                   180, "the GPU job to complete")
        pools = {d["pool"] for d in api.get(f"/api/v1/jobs/{job_id}/decisions").json()}
        assert pools == {"gpu"}
    log = gpu_portal.logs["gpu-workers"].read_text(errors="replace")
    assert "PyTorch trainers train on cuda" in log, log[-2000:]
