"""Values JSON should not carry (non-finite numbers, lone surrogates, NUL,
over-long strings) are refused with a 422 naming the field; nothing is
stored, and the same kept-alive connection goes on working."""

from __future__ import annotations

import json

import httpx
import pytest

from backend.core.models import Role
from tests.utils.portal import Portal, make_user_token

GOOD = ('{"name": "ok", "algorithm": "logistic_regression", "dataset": "iris", '
        '"seed": 1, "stopping": {"max_iterations": 100, "tolerance": 0.0001}}')

BAD_SPECS = [
    (GOOD.replace('"tolerance": 0.0001', '"tolerance": NaN'), ["body", "stopping", "tolerance"],
     "finite"),
    (GOOD.replace('"max_iterations": 100', '"max_iterations": Infinity'),
     ["body", "stopping", "max_iterations"], "finite"),
    (GOOD.replace('"seed": 1', '"seed": -Infinity'), ["body", "seed"], "finite"),
    (GOOD.replace('"max_iterations": 100', '"max_iterations": 100, "target_loss": 1e999'),
     ["body", "stopping", "target_loss"], "finite"),
    (GOOD.replace('"max_iterations": 100', '"max_iterations": 100, "target_loss": Infinity'),
     ["body", "stopping", "target_loss"], "finite"),
    (GOOD.replace('"ok"', '"a\\ud800b"'), ["body", "name"], "unicode"),
    (GOOD.replace('"ok"', '"a\\u0000b"'), ["body", "name"], "nul"),
    (GOOD.replace('"ok"', json.dumps("x" * 20_000)), ["body", "name"], "too long"),
]


def _count(api: httpx.Client) -> int:
    return int(api.get("/api/v1/jobs").json()["total"])


def _field_error(resp: httpx.Response, loc: list[str]) -> str:
    assert resp.status_code == 422, resp.text
    detail = resp.json()["detail"]
    matching = [d for d in detail if d["loc"][: len(loc)] == loc]
    assert matching, f"no error at {loc}: {detail}"
    return str(matching[0]["msg"]).lower()


@pytest.mark.parametrize(("body", "loc", "words"), BAD_SPECS)
def test_bad_value_in_a_job_spec_is_a_422_and_stores_nothing(
        api: httpx.Client, body: str, loc: list[str], words: str) -> None:
    before = _count(api)
    resp = api.post("/api/v1/jobs", content=body.encode(),
                    headers={"content-type": "application/json"})
    assert words in _field_error(resp, loc)
    # Same client, same kept-alive connection: still served.
    assert _count(api) == before


def test_the_good_spec_these_are_made_from_is_accepted(api: httpx.Client) -> None:
    resp = api.post("/api/v1/jobs", content=GOOD.encode(),
                    headers={"content-type": "application/json"})
    assert resp.status_code == 201, resp.text
    api.post(f"/api/v1/jobs/{resp.json()['id']}/cancel")


def _nested(depth: int, kind: str) -> bytes:
    inner = "[" * depth + "]" * depth if kind == "arrays" else '{"a": ' * depth + "1" + "}" * depth
    return ('{"name": "deep", "algorithm": "logistic_regression", "dataset": "iris", '
            f'"params": {inner}, "email": "a@b.test", "password": "x"}}').encode()


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/auth/tokens", "/api/v1/auth/token"])
@pytest.mark.parametrize("depth", [1_000, 100_000])
@pytest.mark.parametrize("kind", ["arrays", "objects"])
def test_deeply_nested_json_is_a_422_not_a_500(api: httpx.Client, path: str, depth: int,
                                                kind: str) -> None:
    before = _count(api)
    resp = api.post(path, content=_nested(depth, kind),
                    headers={"content-type": "application/json"})
    assert resp.status_code == 422, resp.text
    assert "nested more than 64 levels deep" in resp.json()["detail"][0]["msg"]
    assert _count(api) == before


def test_json_nested_a_few_levels_still_reaches_the_route(api: httpx.Client) -> None:
    resp = api.post("/api/v1/jobs", content=_nested(8, "arrays"),
                    headers={"content-type": "application/json"})
    # The route's own validation answers (params is no list of lists), not the guard.
    assert resp.status_code == 422, resp.text
    assert "nested" not in resp.text


