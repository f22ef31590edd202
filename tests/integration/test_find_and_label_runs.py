"""Finding and labelling runs through the API (issue 38, items 7 and 8):
filters and sorts done by the database, names, tags and notes on jobs and
experiments, and deleting a finished run with its data, on both databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, insert, select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.models import (
    Job,
    JobStatus,
    JobTag,
    LossRecord,
    Role,
    Tenant,
    User,
    utcnow,
)
from tests.utils.portal import Portal, make_user_token, running_portal

QUEUED = {"algorithm": "logistic_regression", "dataset": "digits",
          "stopping": {"max_iterations": 100_000, "tolerance": None}}


@pytest.fixture(scope="module")
def portal(module_db_url: str, redis_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    """An API and a scheduler with no worker: submitted jobs stay queued."""
    data: Path = tmp_path_factory.mktemp("find")
    with running_portal(data_dir=data, db_url=module_db_url, redis_url=redis_url,
                        workers=0) as running:
        yield running


@pytest.fixture(scope="module")
def tokens(portal: Portal) -> dict[str, str]:
    return {"mine": make_user_token(portal.db_url, tenant="finders", email="fay@finders.test",
                                    role=Role.tenant_admin, max_active_jobs=100),
            "other": make_user_token(portal.db_url, tenant="others", email="oz@others.test")}


@pytest.fixture
def api(portal: Portal, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {tokens['mine']}"}) as client:
        yield client


@pytest.fixture
def other(portal: Portal, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {tokens['other']}"}) as client:
        yield client


def _submit(api: httpx.Client, **spec: Any) -> dict[str, Any]:
    resp = api.post("/api/v1/jobs", json={**QUEUED, **spec})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def _ids(api: httpx.Client, **params: Any) -> list[int]:
    resp = api.get("/api/v1/jobs", params={"limit": 200, **params})
    assert resp.status_code == 200, resp.text
    return [job["id"] for job in resp.json()["items"]]


def _usage(api: httpx.Client) -> dict[str, Any]:
    """What the quotas count for the caller's tenant (a tenant admin sees its own)."""
    tenants = api.get("/api/v1/admin/tenants").json()
    return dict(next(t for t in tenants if t["name"] == "finders")["usage"])


def _seed_finished(db_url: str, tenant: str, rows: list[dict[str, Any]]) -> list[int]:
    """Finished jobs as the workers leave them (evaluations in ``last_eval``):
    running thousands of real jobs is not what these tests are about."""
    with session_scope(engine_for(db_url)) as session:
        tenant_row = session.execute(select(Tenant).where(col(Tenant.name) == tenant)).scalar_one()
        user = session.execute(select(User).where(col(User.tenant_id) == tenant_row.id)
                               ).scalars().first()
        assert user is not None
        now = utcnow()
        ids = []
        for i, row in enumerate(rows):
            job = Job(tenant_id=tenant_row.id or 0, user_id=user.id or 0, algorithm="mlp",
                      dataset="wine", max_iterations=100, iterations_done=100,
                      status=JobStatus.completed, created_at=now - timedelta(seconds=i),
                      **row)
            session.add(job)
            session.flush()
            ids.append(job.id or 0)
        session.commit()
    return ids


def test_filters_and_sorts_are_applied_by_the_database(api: httpx.Client, other: httpx.Client,
                                                       portal: Portal) -> None:
    adam = _submit(api, name="Adam warm-up", params={"learning_rate": 0.1})
    sgd = _submit(api, name="plain SGD", algorithm="linear_regression", dataset="diabetes")
    _submit(other, name="Adam of another team")
    evaluated = _seed_finished(portal.db_url, "finders", [
        {"name": "eval low", "last_eval": {"iteration": 100, "val_accuracy": 0.71}},
        {"name": "eval high", "last_eval": {"iteration": 100, "val_accuracy": 0.93}},
        {"name": "eval none", "last_eval": {}},
    ])
    assert api.patch(f"/api/v1/jobs/{adam['id']}", json={"tags": ["baseline", "adam"]}
                     ).status_code == 200
    assert api.patch(f"/api/v1/jobs/{sgd['id']}", json={"tags": ["baseline"],
                                                         "note": "the ADAM comparison run"}
                     ).status_code == 200

    # Search: name or note, any case; another tenant's "Adam" is never found.
    assert set(_ids(api, q="adam")) == {adam["id"], sgd["id"]}
    assert _ids(api, algorithm="linear_regression") == [sgd["id"]]
    assert _ids(api, dataset="diabetes") == [sgd["id"]]
    assert set(_ids(api, tag="baseline")) == {adam["id"], sgd["id"]}
    assert _ids(api, tag=["baseline", "adam"]) == [adam["id"]], "every tag named"
    assert set(_ids(api, status=["queued"])) == {adam["id"], sgd["id"]}
    assert set(_ids(api, status=["completed", "queued"])) == {adam["id"], sgd["id"], *evaluated}
    assert _ids(api, q="50%_") == [], "LIKE wildcards are literal"

    # The latest held-out metric, best first; a job never evaluated comes last.
    low, high, none = evaluated
    by_accuracy = _ids(api, status="completed", sort="-metric:val_accuracy")
    assert by_accuracy == [high, low, none]
    assert _ids(api, status="completed", sort="metric:val_accuracy") == [low, high, none]
    names = [j["name"] for j in api.get("/api/v1/jobs", params={"sort": "name"}).json()["items"]]
    assert names == sorted(names, key=str.lower)
    page = api.get("/api/v1/jobs", params={"q": "eval", "sort": "-metric:val_accuracy",
                                           "limit": 1, "offset": 1}).json()
    assert page["total"] == 3 and [j["id"] for j in page["items"]] == [low]


