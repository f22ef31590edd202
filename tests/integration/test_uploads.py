"""Uploaded datasets on the real portal: upload, validate, scope, train, delete."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from backend.core.models import Role
from backend.services.uploads import MAX_UPLOAD_BYTES
from tests.utils.portal import Portal, make_user_token
from tests.utils.waiting import wait_until


def _iris_like(rows: int = 90, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    names = ["setosa", "versicolor", "virginica"]
    lines = ["sepal_length,sepal_width,petal_length,species"]
    for i in range(rows):
        c = i % 3
        x = rng.normal(loc=[1.0 + 2 * c, -c, 3.0 * c], scale=0.4)
        lines.append(",".join(f"{v:.4f}" for v in x) + f",{names[c]}")
    return "\n".join(lines) + "\n"


def _regression(rows: int = 60) -> str:
    rng = np.random.default_rng(1)
    lines = ["target,x1,x2"]
    for _ in range(rows):
        x = rng.normal(size=2)
        lines.append(f"{3 * x[0] - x[1] + rng.normal(scale=0.1):.5f},{x[0]:.5f},{x[1]:.5f}")
    return "\n".join(lines) + "\n"


def _upload(client: httpx.Client, csv: str | bytes, name: str | None = None,
            task: str = "classification", label: str | None = None) -> httpx.Response:
    data = {"name": name or f"ds-{uuid.uuid4().hex[:8]}", "task": task}
    if label is not None:
        data["label"] = label
    body = csv.encode() if isinstance(csv, str) else csv
    return client.post("/api/v1/datasets", data=data,
                       files={"file": ("data.csv", body, "text/csv")})


@pytest.fixture
def other(portal: Portal, other_token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {other_token}"}) as client:
        yield client


def _stored(portal: Portal) -> set[str]:
    return {p.name for p in (portal.data_dir / "uploads").rglob("*") if p.is_file()}


def test_upload_train_and_delete(api: httpx.Client, portal: Portal) -> None:
    before = _stored(portal) if (portal.data_dir / "uploads").exists() else set()
    resp = _upload(api, _iris_like(), name="flowers")
    assert resp.status_code == 201, resp.text
    ds = resp.json()
    assert (ds["rows"], ds["columns"], ds["n_classes"], ds["task"]) == (90, 3, 3, "classification")
    assert ds["dataset"] == f"upload:{ds['id']}"
    assert ds["tasks"] == ["classification", "clustering"]
    added = _stored(portal) - before
    assert len(added) == 1 and next(iter(added)).endswith(".npz")

    listed = api.get("/api/v1/datasets").json()
    assert ds["id"] in [d["id"] for d in listed]
    assert api.get(f"/api/v1/datasets/{ds['id']}").json()["name"] == "flowers"

    spec = {"algorithm": "logistic_regression", "dataset": ds["dataset"],
            "params": {"learning_rate": 0.1},
            "stopping": {"max_iterations": 60, "tolerance": None}}
    job = api.post("/api/v1/jobs", json=spec)
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    # Named by the dataset's own name, not its reference.
    assert job.json()["name"] == "logistic_regression on flowers"
    # While the job is unfinished the dataset cannot go away.
    busy = api.delete(f"/api/v1/datasets/{ds['id']}")
    assert busy.status_code == 409 and "unfinished" in busy.json()["detail"]

    done = wait_until(lambda: (j := api.get(f"/api/v1/jobs/{job_id}").json())["status"]
                      in ("completed", "failed") and j, 90, "the upload job to finish")
    assert done["status"] == "completed", (done, portal.log_tail())
    assert done["iterations_done"] == 60
    assert done["current_loss"] < done["initial_loss"]

    # k-means may cluster the same labelled data.
    km = api.post("/api/v1/jobs", json={"algorithm": "kmeans", "dataset": ds["dataset"],
                                        "stopping": {"max_iterations": 5}})
    assert km.status_code == 201, km.text
    api.post(f"/api/v1/jobs/{km.json()['id']}/cancel")

    assert api.delete(f"/api/v1/datasets/{ds['id']}").status_code == 204
    assert api.get(f"/api/v1/datasets/{ds['id']}").status_code == 404
    assert not added & _stored(portal), "the file goes with the dataset"
    gone = api.post("/api/v1/jobs", json=spec)
    assert gone.status_code == 422 and "not found" in gone.text


def test_regression_upload_runs_linear_regression(api: httpx.Client) -> None:
    ds = _upload(api, _regression(), task="regression", label="target").json()
    assert (ds["columns"], ds["n_classes"], ds["tasks"]) == (2, 0, ["regression", "clustering"])
    bad = api.post("/api/v1/jobs", json={"algorithm": "logistic_regression",
                                         "dataset": ds["dataset"]})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "dataset"]
    assert "classification" in bad.json()["detail"][0]["msg"]
    job = api.post("/api/v1/jobs", json={"algorithm": "linear_regression",
                                         "dataset": ds["dataset"],
                                         "stopping": {"max_iterations": 40, "tolerance": None}})
    assert job.status_code == 201, job.text
    done = wait_until(lambda: (j := api.get(f"/api/v1/jobs/{job.json()['id']}").json())["status"]
                      in ("completed", "failed") and j, 90, "the regression job")
    assert done["status"] == "completed", done


def test_dataset_params_and_bad_refs_are_refused(api: httpx.Client) -> None:
    ds = _upload(api, _iris_like()).json()
    resp = api.post("/api/v1/jobs", json={"algorithm": "logistic_regression",
                                          "dataset": ds["dataset"],
                                          "dataset_params": {"n_samples": 100}})
    assert resp.status_code == 422
    assert resp.json()["detail"][0]["loc"] == ["body", "dataset_params", "n_samples"]
    for ref in ("upload:abc", "upload:0", "upload:99999999"):
        resp = api.post("/api/v1/jobs", json={"algorithm": "logistic_regression", "dataset": ref})
        assert resp.status_code == 422, (ref, resp.text)
        assert resp.json()["detail"][0]["loc"] == ["body", "dataset"]


def test_other_tenant_sees_nothing(api: httpx.Client, other: httpx.Client) -> None:
    ds = _upload(api, _iris_like(), name="private").json()
    assert other.get(f"/api/v1/datasets/{ds['id']}").status_code == 404
    assert other.delete(f"/api/v1/datasets/{ds['id']}").status_code == 404
    assert ds["id"] not in [d["id"] for d in other.get("/api/v1/datasets").json()]
    job = other.post("/api/v1/jobs", json={"algorithm": "logistic_regression",
                                           "dataset": ds["dataset"]})
    assert job.status_code == 422 and "not found" in job.text
    # The same name is free in another tenant, taken in the same one.
    assert _upload(other, _iris_like(), name="private").status_code == 201
    clash = _upload(api, _iris_like(), name="private")
    assert clash.status_code == 409 and "exists" in clash.json()["detail"]
    assert api.get(f"/api/v1/datasets/{ds['id']}").status_code == 200


def test_platform_admin_sees_all_and_members_delete_only_their_own(
        api: httpx.Client, portal: Portal) -> None:
    ds = _upload(api, _iris_like()).json()
    root = make_user_token(portal.db_url, tenant="platform", email="root@uploads.test",
                           role=Role.platform_admin)
    peer = make_user_token(portal.db_url, tenant="team-a", email="carol@team-a.test")
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {root}"}) as admin:
        assert ds["id"] in [d["id"] for d in admin.get("/api/v1/datasets").json()]
        assert admin.get(f"/api/v1/datasets/{ds['id']}").status_code == 200
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {peer}"}) as carol:
        assert carol.get(f"/api/v1/datasets/{ds['id']}").status_code == 200
        assert carol.delete(f"/api/v1/datasets/{ds['id']}").status_code == 403
    assert api.delete(f"/api/v1/datasets/{ds['id']}").status_code == 204


def _rows(n: int) -> str:
    return "a,b,y\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(n))


BAD: list[tuple[dict[str, Any], str]] = [
    ({"csv": ""}, "empty"),
    ({"csv": "a,b,y\n"}, "no data rows"),
    ({"csv": _rows(5)}, "at least 10"),
    ({"csv": _rows(12).replace("3,6,1", "3,six,1")}, "row 5, column 'b'"),
    ({"csv": _rows(12).replace("3,6,1", "3,NaN,1")}, "not a finite number"),
    ({"csv": _rows(12).replace("3,6,1", "3,6")}, "row 5: 2 cells"),
    ({"csv": _rows(12).replace(",1\n", ",0\n")}, "at least 2 classes"),
    ({"csv": b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 10}, "UTF-8"),
    ({"csv": _rows(12), "task": "ranking"}, "must be one of"),
    ({"csv": _rows(12), "name": "../../etc/passwd"}, "letters, digits"),
    ({"csv": _rows(12), "label": "missing"}, "no column named"),
]


@pytest.mark.parametrize(("case", "words"), BAD, ids=[w for _, w in BAD])
def test_bad_uploads_are_refused_clearly(api: httpx.Client, case: dict[str, Any],
                                         words: str) -> None:
    before = len(api.get("/api/v1/datasets").json())
    resp = _upload(api, case["csv"], name=case.get("name"), task=case.get("task",
                   "classification"), label=case.get("label"))
    assert resp.status_code == 422, resp.text
    detail = resp.json()["detail"]
    assert words in detail[0]["msg"], detail
    assert detail[0]["loc"][0] == "body"
    assert len(api.get("/api/v1/datasets").json()) == before


def test_request_shape_errors(api: httpx.Client) -> None:
    assert api.post("/api/v1/datasets", json={"name": "x"}).status_code == 415
    no_file = api.post("/api/v1/datasets", data={"name": "x", "task": "clustering"},
                       files={"other": ("a.csv", b"1,2\n", "text/csv")})
    assert no_file.status_code == 422 and "file" in no_file.text
    no_name = api.post("/api/v1/datasets", data={"task": "clustering"},
                       files={"file": ("a.csv", _rows(12).encode(), "text/csv")})
    assert no_name.status_code == 422 and no_name.json()["detail"][0]["loc"] == ["body", "name"]
    broken = api.post("/api/v1/datasets", content=b"--xyz\r\nnonsense",
                      headers={"content-type": "multipart/form-data; boundary=xyz"})
    assert broken.status_code == 422


def test_oversized_upload_gets_413_and_leaves_nothing(api: httpx.Client, portal: Portal) -> None:
    row = "1.000000,2.000000,3.000000,0\n"
    body = "a,b,c,y\n" + row * (MAX_UPLOAD_BYTES // len(row) + 10)
    before = _stored(portal)
    resp = _upload(api, body)
    assert resp.status_code == 413, resp.text[:300]
    assert "limit" in resp.json()["detail"]
    assert _stored(portal) == before


def test_unauthenticated_upload_is_refused(portal_url: str) -> None:
    with httpx.Client(base_url=portal_url) as anonymous:
        assert _upload(anonymous, _rows(12)).status_code == 401
        assert anonymous.get("/api/v1/datasets").status_code == 401
