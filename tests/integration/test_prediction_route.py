"""The prediction a job page draws is the fit the scheduler published."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import httpx
import pytest

from backend.core.fits import read_fit
from tests.utils.portal import Portal

# The published fit travels through Redis, not the database.
pytestmark = pytest.mark.one_database

T = TypeVar("T")

LONG = {"algorithm": "logistic_regression", "dataset": "digits",
        "params": {"learning_rate": 0.01},
        "stopping": {"max_iterations": 100_000, "tolerance": None}}


def _await(condition: Callable[[], T], timeout: float = 60.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_prediction_route_serves_the_scheduler_published_fit(api: httpx.Client,
                                                             portal: Portal) -> None:
    job_id = api.post("/api/v1/jobs", json=LONG).json()["id"]
    client = portal.redis()
    try:
        _await(lambda: (read_fit(client, portal.keys, job_id) or {}).get("points"),
               what="a published fit with points")
        # Paused, the job reports nothing new, so the scheduler stops refitting it.
        assert api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
        _await(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "paused",
               what="the job to pause")
        published = read_fit(client, portal.keys, job_id)
        assert published is not None and published["points"]
        shown = api.get(f"/api/v1/jobs/{job_id}/prediction")
        assert shown.status_code == 200, shown.text
        body = shown.json()
        assert body["from_iteration"] == published["from_iteration"]
        assert body["family"] == published["family"]
        # What lies ahead of the job (it may have run past the fit), clamped at
        # 0 as logistic loss cannot go below it (tests/integration/test_prediction_band.py).
        done = api.get(f"/api/v1/jobs/{job_id}").json()["iterations_done"]
        ahead = [{**p, "loss": max(p["loss"], 0.0), "low": max(p["low"], 0.0),
                  "high": max(p["high"], 0.0)}
                 for p in published["points"] if p["iteration"] > done]
        assert body["points"] == ahead

        cut = api.get(f"/api/v1/jobs/{job_id}/prediction", params={"horizon": 5}).json()
        limit = published["from_iteration"] + 5
        assert cut["points"] == [p for p in ahead if p["iteration"] <= limit]
    finally:
        api.post(f"/api/v1/jobs/{job_id}/cancel")


def test_a_job_without_a_fit_gets_an_empty_prediction(api: httpx.Client,
                                                       portal: Portal) -> None:
    job_id = api.post("/api/v1/jobs", json=LONG).json()["id"]
    try:
        api.post(f"/api/v1/jobs/{job_id}/pause")
        _await(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "paused",
               what="the job to pause")
        portal.redis().delete(portal.keys.fit(job_id))
        body = api.get(f"/api/v1/jobs/{job_id}/prediction").json()
        assert body["points"] == [] and body["job_id"] == job_id
    finally:
        api.post(f"/api/v1/jobs/{job_id}/cancel")
