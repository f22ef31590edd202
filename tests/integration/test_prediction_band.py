"""The prediction a job page draws starts where the job is and never dips
below 0 for a metric the job has never reported below 0 (issue 38: the band
was drawn over iterations already done and read "band -0.01446 – 0.01462"
for a loss that cannot be negative). A trainer that reports a negative loss
keeps its band as fitted."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.fits import fit_payload, publish_fits
from backend.core.models import Job
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

# One database: the subject is the predictor's band, computed from stored points the same on
# either database.
pytestmark = pytest.mark.one_database

ITERATIONS = 30


def _finished_job(api: httpx.Client, **extra: Any) -> int:
    job_id = int(api.post("/api/v1/jobs", json={
        "algorithm": "logistic_regression", "dataset": "iris",
        "stopping": {"max_iterations": ITERATIONS, "tolerance": None}, **extra}).json()["id"])
    wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "completed",
               90, "the job to finish")
    return job_id


def _publish_stale_fit(portal: Portal, job_id: int) -> None:
    """A fit made 20 iterations before the job's end whose band crosses 0, as
    the scheduler publishes for a loss that approaches 0 (a finished job is
    never refitted, so it stays)."""
    rows = [(i, 0.0005, -0.0144, 0.0146) for i in range(11, 61)]
    publish_fits(portal.redis(), portal.keys, [fit_payload(
        job_id=job_id, from_iteration=10, family="exp", rows=rows, fitted_at=time.time())])


def test_band_starts_after_the_last_done_iteration_and_stays_at_or_above_0(
        api: httpx.Client, portal: Portal) -> None:
    job_id = _finished_job(api)
    _publish_stale_fit(portal, job_id)
    body = api.get(f"/api/v1/jobs/{job_id}/prediction").json()
    assert [p["iteration"] for p in body["points"]] == list(range(ITERATIONS + 1, 61))
    assert all(p["low"] == 0.0 and p["loss"] == 0.0005 and p["high"] == 0.0146
               for p in body["points"])
    assert body["from_iteration"] == 10 and body["family"] == "exp"


def test_val_loss_band_is_clamped_by_the_held_out_values(api: httpx.Client,
                                                         portal: Portal) -> None:
    job_id = _finished_job(api, eval_every=10, quality_metric="val_loss")
    _publish_stale_fit(portal, job_id)
    points = api.get(f"/api/v1/jobs/{job_id}/prediction").json()["points"]
    assert points and min(p["low"] for p in points) == 0.0


def test_a_job_that_reported_a_negative_loss_keeps_its_band(api: httpx.Client,
                                                            portal: Portal) -> None:
    job_id = _finished_job(api)
    # As a trainer whose loss is a log-likelihood would have reported it.
    with session_scope(engine_for(portal.db_url)) as session:
        session.execute(update(Job).where(col(Job.id) == job_id).values(best_loss=-0.5))
        session.commit()
    _publish_stale_fit(portal, job_id)
    points = api.get(f"/api/v1/jobs/{job_id}/prediction").json()["points"]
    assert points and all(p["low"] == -0.0144 for p in points)
    assert points[0]["iteration"] == ITERATIONS + 1
