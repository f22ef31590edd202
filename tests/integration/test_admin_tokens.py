"""Admins list and revoke API tokens: tenant admins their own tenant's users',
platform admins everyone's; members not at all."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from backend.core.models import Role
from tests.utils.portal import Portal, make_user_token

Client = Callable[[str], httpx.Client]


@pytest.fixture
def client(portal: Portal) -> Iterator[Client]:
    opened: list[httpx.Client] = []

    def make(token: str) -> httpx.Client:
        opened.append(httpx.Client(base_url=portal.base_url, timeout=30,
                                   headers={"Authorization": f"Bearer {token}"}))
        return opened[-1]

    yield make
    for c in opened:
        c.close()


def _works(client: Client, token: str) -> bool:
    return client(token).get("/api/v1/auth/me").status_code == 200


def _ids(resp: httpx.Response) -> dict[str, list[int]]:
    assert resp.status_code == 200, resp.text
    out: dict[str, list[int]] = {}
    for t in resp.json():
        out.setdefault(t["user_email"], []).append(t["id"])
    return out


def test_tenant_admins_see_and_revoke_their_tenants_tokens_only(
        portal: Portal, client: Client) -> None:
    boss = make_user_token(portal.db_url, tenant="tk-a", email="boss@tk-a.test",
                           role=Role.tenant_admin)
    amy = make_user_token(portal.db_url, tenant="tk-a", email="amy@tk-a.test")
    ben = make_user_token(portal.db_url, tenant="tk-b", email="ben@tk-b.test")
    root = make_user_token(portal.db_url, tenant="tk-a", email="root@tk-a.test",
                           role=Role.platform_admin)

    seen = _ids(client(boss).get("/api/v1/admin/tokens"))
    assert {"boss@tk-a.test", "amy@tk-a.test", "root@tk-a.test"} <= set(seen)
    assert "ben@tk-b.test" not in seen
    everyone = _ids(client(root).get("/api/v1/admin/tokens"))
    assert {"boss@tk-a.test", "amy@tk-a.test", "ben@tk-b.test"} <= set(everyone)
    entry = next(t for t in client(boss).get("/api/v1/admin/tokens").json()
                 if t["user_email"] == "amy@tk-a.test")
    assert entry["state"] == "active" and entry["name"] == "test"
    assert "token" not in entry and "token_hash" not in entry

    # Members may not; another tenant's token is "not found"; a platform
    # admin's token is theirs to manage.
    assert client(amy).get("/api/v1/admin/tokens").status_code == 403
    ben_token = everyone["ben@tk-b.test"][-1]
    missing = client(boss).delete(f"/api/v1/admin/tokens/{ben_token}")
    assert missing.status_code == 404 and missing.json()["detail"] == f"token {ben_token} not found"
    assert _works(client, ben)
    root_token = seen["root@tk-a.test"][-1]
    assert client(boss).delete(f"/api/v1/admin/tokens/{root_token}").status_code == 403
    assert _works(client, root)

    amy_token = seen["amy@tk-a.test"][-1]
    assert client(boss).delete(f"/api/v1/admin/tokens/{amy_token}").status_code == 204
    assert not _works(client, amy)
    assert client(boss).delete(f"/api/v1/admin/tokens/{amy_token}").status_code == 204
    after = client(boss).get("/api/v1/admin/tokens").json()
    assert amy_token not in [t["id"] for t in after]
    revoked = client(boss).get("/api/v1/admin/tokens?include_revoked=true").json()
    assert next(t for t in revoked if t["id"] == amy_token)["state"] == "revoked"
    audit = client(boss).get("/api/v1/admin/audit").json()
    assert any(a["action"] == "token.revoke" and "amy@tk-a.test" in a["target"] for a in audit)

    # Platform admins revoke anyone's.
    assert client(root).delete(f"/api/v1/admin/tokens/{ben_token}").status_code == 204
    assert not _works(client, ben)


def test_filter_by_user(portal: Portal, client: Client) -> None:
    boss = make_user_token(portal.db_url, tenant="tk-c", email="boss@tk-c.test",
                           role=Role.tenant_admin)
    make_user_token(portal.db_url, tenant="tk-c", email="cy@tk-c.test")
    users = client(boss).get("/api/v1/admin/users").json()
    cy = next(u["id"] for u in users if u["email"] == "cy@tk-c.test")
    listed = client(boss).get(f"/api/v1/admin/tokens?user_id={cy}").json()
    assert listed and {t["user_email"] for t in listed} == {"cy@tk-c.test"}
