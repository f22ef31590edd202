"""Downloading a job's trained model: its latest checkpoint, tenant-scoped,
named and typed by its trainer's format (numpy .npz, PyTorch .pt)."""

from __future__ import annotations

import io

import httpx
import numpy as np
import pytest

from tests.utils.portal import Portal, make_user_token
from tests.utils.waiting import wait_until

# One database: the subject is the model file's format, read from shared storage.
pytestmark = pytest.mark.one_database


def test_finished_job_model_downloads_and_is_tenant_scoped(
        api: httpx.Client, portal: Portal, other_token: str) -> None:
    job_id = api.post("/api/v1/jobs", json={
        "algorithm": "logistic_regression", "dataset": "iris",
        "stopping": {"max_iterations": 120, "tolerance": None}}).json()["id"]
    wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "completed",
               90, "the job to finish")
    resp = api.get(f"/api/v1/jobs/{job_id}/checkpoint")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "application/octet-stream"
    assert f'filename="job-{job_id}-iteration-120.npz"' in resp.headers["content-disposition"]
    assert resp.headers["x-model-format"] == "npz"
    assert len(resp.content) > 0
    with np.load(io.BytesIO(resp.content), allow_pickle=False) as archive:
        assert archive.files

    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {other_token}"}) as other:
        hidden = other.get(f"/api/v1/jobs/{job_id}/checkpoint")
    assert hidden.status_code == 404
    assert hidden.json()["detail"] == f"job {job_id} not found"


def test_torch_job_model_downloads_as_a_torch_file(api: httpx.Client) -> None:
    # Issue 38: a torch job's model came as a torch.save file named .npz.
    torch = pytest.importorskip("torch")
    job_id = api.post("/api/v1/jobs", json={
        "algorithm": "torch_mlp", "dataset": "iris",
        "stopping": {"max_iterations": 20, "tolerance": None}}).json()["id"]
    wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "completed",
               120, "the torch job to finish")
    resp = api.get(f"/api/v1/jobs/{job_id}/checkpoint")
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-model-format"] == "torch"
    assert f'filename="job-{job_id}-iteration-20.pt"' in resp.headers["content-disposition"]
    # Loaded as docs/models.md says.
    saved = torch.load(io.BytesIO(resp.content), weights_only=True, map_location="cpu")
    assert saved["iteration"] == 20 and saved["trainer"] == "torch_mlp"
    assert all(isinstance(t, torch.Tensor) for t in saved["model"].values())


def test_a_job_without_a_checkpoint_says_so(portal: Portal) -> None:
    # No slots: the job waits and never writes a checkpoint.
    token = make_user_token(portal.db_url, tenant="no-slots", email="nils@no-slots.test",
                            max_slots=0)
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as api:
        job_id = api.post("/api/v1/jobs", json={"algorithm": "logistic_regression",
                                                "dataset": "iris"}).json()["id"]
        resp = api.get(f"/api/v1/jobs/{job_id}/checkpoint")
        assert resp.status_code == 404
        assert "has no checkpoint yet" in resp.json()["detail"]
        assert api.get("/api/v1/jobs/99999999/checkpoint").status_code == 404
        api.post(f"/api/v1/jobs/{job_id}/cancel")
