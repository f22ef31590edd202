"""Stopping rules do what the user asked: a target alone runs to the target
or to max_iterations; the convergence test applies when asked for, or by
default only when neither a target nor a tolerance is given."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from backend.schemas import DEFAULT_TOLERANCE
from tests.integration.test_end_to_end import submit, wait_finished
from tests.utils.portal import Portal, make_user_token

# k-means on iris reaches a fixed point within a few dozen iterations: any
# convergence test in force stops it long before this.
MAX_ITERATIONS = 400
KMEANS = {"algorithm": "kmeans", "dataset": "iris", "params": {"n_clusters": 3}}


@pytest.fixture
def api(portal: Portal) -> Iterator[httpx.Client]:
    token = make_user_token(portal.db_url, tenant="stopping", email="stella@stopping.test")
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def _run(api: httpx.Client, stopping: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    job = submit(api, **KMEANS, stopping={"max_iterations": MAX_ITERATIONS, **stopping})
    return job, wait_finished(api, job["id"])


def test_unreachable_target_alone_runs_to_max_iterations(api: httpx.Client) -> None:
    job, done = _run(api, {"target_loss": 1e-9})
    assert job["stopping"]["tolerance"] is None, "a target alone sets no convergence test"
    assert done["status"] == "completed", done
    assert done["iterations_done"] == MAX_ITERATIONS, done["end_reason"]
    assert done["end_reason"] == f"reached max iterations ({MAX_ITERATIONS})"


def test_nothing_set_gets_the_default_convergence_test(api: httpx.Client) -> None:
    job, done = _run(api, {})
    assert job["stopping"]["tolerance"] == DEFAULT_TOLERANCE
    assert done["status"] == "completed", done
    assert done["iterations_done"] < MAX_ITERATIONS
    assert done["end_reason"].startswith("converged:"), done["end_reason"]
    assert f"tolerance {DEFAULT_TOLERANCE:g}" in done["end_reason"]


def test_target_with_explicit_tolerance_keeps_the_test(api: httpx.Client) -> None:
    job, done = _run(api, {"target_loss": 1e-9, "tolerance": 1e-3, "window": 5})
    assert job["stopping"]["tolerance"] == 1e-3
    assert done["iterations_done"] < MAX_ITERATIONS
    assert done["end_reason"].startswith("converged:"), done["end_reason"]


def test_explicit_null_tolerance_disables_the_test(api: httpx.Client) -> None:
    job, done = _run(api, {"tolerance": None})
    assert job["stopping"]["tolerance"] is None
    assert done["iterations_done"] == MAX_ITERATIONS, done["end_reason"]
    assert done["end_reason"] == f"reached max iterations ({MAX_ITERATIONS})"