@pytest.mark.parametrize(("params", "words"), [
    ({"sort": "colour"}, "sort 'colour' is not known"),
    ({"sort": "-metric:Val Loss"}, "is not a metric name"),
    ({"status": "sleeping"}, "queued"),
    ({"experiment": "x"}, "integer"),
    ({"tag": "t" * 41}, "1 to 40 letters"),
])
def test_bad_filters_are_a_422_that_says_what_is_allowed(api: httpx.Client,
                                                         params: dict[str, str],
                                                         words: str) -> None:
    resp = api.get("/api/v1/jobs", params=params)
    assert resp.status_code == 422, resp.text
    assert words in resp.text, resp.text


def test_many_jobs_one_page(api: httpx.Client, portal: Portal) -> None:
    # Thousands of runs: one filtered, sorted page comes back with the right total.
    with session_scope(engine_for(portal.db_url)) as session:
        tenant = session.execute(select(Tenant).where(col(Tenant.name) == "finders")
                                 ).scalar_one()
        user = session.execute(select(User).where(col(User.tenant_id) == tenant.id)
                               ).scalars().first()
        assert user is not None
        session.execute(insert(Job), [
            {"tenant_id": tenant.id, "user_id": user.id, "name": f"bulk-{i:05d}",
             "algorithm": "mlp", "dataset": "wine", "max_iterations": 100,
             "iterations_done": i % 100, "status": JobStatus.completed, "params": {},
             "dataset_params": {}, "last_eval": {"iteration": 1, "val_loss": (i * 37) % 5000},
             "requirements": {}, "created_at": utcnow(), "waiting_since": utcnow()}
            for i in range(5000)])
        session.commit()
    page = api.get("/api/v1/jobs", params={"q": "bulk-", "sort": "metric:val_loss",
                                           "limit": 5}).json()
    assert page["total"] == 5000
    assert [j["last_eval"]["val_loss"] for j in page["items"]] == [0, 1, 2, 3, 4]


def test_labels_are_bounded_validated_and_tenant_scoped(api: httpx.Client,
                                                        other: httpx.Client) -> None:
    job = _submit(api, name="to label")
    url = f"/api/v1/jobs/{job['id']}"
    changed = api.patch(url, json={"name": "  lr 0.1, batch 32  ",
                                   "tags": ["lr-sweep", "v2", "v2"],
                                   "note": "diverged after\nwarm-up \x1b[31m"})
    assert changed.status_code == 200, changed.text
    shown = api.get(url).json()
    assert shown["name"] == "lr 0.1, batch 32", "trimmed"
    assert shown["tags"] == ["lr-sweep", "v2"], "sorted, once each"
    assert shown["note"] == "diverged after\nwarm-up \\x1b[31m", "newline kept, ESC made inert"
    # A field left out stays; [] clears the tags.
    api.patch(url, json={"tags": []})
    kept = api.get(url).json()
    assert kept["tags"] == [] and kept["note"].startswith("diverged")
    for body, words in (({"name": "a\nb"}, "one line"),
                        ({"name": "x" * 201}, "at most 200 characters"),
                        ({"tags": ["has space"]}, "is not valid"),
                        ({"tags": [f"t{i}" for i in range(21)]}, "at most 20 tags"),
                        ({"note": "n" * 2001}, "at most 2000 characters"),
                        ({"colour": "red"}, "colour")):
        bad = api.patch(url, json=body)
        assert bad.status_code == 422 and words in bad.text, (body, bad.text)
    assert other.patch(url, json={"name": "mine now"}).status_code == 404
    assert other.delete(url).status_code == 404
    assert api.get(url).json()["name"] == "lr 0.1, batch 32"


def test_delete_a_finished_job_with_its_data_audited_quotas_unchanged(
        api: httpx.Client, portal: Portal) -> None:
    job = _submit(api, name="short-lived")
    url = f"/api/v1/jobs/{job['id']}"
    api.patch(url, json={"tags": ["gone"]})
    refused = api.delete(url)
    assert refused.status_code == 409 and "cancel it first" in refused.text
    assert api.post(f"{url}/cancel").status_code == 200
    with session_scope(engine_for(portal.db_url)) as session:
        session.add(LossRecord(job_id=job["id"], iteration=1, loss=0.5, seconds=0.1))
        session.commit()
    checkpoints = portal.data_dir / "checkpoints" / str(job["id"])
    checkpoints.mkdir(parents=True)
    (checkpoints / "000000000001.ckpt").write_bytes(b"state")
    stream = portal.keys.job_stream(job["id"])
    portal.redis().xadd(stream, {"iteration": 1, "loss": 0.5, "seconds": 0.1})
    usage_before = _usage(api)

    assert api.delete(url).status_code == 204
    assert api.get(url).status_code == 404
    assert not checkpoints.exists(), "its model file went with it"
    assert not portal.redis().exists(stream), "and its live loss stream"
    with session_scope(engine_for(portal.db_url)) as session:
        for model, column in ((LossRecord, LossRecord.job_id), (JobTag, JobTag.job_id)):
            left = session.execute(select(func.count()).select_from(model)
                                   .where(col(column) == job["id"])).scalar_one()
            assert left == 0, model
    assert _usage(api) == usage_before
    audit = api.get("/api/v1/admin/audit").json()
    entry = next(a for a in audit if a["action"] == "job.delete")
    assert entry["target"] == f"job {job['id']}" and entry["details"]["name"] == "short-lived"
    assert entry["actor_email"] == "fay@finders.test"
