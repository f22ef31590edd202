"""A caller with no credentials, a bad token and a revoked token each get a
401 that says which of these it is."""

from __future__ import annotations

import httpx
import pytest

from tests.utils.portal import Portal

# Credentials are checked the same way whatever the database.
pytestmark = pytest.mark.one_database


def _detail(portal: Portal, headers: dict[str, str]) -> str:
    resp = httpx.get(f"{portal.base_url}/api/v1/jobs", headers=headers, timeout=30)
    assert resp.status_code == 401, resp.text
    return str(resp.json()["detail"])


def test_missing_credentials_say_sign_in(portal: Portal) -> None:
    assert "Sign in first" in _detail(portal, {})


def test_wrong_token_says_it_is_not_valid(portal: Portal) -> None:
    detail = _detail(portal, {"Authorization": "Bearer slaq_not-a-token"})
    assert "not valid" in detail and "Sign in first" not in detail


def test_revoked_token_says_it_is_not_valid(api: httpx.Client, portal: Portal) -> None:
    created = api.post("/api/v1/auth/tokens", json={"name": "short-lived"})
    assert created.status_code == 201, created.text
    token = created.json()["token"]
    assert httpx.get(f"{portal.base_url}/api/v1/jobs", timeout=30,
                     headers={"Authorization": f"Bearer {token}"}).status_code == 200
    mine = api.get("/api/v1/auth/tokens").json()
    token_id = next(t["id"] for t in mine if t["name"] == "short-lived")
    assert api.delete(f"/api/v1/auth/tokens/{token_id}").status_code in (200, 204)
    assert "not valid" in _detail(portal, {"Authorization": f"Bearer {token}"})
