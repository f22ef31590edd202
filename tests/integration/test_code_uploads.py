"""Uploading trainer code on the real portal: the per-tenant switch, checks,
scoping, storage and the worker-side lookup."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from backend.core.code_refs import load_trainer_code
from backend.core.db import engine_for
from backend.core.models import Role
from backend.services.code_uploads import MAX_CODE_BYTES
from tests.utils.portal import Portal, make_user_token

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trainers"
LEGIT = (FIXTURES / "logistic.py").read_bytes()


def _client(portal: Portal, token: str) -> httpx.Client:
    return httpx.Client(base_url=portal.base_url, timeout=30,
                        headers={"Authorization": f"Bearer {token}"})


def _upload(client: httpx.Client, raw: bytes, filename: str = "trainer.py",
            name: str | None = None) -> httpx.Response:
    data = {"name": name} if name is not None else {}
    return client.post("/api/v1/code", data=data,
                       files={"file": (filename, raw, "text/x-python")})


@pytest.fixture(scope="module")
def root(portal: Portal) -> Iterator[httpx.Client]:
    token = make_user_token(portal.db_url, tenant="platform", email="root@code.test",
                            role=Role.platform_admin)
    with _client(portal, token) as client:
        yield client


@pytest.fixture
def coder(portal: Portal, root: httpx.Client) -> Iterator[httpx.Client]:
    """A member of a fresh tenant that a platform admin allowed to upload code."""
    tenant = f"coders-{uuid.uuid4().hex[:6]}"
    token = make_user_token(portal.db_url, tenant=tenant, email=f"dev@{tenant}.test")
    with _client(portal, token) as client:
        refused = _upload(client, LEGIT)
        assert refused.status_code == 403
        assert "may not upload trainer code" in refused.json()["detail"]
        tenant_id = next(t["id"] for t in root.get("/api/v1/admin/tenants").json()
                         if t["name"] == tenant)
        allowed = root.patch(f"/api/v1/admin/tenants/{tenant_id}",
                             json={"allow_code_uploads": True})
        assert allowed.status_code == 200, allowed.text
        assert allowed.json()["allow_code_uploads"] is True
        yield client


def test_uploads_are_off_until_a_platform_admin_allows_them(
        coder: httpx.Client, portal: Portal, root: httpx.Client) -> None:
    resp = _upload(coder, LEGIT, filename="softmax.py")
    assert resp.status_code == 201, resp.text
    code = resp.json()
    assert code["algorithm"] == f"code:{code['id']}"
    assert code["name"] == "softmax" and code["size"] == len(LEGIT)
    stored = list((portal.data_dir / "code").rglob("*.py"))
    assert [p.read_bytes() for p in stored].count(LEGIT) >= 1
    assert "softmax" not in {p.stem for p in stored}, "stored under a random name"
    # A tenant admin cannot switch it on: only platform admins can.
    admin = make_user_token(portal.db_url, tenant="team-x", email="boss@team-x.test",
                            role=Role.tenant_admin)
    with _client(portal, admin) as boss:
        own = boss.get("/api/v1/admin/tenants").json()
        assert [t["allow_code_uploads"] for t in own] == [False]
        tenant_id = own[0]["id"]
        assert boss.patch(f"/api/v1/admin/tenants/{tenant_id}",
                          json={"allow_code_uploads": True}).status_code == 403
        assert _upload(boss, LEGIT).status_code == 403


def test_list_get_delete_and_other_tenants_see_nothing(
        coder: httpx.Client, portal: Portal, other_token: str) -> None:
    code = _upload(coder, LEGIT, name="mine").json()
    assert code["id"] in [c["id"] for c in coder.get("/api/v1/code").json()]
    assert coder.get(f"/api/v1/code/{code['id']}").json()["sha256"] == code["sha256"]
    assert _upload(coder, LEGIT, name="mine").status_code == 409
    with _client(portal, other_token) as other:
        assert other.get(f"/api/v1/code/{code['id']}").status_code == 404
        assert code["id"] not in [c["id"] for c in other.get("/api/v1/code").json()]
        assert other.delete(f"/api/v1/code/{code['id']}").status_code == 404
    assert coder.delete(f"/api/v1/code/{code['id']}").status_code == 204
    assert coder.get(f"/api/v1/code/{code['id']}").status_code == 404


def test_worker_lookup_returns_only_the_tenants_own_code(
        coder: httpx.Client, portal: Portal) -> None:
    code = _upload(coder, LEGIT).json()
    engine = engine_for(portal.db_url)
    path = load_trainer_code(engine, code["algorithm"], code["tenant_id"],
                             data_dir=portal.data_dir)
    assert path.read_bytes() == LEGIT
    with pytest.raises(LookupError, match="not found"):
        load_trainer_code(engine, code["algorithm"], code["tenant_id"] + 1000,
                          data_dir=portal.data_dir)
    with pytest.raises(LookupError, match="not a trainer code reference"):
        load_trainer_code(engine, "logistic_regression", code["tenant_id"])
    with pytest.raises(LookupError, match="not found"):
        load_trainer_code(engine, "code:999999", code["tenant_id"])


@pytest.mark.parametrize(("filename", "raw", "status", "words"), [
    ("t.py", b"def broken(:\n", 422, "syntax error at line 1"),
    ("t.py", b"x = '\xff'\n", 422, "not UTF-8"),
    ("t.zip", b"PK\x03\x04", 422, "ends in .py"),
    ("t.py", b"", 422, "empty"),
    ("t.py", b"#" * (MAX_CODE_BYTES + 1), 413, "256 KiB"),
])
def test_bad_uploads_are_refused_clearly(coder: httpx.Client, filename: str, raw: bytes,
                                         status: int, words: str) -> None:
    resp = _upload(coder, raw, filename=filename)
    assert resp.status_code == status, resp.text
    assert words in resp.text


def test_upload_never_runs_the_code(coder: httpx.Client, tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    source = LEGIT + f"\nopen({str(marker)!r}, 'w').write('ran')\n".encode()
    assert _upload(coder, source).status_code == 201
    assert not marker.exists()


def test_requests_without_a_file_are_refused(coder: httpx.Client) -> None:
    assert coder.post("/api/v1/code", json={"source": "x"}).status_code == 415
    missing = coder.post("/api/v1/code", data={"name": "x"}, files={"other": ("a", b"b")})
    assert missing.status_code == 422 and "field named 'file'" in missing.text
