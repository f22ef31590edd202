"""A job whose quality metric is ``val_loss`` is scheduled on its held-out
evaluations: the live slaq scheduler (real Redis, real Celery workers) fits
the evaluation series, and its decision reasons name val_loss; a job on the
training loss beside it is scheduled on that as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.waiting import wait_until

# One database: the subject is what the scheduler ranks by, not where it is stored.
pytestmark = pytest.mark.one_database

EVAL_EVERY = 20
# Chunks are sized by time, so a short job ends in a grant or two, before the
# scheduler fits it thrice: these run until the test cancels them.
ITERATIONS = 50_000


@pytest.fixture(scope="module")
def slaq_portal(module_db_url: str, redis_url: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    data: Path = tmp_path_factory.mktemp("val-loss")
    running = start_portal(data_dir=data, db_url=module_db_url, redis_url=redis_url,
                           workers=2, policy="slaq", extra_env={"CHUNK_SECONDS": "0.3"})
    try:
        yield running
    finally:
        running.close()


def _spec(seed: int, **extra: Any) -> dict[str, Any]:
    return {"algorithm": "mlp", "dataset": "digits", "seed": seed,
            "params": {"hidden_units": 16, "learning_rate": 0.05},
            "stopping": {"max_iterations": ITERATIONS, "tolerance": None}, **extra}


def test_a_val_loss_job_is_scheduled_on_its_evaluations(slaq_portal: Portal) -> None:
    token = make_user_token(slaq_portal.db_url, tenant="lab", email="v@lab.test")
    with httpx.Client(base_url=slaq_portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as api:
        on_val = api.post("/api/v1/jobs", json=_spec(1, eval_every=EVAL_EVERY,
                                                     quality_metric="val_loss")).json()["id"]
        on_loss = api.post("/api/v1/jobs", json=_spec(2, eval_every=EVAL_EVERY)).json()["id"]
        try:
            _check_fits(api, on_val, on_loss)
        finally:
            for job_id in (on_val, on_loss):
                api.post(f"/api/v1/jobs/{job_id}/cancel")


def _check_fits(api: httpx.Client, on_val: int, on_loss: int) -> None:
    # While it runs, each fit the scheduler publishes for the val_loss job
    # ends at an evaluation (chunks end wherever their time runs out):
    # its history is the evaluation series, not the training losses.
    starts: set[int] = set()

    def fitted() -> bool:
        body: dict[str, Any] = api.get(f"/api/v1/jobs/{on_val}/prediction").json()
        if body["points"]:
            starts.add(int(body["from_iteration"]))
        return len(starts) >= 3

    wait_until(fitted, 120, "three fits of the val_loss job's evaluations", interval=0.1)
    evals = api.get(f"/api/v1/jobs/{on_val}/metrics", params={"split": "eval"}).json()
    evaluated = set(evals["eval"]["val_loss"]["iterations"])
    assert starts <= evaluated, (sorted(starts), sorted(evaluated))
    loss_starts: set[int] = set()

    def loss_fitted() -> bool:
        body: dict[str, Any] = api.get(f"/api/v1/jobs/{on_loss}/prediction").json()
        if body["points"]:
            loss_starts.add(int(body["from_iteration"]))
        return any(s % EVAL_EVERY for s in loss_starts)

    # The loss job beside it is fitted on its training losses, at chunk ends.
    wait_until(loss_fitted, 120, "a fit of the loss job off an evaluation iteration",
               interval=0.1)

    def reasons(job_id: int) -> list[str]:
        return [str(d["reason"]) for d in api.get(
            f"/api/v1/jobs/{job_id}/decisions", params={"limit": 1000}).json()]

    val_reasons, loss_reasons = reasons(on_val), reasons(on_loss)
    assert len(val_reasons) >= 3, val_reasons
    assert all("val_loss" in r for r in val_reasons), val_reasons
    # Ranked by the predicted drop of its held-out loss, not only warmed up.
    ranked = [r for r in val_reasons if "on val_loss: rank" in r and "predicted" in r]
    assert ranked, val_reasons
    assert loss_reasons and not any("val_loss" in r for r in loss_reasons), loss_reasons