def test_non_finite_number_in_a_query_string_is_a_422(api: httpx.Client) -> None:
    resp = api.get("/api/v1/jobs", params={"limit": "NaN"})
    assert "integer" in _field_error(resp, ["query", "limit"])
    assert api.get("/api/v1/jobs").status_code == 200


def test_lone_surrogate_in_a_login_email_is_a_422(portal: Portal) -> None:
    body = '{"email": "a\\udc00@example.com", "password": "whatever-long-enough"}'
    with httpx.Client(base_url=portal.base_url, timeout=30) as client:
        resp = client.post("/api/v1/auth/token", content=body.encode(),
                           headers={"content-type": "application/json"})
        assert "unicode" in _field_error(resp, ["body", "email"])
        assert client.get("/api/v1/health").status_code == 200


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_share_weight_is_a_422_and_changes_nothing(portal: Portal,
                                                              value: str) -> None:
    token = make_user_token(portal.db_url, tenant="ops", email="root@ops.test",
                            role=Role.platform_admin)
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as admin:
        tenants = admin.get("/api/v1/admin/tenants").json()
        assert tenants
        target = tenants[0]
        resp = admin.patch(f"/api/v1/admin/tenants/{target['id']}",
                           content=f'{{"share_weight": {value}}}'.encode(),
                           headers={"content-type": "application/json"})
        assert "finite" in _field_error(resp, ["body", "share_weight"])
        after = {t["id"]: t for t in admin.get("/api/v1/admin/tenants").json()}
        assert after[target["id"]]["quotas"] == target["quotas"]


@pytest.mark.parametrize(("body", "loc", "words"), [
    ('{"completion_guard": 1.5}', ["body", "completion_guard"], "less than or equal to 1"),
    ('{"completion_guard": -0.1}', ["body", "completion_guard"], "greater than or equal to 0"),
    ('{"completion_guard": NaN}', ["body", "completion_guard"], "finite"),
    ('{"name": "fair", "completion_guard": "lots"}', ["body", "completion_guard"], "number"),
    ('{"completion_weight": 2}', ["body", "completion_weight"], "less than or equal to 1"),
    ('{"completion_weight": -1e-3}', ["body", "completion_weight"], "greater than or equal to 0"),
    ('{"completion_weight": Infinity}', ["body", "completion_weight"], "finite"),
    ("{}", ["body"], "give the policy's name, its completion_guard, its completion_weight"),
    ('{"name": "nope", "completion_guard": 0.5}', ["body", "name"], "unknown policy"),
])
def test_bad_policy_setting_is_a_422_and_changes_nothing(
        portal: Portal, body: str, loc: list[str], words: str) -> None:
    token = make_user_token(portal.db_url, tenant="ops", email="root@ops.test",
                            role=Role.platform_admin)
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as admin:
        before = admin.get("/api/v1/admin/policy").json()
        resp = admin.put("/api/v1/admin/policy", content=body.encode(),
                         headers={"content-type": "application/json"})
        assert words in _field_error(resp, loc)
        assert admin.get("/api/v1/admin/policy").json() == before


@pytest.mark.parametrize("field", ["completion_guard", "completion_weight"])
def test_a_policy_setting_is_set_alone_audited_and_read_back(portal: Portal, field: str) -> None:
    token = make_user_token(portal.db_url, tenant="ops", email="root@ops.test",
                            role=Role.platform_admin)
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as admin:
        before = admin.get("/api/v1/admin/policy").json()
        assert "slaq" in before["guarded"]
        wanted = 0.07 if before[field] != 0.07 else 0.03
        resp = admin.put("/api/v1/admin/policy", json={field: wanted})
        assert resp.status_code == 200, resp.text
        after = admin.get("/api/v1/admin/policy").json()
        assert after == {**before, field: wanted}
        audit = admin.get("/api/v1/admin/audit").json()
        entry = next(e for e in audit if e["action"] == f"policy.{field}")
        assert (entry["target"], entry["details"]["before"]) == (
            f"{wanted:g}", f"{before[field]:g}")
        assert admin.put("/api/v1/admin/policy", json={
            field: before[field]}).status_code == 200
