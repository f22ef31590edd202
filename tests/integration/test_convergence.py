"""The convergence test on real workers: a noisy default torch_cnn job is not
stopped early by its noise; a job whose loss (or held-out loss) really has
stopped moving is stopped, and its end_reason names the series that did."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest

from backend.schemas import DEFAULT_TOLERANCE
from tests.integration.test_end_to_end import stored_points, submit, wait_finished
from tests.utils.portal import Portal, make_user_token
from workers.stopping import MIN_SHARE

# One database: the subject is the convergence test on noisy series, in the worker.
pytestmark = pytest.mark.one_database

KMEANS = {"algorithm": "kmeans", "dataset": "iris", "params": {"n_clusters": 3}}
"""k-means on iris reaches a fixed point within a few dozen iterations."""


@pytest.fixture
def api(portal: Portal) -> Iterator[httpx.Client]:
    token = make_user_token(portal.db_url, tenant="converge", email="cora@converge.test")
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def test_a_default_torch_cnn_job_is_not_stopped_by_its_noise(
        portal: Portal, api: httpx.Client) -> None:
    pytest.importorskip("torch")
    job = submit(api, algorithm="torch_cnn", dataset="digits")
    assert job["stopping"]["tolerance"] == DEFAULT_TOLERANCE, "the default job is tested"
    assert job["quality_metric"] == "loss"
    done = wait_finished(api, job["id"], timeout=300)
    assert done["status"] == "completed", done
    most = job["stopping"]["max_iterations"]
    assert done["iterations_done"] >= MIN_SHARE * most, done["end_reason"]
    assert done["chunks_run"] >= 2, "the test's history must have crossed a chunk boundary"
    # This very run sets the trap that stopped the job at iteration 81:
    # two losses ten iterations apart within 1e-4 of each other, early on.
    losses = [loss for _, loss in stored_points(portal.db_url, job["id"])]
    trap = next(i + 1 for i in range(10, len(losses))
                if abs(losses[i] - losses[i - 10]) / abs(losses[i - 10]) < DEFAULT_TOLERANCE)
    assert trap < MIN_SHARE * most


def test_a_plateaued_loss_converges_naming_the_training_loss(api: httpx.Client) -> None:
    most = 400
    job = submit(api, **KMEANS, stopping={"max_iterations": most})
    done = wait_finished(api, job["id"])
    assert done["status"] == "completed", done
    # Flat long before; the training loss may not converge before MIN_SHARE.
    assert done["iterations_done"] == math.ceil(MIN_SHARE * most), done["end_reason"]
    assert done["end_reason"].startswith("converged: the training loss stopped improving"), \
        done["end_reason"]
    assert "last 10 iterations" in done["end_reason"]


def test_a_plateaued_held_out_loss_converges_naming_it(api: httpx.Client) -> None:
    most = 400
    job = submit(api, **KMEANS, quality_metric="val_loss", eval_every=5,
                 stopping={"max_iterations": most, "window": 3})
    done = wait_finished(api, job["id"])
    assert done["status"] == "completed", done
    # Held-out evaluations are the evidence: no share of max_iterations to wait for.
    assert done["iterations_done"] < MIN_SHARE * most, done["end_reason"]
    assert done["iterations_done"] % 5 == 0, "it stops at an evaluation"
    assert done["end_reason"].startswith(
        "converged: the held-out val_loss stopped improving"), done["end_reason"]
    assert "last 3 evaluations" in done["end_reason"]
