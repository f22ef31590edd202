"""Downloading a job's trained model: its latest checkpoint, tenant-scoped."""

from __future__ import annotations

import io

import httpx
import numpy as np

from tests.utils.portal import Portal, make_user_token
from tests.utils.waiting import wait_until


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
    assert len(resp.content) > 0
    with np.load(io.BytesIO(resp.content), allow_pickle=False) as archive:
        assert archive.files

    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {other_token}"}) as other:
        hidden = other.get(f"/api/v1/jobs/{job_id}/checkpoint")
    assert hidden.status_code == 404
    assert hidden.json()["detail"] == f"job {job_id} not found"


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
