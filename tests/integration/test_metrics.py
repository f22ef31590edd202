"""Metrics beyond the training loss, end to end on real workers and both
databases: a built-in job's held-out evaluations are stored every
``eval_every`` iterations, served by REST (downsampled like the losses,
tenant-scoped), and exported as CSV/JSON with one column per metric."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import httpx
from sqlalchemy import func, select
from sqlmodel import Session, col

from backend.core.db import engine_for
from backend.core.models import MetricRecord
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

EVAL_EVERY = 2
ITERATIONS = 60


def _spec(**extra: Any) -> dict[str, Any]:
    return {"algorithm": "mlp", "dataset": "digits", "seed": 3,
            "params": {"hidden_units": 16, "learning_rate": 0.05},
            "stopping": {"max_iterations": ITERATIONS, "tolerance": None}, **extra}


def _finished(api: httpx.Client, job_id: int) -> dict[str, Any] | None:
    job: dict[str, Any] = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["status"] != "failed", job["end_reason"]
    return job if job["status"] == "completed" else None


def _error(response: httpx.Response, field: str) -> str:
    assert response.status_code == 422, response.text
    messages = [e["msg"] for e in response.json()["detail"] if e["loc"][-1] == field]
    assert messages, response.json()
    return str(messages[0])


def test_evaluation_settings_are_validated(api: httpx.Client) -> None:
    wrong = _error(api.post("/api/v1/jobs", json=_spec(quality_metric="accuracy")),
                   "quality_metric")
    assert "'loss'" in wrong and "'val_loss'" in wrong and "accuracy" in wrong
    never = _error(api.post("/api/v1/jobs", json=_spec(quality_metric="val_loss", eval_every=0)),
                   "quality_metric")
    assert "eval_every" in never
    late = _error(api.post("/api/v1/jobs", json=_spec(eval_every=ITERATIONS + 1)), "eval_every")
    assert str(ITERATIONS) in late and "never evaluate" in late
    _error(api.post("/api/v1/jobs", json=_spec(eval_every=-1)), "eval_every")
    assert api.get("/api/v1/jobs").json()["total"] == 0, "a refused job was stored"

    # The default period is sensible for long jobs and shortened for short ones.
    short = api.post("/api/v1/jobs", json={**_spec(), "stopping": {"max_iterations": 20}}).json()
    long = api.post("/api/v1/jobs", json={**_spec(), "stopping": {"max_iterations": 5000}}).json()
    api.post(f"/api/v1/jobs/{long['id']}/cancel")
    assert (short["eval_every"], long["eval_every"]) == (20, 50)
    assert short["quality_metric"] == "loss" and short["last_eval"] == {}


def test_validation_metrics_are_stored_served_and_exported(
        portal: Portal, api: httpx.Client, other_token: str) -> None:
    job_id = int(api.post("/api/v1/jobs", json=_spec(eval_every=EVAL_EVERY)).json()["id"])
    job = wait_until(lambda: _finished(api, job_id), 180, "the job to complete")

    body = api.get(f"/api/v1/jobs/{job_id}/metrics").json()
    series = body["eval"]["val_loss"]
    expected = list(range(EVAL_EVERY, ITERATIONS + 1, EVAL_EVERY))
    assert series["iterations"] == expected
    assert series["total_points"] == len(expected) and not series["downsampled"]
    assert all(math.isfinite(v) and v > 0 for v in series["values"])
    assert "val_accuracy" in body["eval"], "a classifier's held-out accuracy is missing"
    assert all(0 <= v <= 1 for v in body["eval"]["val_accuracy"]["values"])
    # The route reads the database's rows, and the job's summary is the last of them.
    with Session(engine_for(portal.db_url)) as session:
        stored = session.execute(select(func.count()).select_from(MetricRecord).where(
            col(MetricRecord.job_id) == job_id, col(MetricRecord.split) == "eval",
            col(MetricRecord.name) == "val_loss")).scalar_one()
    assert stored == len(expected)
    assert job["last_eval_iteration"] == ITERATIONS
    assert job["last_eval"]["val_loss"] == series["values"][-1]
    assert body["last_eval"] == job["last_eval"]

    # Downsampled like the losses: ends kept, every point a real one, the best kept.
    small = api.get(f"/api/v1/jobs/{job_id}/metrics",
                    params={"max_points": 10, "split": "eval"}).json()
    assert small["train"] == {}
    thin = small["eval"]["val_loss"]
    assert thin["downsampled"] and len(thin["iterations"]) <= 10
    assert thin["iterations"][0] == expected[0] and thin["iterations"][-1] == expected[-1]
    full = dict(zip(series["iterations"], series["values"], strict=True))
    assert all(full[i] == v for i, v in zip(thin["iterations"], thin["values"], strict=True))
    assert min(series["values"]) in thin["values"]

    # CSV: one row per iteration, val_* columns empty where no evaluation ran.
    response = api.get(f"/api/v1/jobs/{job_id}/export", params={"format": "csv"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    header = response.text.splitlines()[0].split(",")
    assert header[:2] == ["iteration", "loss"] and {"val_loss", "val_accuracy"} <= set(header)
    assert [int(r["iteration"]) for r in rows] == list(range(1, ITERATIONS + 1))
    losses = api.get(f"/api/v1/jobs/{job_id}/losses").json()
    assert [float(r["loss"]) for r in rows] == losses["losses"]
    for row in rows:
        iteration = int(row["iteration"])
        if iteration in full:
            assert float(row["val_loss"]) == full[iteration]
        else:
            assert row["val_loss"] == "" and row["val_accuracy"] == ""
    doc = api.get(f"/api/v1/jobs/{job_id}/export", params={"format": "json"}).json()
    assert [p["iteration"] for p in doc["metrics"]["eval"]["val_loss"]["points"]] == expected
    assert len(doc["rows"]) == ITERATIONS and doc["columns"] == header

    # Another tenant sees none of it.
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {other_token}"}) as other:
        for path in (f"/api/v1/jobs/{job_id}/metrics", f"/api/v1/jobs/{job_id}/export"):
            assert other.get(path).status_code == 404
    assert api.get("/api/v1/jobs/999999/metrics").status_code == 404
