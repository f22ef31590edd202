"""Continuing finished runs (issue 38, item 9), through the API and ``slaq``
on both databases, with a real worker: a job continued from its checkpoint
makes exactly the points an uninterrupted job makes, none twice and none
lost; refusals say why; an experiment gains configurations it does not hold
yet; every change is audited and counted by the quotas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.models import Job, JobStatus, LossRecord, MetricRecord, Role
from tests.utils.portal import ROOT, Portal, make_user_token, running_portal
from tests.utils.waiting import wait_until

SHORT = {"algorithm": "logistic_regression", "dataset": "iris", "seed": 7, "eval_every": 10,
         "params": {"learning_rate": 0.05, "batch_size": 16}}
PARKED = {"algorithm": "logistic_regression", "dataset": "digits",
          "stopping": {"max_iterations": 100_000, "tolerance": None}}
SWEEP = {"name": "lr sweep", "algorithm": "logistic_regression", "dataset": "iris",
         "space": {"learning_rate": {"type": "choice", "values": [0.1, 0.01]}},
         "stopping": {"max_iterations": 10, "tolerance": None}}


@pytest.fixture(scope="module")
def portal(module_db_url: str, redis_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    data: Path = tmp_path_factory.mktemp("continue")
    with running_portal(data_dir=data, db_url=module_db_url, redis_url=redis_url,
                        workers=1) as running:
        yield running


@pytest.fixture(scope="module")
def tokens(portal: Portal) -> dict[str, str]:
    return {"mine": make_user_token(portal.db_url, tenant="goers", email="gil@goers.test",
                                    role=Role.tenant_admin, max_active_jobs=100,
                                    max_iterations_per_job=5000),
            "other": make_user_token(portal.db_url, tenant="strangers",
                                     email="sue@strangers.test")}


def _client(portal: Portal, token: str) -> httpx.Client:
    return httpx.Client(base_url=portal.base_url, timeout=30,
                        headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def api(portal: Portal, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with _client(portal, tokens["mine"]) as client:
        yield client


def _submit(api: httpx.Client, spec: dict[str, Any], **stopping: Any) -> int:
    resp = api.post("/api/v1/jobs", json={**spec, "stopping": {"tolerance": None, **stopping}})
    assert resp.status_code == 201, resp.text
    return int(resp.json()["id"])


def _finished(api: httpx.Client, job_id: int, timeout: float = 180) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        job = api.get(f"/api/v1/jobs/{job_id}").json()
        return dict(job) if job["status"] in ("completed", "failed", "cancelled") else None
    return wait_until(probe, timeout, f"job {job_id} to finish")


def _history(db_url: str, job_id: int) -> tuple[list[tuple[int, float]],
                                                list[tuple[str, int, float]]]:
    with session_scope(engine_for(db_url)) as session:
        losses = [(int(i), float(v)) for i, v in session.execute(
            select(col(LossRecord.iteration), col(LossRecord.loss))
            .where(col(LossRecord.job_id) == job_id).order_by(col(LossRecord.iteration)))]
        evals = [(str(n), int(i), float(v)) for n, i, v in session.execute(
            select(col(MetricRecord.name), col(MetricRecord.iteration), col(MetricRecord.value))
            .where(col(MetricRecord.job_id) == job_id, col(MetricRecord.split) == "eval")
            .order_by(col(MetricRecord.name), col(MetricRecord.iteration)))]
    return losses, evals


def _audit(api: httpx.Client, action: str) -> list[dict[str, Any]]:
    return [a for a in api.get("/api/v1/admin/audit").json() if a["action"] == action]


def slaq(portal: Portal, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SLAQ_URL", "SLAQ_TOKEN")}
    env.update({"SLAQ_URL": portal.base_url, "SLAQ_TOKEN": token, "HOME": str(portal.data_dir)})
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=ROOT, env=env,
                          input="", capture_output=True, text=True, timeout=120, check=False)


def test_a_continued_job_makes_exactly_the_points_of_an_uninterrupted_one(
        portal: Portal, api: httpx.Client) -> None:
    continued = _submit(api, SHORT, max_iterations=40)
    straight = _submit(api, SHORT, max_iterations=80)
    first = _finished(api, continued)
    assert first["status"] == "completed" and first["iterations_done"] == 40
    assert first["residency"]["checkpoint_iteration"] == 40, "its final state is stored"
    before, _ = _history(portal.db_url, continued)

    resp = api.post(f"/api/v1/jobs/{continued}/continue", json={"max_iterations": 80})
    assert resp.status_code == 200, resp.text
    job = resp.json()
    assert job["status"] == "queued" and job["stopping"]["max_iterations"] == 80
    assert job["finished_at"] is None and job["end_reason"] is None
    assert job["iterations_done"] == 40, "its progress is kept"

    done = _finished(api, continued)
    assert _finished(api, straight)["iterations_done"] == 80
    assert done["status"] == "completed" and done["iterations_done"] == 80, done
    losses, evals = _history(portal.db_url, continued)
    want_losses, want_evals = _history(portal.db_url, straight)
    assert [i for i, _ in losses] == list(range(1, 81)), "each iteration once, none lost"
    assert losses[:40] == before, "the points before the continuation are untouched"
    assert losses == want_losses, "it resumed exactly where it stopped"
    assert evals == want_evals
    entry = _audit(api, "job.continue")[0]
    assert entry["target"] == f"job {continued}"
    assert entry["details"]["before"]["max_iterations"] == 40
    assert entry["details"]["after"]["max_iterations"] == 80
    assert entry["actor_email"] == "gil@goers.test"


def test_continuing_a_job_that_cannot_go_on_is_refused_with_the_reason(
        portal: Portal, api: httpx.Client, tokens: dict[str, str]) -> None:
    parked = _submit(api, PARKED, max_iterations=100_000 // 20)
    assert api.post(f"/api/v1/jobs/{parked}/pause").status_code == 200
    resp = api.post(f"/api/v1/jobs/{parked}/continue", json={"max_iterations": 4000})
    assert resp.status_code == 409 and "only a finished job" in resp.json()["detail"]

    done = _finished(api, _submit(api, SHORT, max_iterations=20))
    url = f"/api/v1/jobs/{done['id']}/continue"
    for body, field, words in (
            ({"max_iterations": 20}, "max_iterations", "not more than the 20 iterations"),
            ({}, "max_iterations", "at least 21"),
            ({"max_iterations": 6000}, "max_iterations", "over the limit of 5000"),
            ({"max_iterations": 40, "target_loss": 1e9}, "target_loss", "already reached"),
    ):
        resp = api.post(url, json=body)
        assert resp.status_code == 422, (body, resp.text)
        errors = resp.json()["detail"]
        assert any(e["loc"][-1] == field and words in e["msg"] for e in errors), errors
    assert api.post(url, json={"max_iterations": "many"}).status_code == 422
    assert api.post(url, json={"colour": "red"}).status_code == 422

    with _client(portal, tokens["other"]) as other:
        resp = other.post(url, json={"max_iterations": 40})
        assert resp.status_code == 404, "another team's job does not exist for them"

    with session_scope(engine_for(portal.db_url)) as session:
        session.execute(update(Job).where(col(Job.id) == parked).values(
            status=JobStatus.failed, end_reason="loss became nan at iteration 3"))
        session.commit()
    resp = api.post(f"/api/v1/jobs/{parked}/continue", json={"max_iterations": 4000})
    assert resp.status_code == 409 and "fail the same way" in resp.json()["detail"]
    assert api.get(url.removesuffix("/continue")).json()["status"] == "completed"
    assert not [a for a in _audit(api, "job.continue") if a["target"] == f"job {done['id']}"]


def test_a_continued_job_counts_against_the_quotas(portal: Portal) -> None:
    token = make_user_token(portal.db_url, tenant="tight", email="tam@tight.test",
                            role=Role.tenant_admin, max_active_jobs=1)
    with _client(portal, token) as api:
        done = _finished(api, _submit(api, SHORT, max_iterations=10))
        busy = _submit(api, PARKED, max_iterations=90_000)
        assert api.post(f"/api/v1/jobs/{busy}/pause").status_code == 200
        resp = api.post(f"/api/v1/jobs/{done['id']}/continue", json={"max_iterations": 20})
        assert resp.status_code == 409 and "max_active_jobs" in resp.text
        assert api.get(f"/api/v1/jobs/{done['id']}").json()["status"] == "completed"
        assert api.post(f"/api/v1/jobs/{busy}/cancel").status_code == 200
        resp = api.post(f"/api/v1/jobs/{done['id']}/continue", json={"max_iterations": 20})
        assert resp.status_code == 200, resp.text
        assert _finished(api, done["id"])["iterations_done"] == 20


def test_an_experiment_gains_the_configurations_it_does_not_hold(
        portal: Portal, api: httpx.Client, tokens: dict[str, str]) -> None:
    resp = api.post("/api/v1/experiments", json=SWEEP)
    assert resp.status_code == 201, resp.text
    experiment = resp.json()
    url = f"/api/v1/experiments/{experiment['id']}/configurations"

    resp = api.post(url, json={"configurations": [{"learning_rate": 0.3},
                                                  {"learning_rate": 0.1}]})
    assert resp.status_code == 201, resp.text
    grown = resp.json()
    assert len(grown["added"]) == 1, "0.1 is held already"
    added = api.get(f"/api/v1/jobs/{grown['added'][0]}").json()
    assert added["experiment_id"] == experiment["id"] and added["status"] == "queued"
    assert added["params"]["learning_rate"] == 0.3
    assert added["name"] == "lr sweep #3: learning_rate=0.3"
    assert added["stopping"]["max_iterations"] == 10

    # A new axis: the fixed parameter becomes swept; the grid is sampled again.
    resp = api.post(url, json={"space": {"batch_size": {"type": "choice",
                                                        "values": [8, 32]}}})
    assert resp.status_code == 201, resp.text
    wide = resp.json()
    assert sorted(wide["space"]) == ["batch_size", "learning_rate"]
    combos = {(c["params"]["learning_rate"], c["params"]["batch_size"])
              for c in wide["configurations"]}
    assert {(lr, b) for lr in (0.1, 0.01) for b in (8, 32)} <= combos
    assert len(wide["added"]) == 4 and len(wide["job_ids"]) == 7

    for body, words in (
            ({"configurations": [{"learning_rate": 0.1, "batch_size": 8}]}, "nothing to add"),
            ({"configurations": [{"learning_rate": 0.5}]}, "give a value for batch_size"),
            ({"configurations": [{"momentum": 0.5, "learning_rate": 0.5, "batch_size": 8}]},
             "not swept by this experiment: momentum"),
            ({}, "nothing to add"),
            ({"configurations": [{"learning_rate": -1.0, "batch_size": 8}]}, "learning_rate"),
    ):
        resp = api.post(url, json=body)
        assert resp.status_code == 422, (body, resp.text)
        assert words in resp.text, (body, resp.text)
    assert len(api.get(f"/api/v1/experiments/{experiment['id']}").json()["job_ids"]) == 7

    with _client(portal, tokens["other"]) as other:
        assert other.post(url, json={"configurations": [{"learning_rate": 0.9}]}
                          ).status_code == 404
    entries = [a for a in _audit(api, "experiment.extend")
               if a["target"] == f"experiment {experiment['id']}"]
    assert sorted(len(e["details"]["jobs"]) for e in entries) == [1, 4]
    # Leaves the worker to the next test (409 once all its short jobs are done).
    assert api.post(f"/api/v1/experiments/{experiment['id']}/cancel").status_code in (200, 409)


def test_slaq_continue(portal: Portal, api: httpx.Client, tokens: dict[str, str],
                       tmp_path: Path) -> None:
    token = tokens["mine"]
    done = _finished(api, _submit(api, SHORT, max_iterations=20))
    bad = slaq(portal, token, "continue", str(done["id"]), "--max-iterations", "10")
    assert bad.returncode == 1 and "not more than the 20 iterations" in bad.stderr, bad.stderr
    ok = slaq(portal, token, "continue", str(done["id"]), "--max-iterations", "30",
              "--target-loss", "none", "--tolerance", "1e-3")
    assert ok.returncode == 0, ok.stderr
    assert f"job {done['id']} queued: continues from iteration 20 to at most 30" in ok.stdout
    job = api.get(f"/api/v1/jobs/{done['id']}").json()
    assert job["stopping"]["tolerance"] == 1e-3 and job["stopping"]["target_loss"] is None
    assert _finished(api, done["id"])["iterations_done"] > 20
    with session_scope(engine_for(portal.db_url)) as session:
        counted = session.execute(select(func.count()).select_from(LossRecord).where(
            col(LossRecord.job_id) == done["id"])).scalar_one()
    assert counted == api.get(f"/api/v1/jobs/{done['id']}").json()["iterations_done"]

    experiment = api.post("/api/v1/experiments", json=SWEEP).json()
    eid = str(experiment["id"])
    added = slaq(portal, token, "continue", eid, "--experiment", "--add", "learning_rate=0.2",
                 "--add", "learning_rate=0.3")
    assert added.returncode == 0, added.stderr
    assert f"experiment {eid}: 2 jobs added, 4 in all" in added.stdout
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"learning_rate": {"type": "choice", "values": [0.1, 0.4]}}))
    widened = slaq(portal, token, "continue", eid, "--experiment", "--space", str(space))
    assert widened.returncode == 0 and "1 job added, 5 in all" in widened.stdout, widened
    wrong = slaq(portal, token, "continue", eid, "--experiment", "--add", "l2=0.1")
    assert wrong.returncode == 1 and "not swept by this experiment: l2" in wrong.stderr
    mixed = slaq(portal, token, "continue", eid, "--add", "learning_rate=0.9")
    assert mixed.returncode == 2 and "add --experiment" in mixed.stderr
    helped = slaq(portal, token, "--help")
    assert "continue" in helped.stdout
