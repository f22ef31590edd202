"""An operator's trainer plugin (examples/slaq-example-trainer, installed in the
test environment by the test command) is listed, validated and trained end to
end on real workers, with its per-iteration and held-out metrics stored."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.models import MetricRecord
from tests.integration.test_end_to_end import stored_iterations, submit, wait_finished
from tests.utils.portal import Portal

# One database: the subject is the plugin entry point and its schema.
pytestmark = pytest.mark.one_database

PLUGIN = "averaged_perceptron"


def stored_metrics(db_url: str, job_id: int) -> dict[tuple[str, str], dict[int, float]]:
    series: dict[tuple[str, str], dict[int, float]] = {}
    with session_scope(engine_for(db_url)) as session:
        for split, name, iteration, value in session.execute(
            select(col(MetricRecord.split), col(MetricRecord.name),
                   col(MetricRecord.iteration), col(MetricRecord.value))
            .where(col(MetricRecord.job_id) == job_id)
        ).all():
            series.setdefault((split, name), {})[int(iteration)] = float(value)
    return series


def test_the_plugin_is_in_the_catalogue_with_its_schema(api: httpx.Client) -> None:
    catalog = {entry["name"]: entry for entry in api.get("/api/v1/catalog/algorithms").json()}
    entry = catalog[PLUGIN]
    assert entry["source"] == "plugin slaq-example-trainer"
    assert entry["tasks"] == ["classification"]
    params = {p["name"]: p for p in entry["params"]}
    assert set(params) == {"learning_rate", "batch_size"}
    assert params["learning_rate"]["log_scale"] is True
    assert params["batch_size"]["type"] == "int" and params["batch_size"]["maximum"] == 10_000
    assert catalog["logistic_regression"]["source"] == "built-in"


def test_the_plugins_schema_refuses_bad_params(api: httpx.Client) -> None:
    resp = api.post("/api/v1/jobs", json={
        "algorithm": PLUGIN, "dataset": "wine",
        "params": {"learning_rate": -1, "batch_size": "32", "momentum": 0.9},
        "stopping": {"max_iterations": 10}})
    assert resp.status_code == 422, resp.text
    problems = {tuple(d["loc"]): d["msg"] for d in resp.json()["detail"]}
    assert "must be > 0" in problems[("body", "params", "learning_rate")]
    assert "must be a number" in problems[("body", "params", "batch_size")]
    assert "unknown parameter 'momentum'" in problems[("body", "params", "momentum")]


def test_a_plugin_job_trains_to_completion_with_its_metrics(
        api: httpx.Client, portal: Portal) -> None:
    spec: dict[str, Any] = {"algorithm": PLUGIN, "dataset": "wine", "seed": 4,
                            "params": {"batch_size": 16},
                            "stopping": {"max_iterations": 120}}
    job = wait_finished(api, submit(api, **spec)["id"])
    assert job["status"] == "completed", job
    assert stored_iterations(portal.db_url, job["id"]) == list(range(1, 121))
    series = stored_metrics(portal.db_url, job["id"])
    accuracy = series[("train", "accuracy")]
    assert sorted(accuracy) == list(range(1, 121))
    assert all(0.0 <= value <= 1.0 for value in accuracy.values())
    # Held out every 50 iterations (the default) and at the end.
    assert sorted(series[("eval", "val_loss")]) == [50, 100, 120]
    assert sorted(series[("eval", "val_accuracy")]) == [50, 100, 120]
    assert series[("eval", "val_accuracy")][120] > 0.5  # wine is easy; chance is 1/3
