"""Bad job specs are refused with a 422 naming the field; nothing is created."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

# A bad spec is refused before anything reaches the database.
pytestmark = pytest.mark.one_database

GOOD: dict[str, Any] = {"algorithm": "logistic_regression", "dataset": "iris",
                        "stopping": {"max_iterations": 100}}

BAD = [
    ({"algorithm": "gradient_magic"}, ["body", "algorithm"], "unknown algorithm"),
    ({"dataset": "imagenet"}, ["body", "dataset"], "unknown dataset"),
    ({"params": {"learning_rate": -0.1}}, ["body", "params", "learning_rate"], "learning_rate"),
    ({"params": {"learning_rate": "fast"}}, ["body", "params", "learning_rate"], "number"),
    ({"params": {"batch_size": "64"}}, ["body", "params", "batch_size"], "number"),
    ({"params": {"learning_rte": 0.1}}, ["body", "params", "learning_rte"], "unknown parameter"),
    ({"stopping": {"max_iterations": 10**9}}, ["body", "stopping", "max_iterations"], "limit"),
    ({"stopping": {"max_iterations": 0}}, ["body", "stopping", "max_iterations"],
     "greater than or equal to 1"),
    ({"colour": "blue"}, ["body", "colour"], "Extra inputs"),
    ({"dataset": "diabetes"}, ["body", "dataset"], "classification"),
    ({"dataset_params": {"n_samples": 5}}, ["body", "dataset_params", "n_samples"],
     "unknown parameter 'n_samples'; known: none"),
]


def _count(api: httpx.Client) -> int:
    return int(api.get("/api/v1/jobs").json()["total"])


@pytest.mark.parametrize(("change", "loc", "words"), BAD)
def test_bad_spec_is_refused(api: httpx.Client, change: dict[str, Any], loc: list[str],
                             words: str) -> None:
    before = _count(api)
    resp = api.post("/api/v1/jobs", json={**GOOD, **change})
    assert resp.status_code == 422, resp.text
    detail = resp.json()["detail"]
    assert isinstance(detail, list) and detail
    matching = [d for d in detail if d["loc"][: len(loc)] == loc]
    assert matching, f"no error at {loc}: {detail}"
    assert words.lower() in matching[0]["msg"].lower(), matching[0]["msg"]
    assert _count(api) == before


def test_dataset_params_are_validated_by_name(api: httpx.Client) -> None:
    resp = api.post("/api/v1/jobs", json={**GOOD, "dataset": "synthetic_classification",
                                          "dataset_params": {"n_samples": 5}})
    assert resp.status_code == 422
    assert resp.json()["detail"][0]["loc"] == ["body", "dataset_params", "n_samples"]


def test_defaults_are_filled_and_returned(api: httpx.Client) -> None:
    catalog = {a["name"]: a for a in api.get("/api/v1/catalog/algorithms").json()}
    resp = api.post("/api/v1/jobs", json=GOOD)
    assert resp.status_code == 201
    params = resp.json()["params"]
    for spec in catalog["logistic_regression"]["params"]:
        assert params[spec["name"]] == spec["default"]
    api.post(f"/api/v1/jobs/{resp.json()['id']}/cancel")


def test_catalog_describes_every_parameter(api: httpx.Client) -> None:
    for kind in ("algorithms", "datasets"):
        entries = api.get(f"/api/v1/catalog/{kind}").json()
        assert entries
        for entry in entries:
            for spec in entry["params"]:
                assert spec["type"] in {"int", "float", "choice"}
                assert spec["help"], f"{entry['name']}.{spec['name']} has no help text"


def test_requests_without_a_valid_token_are_refused(portal_url: str) -> None:
    assert httpx.get(f"{portal_url}/api/v1/jobs").status_code == 401
    bad = httpx.get(f"{portal_url}/api/v1/jobs", headers={"Authorization": "Bearer slaq_nope"})
    assert bad.status_code == 401


def test_another_tenants_job_is_not_found(api: httpx.Client, portal_url: str,
                                          other_token: str) -> None:
    mine = api.post("/api/v1/jobs", json=GOOD).json()
    other = httpx.Client(base_url=portal_url, headers={"Authorization": f"Bearer {other_token}"})
    assert other.get(f"/api/v1/jobs/{mine['id']}").status_code == 404
    assert other.post(f"/api/v1/jobs/{mine['id']}/cancel").status_code == 404
    assert all(j["id"] != mine["id"] for j in other.get("/api/v1/jobs").json()["items"])
    api.post(f"/api/v1/jobs/{mine['id']}/cancel")
