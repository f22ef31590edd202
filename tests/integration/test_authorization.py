"""Authorization matrix: every route of the API x every kind of caller.

The routes come from the app's own OpenAPI table, so a route added without a
rule here fails ``test_every_route_has_a_rule``.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.models import ApiToken, Role, Tenant, User, WorkerPool
from backend.main import app
from backend.security import hash_token
from tests.utils.portal import Portal, make_user_token


@pytest.fixture(scope="module")
def module_db_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # Authorization does not depend on the database kind; SQLite keeps it quick.
    yield f"sqlite:///{tmp_path_factory.mktemp('authz') / 'authz.db'}"


ROLES = ["anonymous", "other_member", "other_admin", "member", "tenant_admin", "platform_admin"]
CSV = "a,b,label\n" + "".join(f"{i},{i % 7},{i % 2}\n" for i in range(40))
TRAINER = b"from slaq_trainer import Trainer\n\nclass T(Trainer):\n    name = 't'\n"
JOB_SPEC = {"algorithm": "logistic_regression", "dataset": "iris",
            "stopping": {"max_iterations": 100000, "tolerance": None}}
SPACE = {"learning_rate": {"type": "choice", "values": [0.1, 0.2]}}
EXPERIMENT = {**JOB_SPEC, "space": SPACE}
# What the creation routes submit for every role: done in one chunk, so the
# jobs they leave behind do not crowd the two slots the trained jobs need.
SHORT_JOB = {**JOB_SPEC, "stopping": {"max_iterations": 50, "tolerance": None}}
SHORT_EXPERIMENT = {**SHORT_JOB, "space": SPACE}


@dataclass
class World:
    portal: Portal
    tokens: dict[str, str]
    member_job: int
    member_dataset: int
    member_token_id: int
    member_id: int
    tenant_a: int

    def client(self, role: str) -> httpx.Client:
        headers = {} if role == "anonymous" else {"Authorization": f"Bearer {self.tokens[role]}"}
        return httpx.Client(base_url=self.portal.base_url, headers=headers, timeout=30)

    def new_dataset(self) -> int:
        with self.client("member") as c:
            resp = c.post("/api/v1/datasets", files={"file": ("d.csv", CSV, "text/csv")},
                          data={"name": _unique("d"), "task": "classification"})
            assert resp.status_code == 201, resp.text
            return int(resp.json()["id"])

    def new_code(self) -> int:
        with self.client("member") as c:
            resp = c.post("/api/v1/code", files={"file": ("t.py", TRAINER, "text/x-python")},
                          data={"name": _unique("c")})
            assert resp.status_code == 201, resp.text
            return int(resp.json()["id"])

    def new_experiment(self, pause: bool = False, cancel: bool = False,
                       short: bool = False) -> int:
        with self.client("member") as c:
            resp = c.post("/api/v1/experiments", json=SHORT_EXPERIMENT if short else EXPERIMENT)
            assert resp.status_code == 201, resp.text
            experiment = int(resp.json()["id"])
            if pause:
                assert c.post(f"/api/v1/experiments/{experiment}/pause").status_code == 200
            if cancel:  # over, so it may be deleted
                assert c.post(f"/api/v1/experiments/{experiment}/cancel").status_code == 200
        return experiment

    @functools.cached_property
    def completed_job(self) -> int:
        """A short job of tenant alpha run to completion (what a what-if replays)."""
        with self.client("member") as c:
            resp = c.post("/api/v1/jobs", json={
                "algorithm": "logistic_regression", "dataset": "iris",
                "stopping": {"max_iterations": 20, "tolerance": None}})
            assert resp.status_code == 201, resp.text
            job = int(resp.json()["id"])
            deadline = time.monotonic() + 120
            while c.get(f"/api/v1/jobs/{job}").json()["status"] != "completed":
                assert time.monotonic() < deadline, "the job did not complete in 120 s"
                time.sleep(0.2)
        return job

    def what_if_idle(self) -> None:
        """Waits out a running what-if replay (one runs at a time); then a
        replay of the completed job can start."""
        assert self.completed_job
        deadline = time.monotonic() + 120
        with self.client("platform_admin") as c:
            while (latest := c.get("/api/v1/admin/what-if/latest")).status_code == 200 \
                    and latest.json()["state"] == "running":
                assert time.monotonic() < deadline, "the what-if replay ran over 120 s"
                time.sleep(0.2)

    @functools.cached_property
    def what_if_run(self) -> str:
        """The id of a what-if replay of the completed job."""
        method, path, body = _what_if(self)
        with self.client("platform_admin") as c:
            resp = c.request(method, path, json=body)
            assert resp.status_code == 202, resp.text
        return str(resp.json()["id"])

    def trained_job(self) -> int:
        """A job of tenant alpha with a checkpoint: trained until its first chunk is stored."""
        job = self.new_job()
        deadline = time.monotonic() + 120
        with self.client("member") as c:
            while c.get(f"/api/v1/jobs/{job}").json()["iterations_done"] <= 0:
                assert time.monotonic() < deadline, "no chunk finished in 120 s"
                time.sleep(0.2)
            assert c.post(f"/api/v1/jobs/{job}/pause").status_code == 200
            # Paused, its resident trainer's state is written within a moment.
            while c.get(f"/api/v1/jobs/{job}").json()["residency"]["checkpoint_iteration"] <= 0:
                assert time.monotonic() < deadline, "no checkpoint written in 120 s"
                time.sleep(0.2)
        return job

    def new_member_token(self) -> int:
        """The id of a fresh API token of a new member of tenant alpha."""
        token = make_user_token(self.portal.db_url, tenant="alpha",
                                email=f"{_unique('t')}@alpha.test")
        with session_scope(engine_for(self.portal.db_url)) as session:
            return int(session.execute(select(col(ApiToken.id)).where(
                col(ApiToken.token_hash) == hash_token(token))).scalar_one())

    def new_pool(self) -> str:
        """A worker pool as the scheduler records it once a worker joins."""
        name = _unique("pool-")
        with session_scope(engine_for(self.portal.db_url)) as session:
            session.add(WorkerPool(name=name, cores=2, memory_mb=1024))
            session.commit()
        return name

    def new_job(self, pause: bool = False, cancel: bool = False) -> int:
        with self.client("member") as c:
            job = c.post("/api/v1/jobs", json=JOB_SPEC).json()["id"]
            if pause:
                assert c.post(f"/api/v1/jobs/{job}/pause").status_code == 200
            if cancel:  # over, so it may be deleted
                assert c.post(f"/api/v1/jobs/{job}/cancel").status_code == 200
        return int(job)


@pytest.fixture(scope="module")
def world(portal: Portal) -> World:
    db = portal.db_url
    quotas: dict[str, Any] = {"max_active_jobs": 10_000, "max_queued_jobs": 10_000}
    tokens = {
        "member": make_user_token(db, tenant="alpha", email="m@alpha.test", **quotas),
        "tenant_admin": make_user_token(db, tenant="alpha", email="a@alpha.test",
                                        role=Role.tenant_admin),
        "other_member": make_user_token(db, tenant="beta", email="m@beta.test", **quotas),
        "other_admin": make_user_token(db, tenant="beta", email="a@beta.test",
                                       role=Role.tenant_admin),
        "platform_admin": make_user_token(db, tenant="platform", email="root@platform.test",
                                          role=Role.platform_admin, **quotas),
    }
    with session_scope(engine_for(db)) as session:
        member = session.execute(
            select(User).where(col(User.email) == "m@alpha.test")).scalar_one()
        token_id = session.execute(select(col(ApiToken.id)).where(
            col(ApiToken.token_hash) == hash_token(tokens["member"]))).scalar_one()
        tenant_a = session.execute(
            select(col(Tenant.id)).where(col(Tenant.name) == "alpha")).scalar_one()
        # Code uploads are off by default; every tenant here may, so the
        # matrix below tests tenant scoping rather than the switch.
        for tenant in session.execute(select(Tenant)).scalars():
            tenant.allow_code_uploads = True
            session.add(tenant)
        session.commit()
    w = World(portal, tokens, 0, 0, int(token_id), member.id or 0, int(tenant_a))
    w.member_job = w.new_job(pause=True)
    w.member_dataset = w.new_dataset()
    return w


Request = tuple[str, str, dict[str, Any] | None]  # method, path, json body
Case = tuple[Callable[[World], Request], dict[str, int]]


def everyone(code: int) -> dict[str, int]:
    return dict.fromkeys(ROLES, code)


def signed_in(code: int) -> dict[str, int]:
    return {**everyone(code), "anonymous": 401}


def tenant_a_job(code: int) -> dict[str, int]:
    # Another tenant's job does not exist as far as the caller can tell.
    return {**signed_in(code), "other_member": 404, "other_admin": 404}


def admins(code: int) -> dict[str, int]:
    return {**signed_in(code), "member": 403, "other_member": 403}


def platform_only(code: int) -> dict[str, int]:
    return {**admins(403), "platform_admin": code}


def _unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def _what_if(w: World) -> tuple[str, str, dict[str, Any]]:
    w.what_if_idle()
    return "POST", "/api/v1/admin/what-if", {"hours": 1, "slots": 2, "policies": ["fair"]}



def _latest_what_if(w: World) -> tuple[str, str, None]:
    assert w.what_if_run  # there is a replay to show
    return "GET", "/api/v1/admin/what-if/latest", None


RULES: dict[tuple[str, str], Case] = {
    ("POST", "/api/v1/auth/token"): (
        lambda w: ("POST", "/api/v1/auth/token",
                   {"email": "m@alpha.test", "password": "pw-m@alpha.test"}), everyone(201)),
    ("POST", "/api/v1/auth/login"): (
        lambda w: ("POST", "/api/v1/auth/login",
                   {"email": "m@alpha.test", "password": "pw-m@alpha.test"}), everyone(200)),
    ("POST", "/api/v1/auth/logout"): (
        lambda w: ("POST", "/api/v1/auth/logout", None), everyone(204)),
    ("GET", "/api/v1/auth/me"): (lambda w: ("GET", "/api/v1/auth/me", None), signed_in(200)),
    ("GET", "/api/v1/auth/tokens"): (
        lambda w: ("GET", "/api/v1/auth/tokens", None), signed_in(200)),
    ("POST", "/api/v1/auth/tokens"): (
        lambda w: ("POST", "/api/v1/auth/tokens", {"name": "matrix"}), signed_in(201)),
    ("DELETE", "/api/v1/auth/tokens/{token_id}"): (
        # Tokens belong to their user alone: even admins cannot revoke them.
        lambda w: ("DELETE", f"/api/v1/auth/tokens/{w.member_token_id}", None),
        {**signed_in(404), "member": 204}),
    ("POST", "/api/v1/jobs"): (lambda w: ("POST", "/api/v1/jobs", SHORT_JOB), signed_in(201)),
    ("GET", "/api/v1/jobs"): (lambda w: ("GET", "/api/v1/jobs", None), signed_in(200)),
    ("GET", "/api/v1/jobs/{job_id}"): (
        lambda w: ("GET", f"/api/v1/jobs/{w.member_job}", None), tenant_a_job(200)),
    ("GET", "/api/v1/jobs/{job_id}/losses"): (
        lambda w: ("GET", f"/api/v1/jobs/{w.member_job}/losses", None), tenant_a_job(200)),
    ("GET", "/api/v1/jobs/{job_id}/decisions"): (
        lambda w: ("GET", f"/api/v1/jobs/{w.member_job}/decisions", None), tenant_a_job(200)),
    ("GET", "/api/v1/jobs/{job_id}/prediction"): (
        lambda w: ("GET", f"/api/v1/jobs/{w.member_job}/prediction", None), tenant_a_job(200)),
    ("GET", "/api/v1/jobs/{job_id}/stream"): (
        lambda w: ("GET", f"/api/v1/jobs/{w.member_job}/stream", None), tenant_a_job(200)),
    ("POST", "/api/v1/jobs/{job_id}/pause"): (
        lambda w: ("POST", f"/api/v1/jobs/{w.new_job()}/pause", None), tenant_a_job(200)),
    ("POST", "/api/v1/jobs/{job_id}/resume"): (
        lambda w: ("POST", f"/api/v1/jobs/{w.new_job(pause=True)}/resume", None),
        tenant_a_job(200)),
    ("POST", "/api/v1/jobs/{job_id}/cancel"): (
        lambda w: ("POST", f"/api/v1/jobs/{w.new_job()}/cancel", None), tenant_a_job(200)),
    ("PATCH", "/api/v1/jobs/{job_id}"): (
        lambda w: ("PATCH", f"/api/v1/jobs/{w.new_job()}", {"note": "matrix"}),
        tenant_a_job(200)),
    ("DELETE", "/api/v1/jobs/{job_id}"): (
        lambda w: ("DELETE", f"/api/v1/jobs/{w.new_job(cancel=True)}", None),
        tenant_a_job(204)),
    ("PATCH", "/api/v1/experiments/{experiment_id}"): (
        lambda w: ("PATCH", f"/api/v1/experiments/{w.new_experiment(pause=True)}",
                   {"note": "matrix"}),
        tenant_a_job(200)),
    ("DELETE", "/api/v1/experiments/{experiment_id}"): (
        lambda w: ("DELETE", f"/api/v1/experiments/{w.new_experiment(cancel=True)}", None),
        tenant_a_job(204)),
    # Continued to a short limit, and grown by one short configuration: the
    # jobs these leave queued do not crowd the slots the trained jobs need.
    ("POST", "/api/v1/jobs/{job_id}/continue"): (
        lambda w: ("POST", f"/api/v1/jobs/{w.new_job(cancel=True)}/continue",
                   {"max_iterations": 50}), tenant_a_job(200)),
    ("POST", "/api/v1/experiments/{experiment_id}/configurations"): (
        lambda w: ("POST", f"/api/v1/experiments/"
                   f"{w.new_experiment(cancel=True, short=True)}/configurations",
                   {"configurations": [{"learning_rate": 0.3}]}), tenant_a_job(201)),
    ("GET", "/api/v1/events"): (lambda w: ("GET", "/api/v1/events", None), signed_in(200)),
    ("GET", "/api/v1/catalog/algorithms"): (
        lambda w: ("GET", "/api/v1/catalog/algorithms", None), everyone(200)),
    ("GET", "/api/v1/catalog/datasets"): (
        lambda w: ("GET", "/api/v1/catalog/datasets", None), everyone(200)),
    ("GET", "/api/v1/catalog/policies"): (
        lambda w: ("GET", "/api/v1/catalog/policies", None), everyone(200)),
    ("GET", "/api/v1/admin/tenants"): (
        lambda w: ("GET", "/api/v1/admin/tenants", None), admins(200)),
    ("POST", "/api/v1/admin/tenants"): (
        lambda w: ("POST", "/api/v1/admin/tenants", {"name": _unique("t-")}),
        platform_only(201)),
    ("PATCH", "/api/v1/admin/tenants/{tenant_id}"): (
        lambda w: ("PATCH", f"/api/v1/admin/tenants/{w.tenant_a}", {"share_weight": 1.0}),
        platform_only(200)),
    ("GET", "/api/v1/admin/users"): (lambda w: ("GET", "/api/v1/admin/users", None), admins(200)),
    ("POST", "/api/v1/admin/users"): (
        lambda w: ("POST", "/api/v1/admin/users",
                   {"email": f"{_unique('u')}@alpha.test", "password": "plum-kettle-orbit-41",
                    "tenant_id": w.tenant_a}),
        {**admins(201), "other_admin": 403}),
    ("PATCH", "/api/v1/admin/users/{user_id}"): (
        lambda w: ("PATCH", f"/api/v1/admin/users/{w.member_id}", {"is_active": True}),
        {**admins(200), "other_admin": 404}),
    ("GET", "/api/v1/admin/policy"): (
        lambda w: ("GET", "/api/v1/admin/policy", None), admins(200)),
    ("PUT", "/api/v1/admin/policy"): (
        lambda w: ("PUT", "/api/v1/admin/policy", {"name": "fair"}), platform_only(200)),
    ("GET", "/api/v1/admin/audit"): (lambda w: ("GET", "/api/v1/admin/audit", None), admins(200)),
    ("POST", "/api/v1/datasets"): (
        lambda w: ("POST", "/api/v1/datasets", {"__csv__": _unique("d")}), signed_in(201)),
    ("GET", "/api/v1/datasets"): (lambda w: ("GET", "/api/v1/datasets", None), signed_in(200)),
    ("GET", "/api/v1/datasets/{dataset_id}"): (
        lambda w: ("GET", f"/api/v1/datasets/{w.member_dataset}", None), tenant_a_job(200)),
    ("DELETE", "/api/v1/datasets/{dataset_id}"): (
        lambda w: ("DELETE", f"/api/v1/datasets/{w.new_dataset()}", None), tenant_a_job(204)),
    ("GET", "/api/v1/datasets/{dataset_id}/preview"): (
        lambda w: ("GET", f"/api/v1/datasets/{w.member_dataset}/preview", None),
        tenant_a_job(200)),
    ("GET", "/api/v1/jobs/{job_id}/checkpoint"): (
        lambda w: ("GET", f"/api/v1/jobs/{w.trained_job()}/checkpoint", None),
        tenant_a_job(200)),
    ("POST", "/api/v1/jobs/bulk"): (
        # Another tenant's ids are ignored, not refused (test_bulk_... below).
        lambda w: ("POST", "/api/v1/jobs/bulk", {"action": "cancel", "ids": [w.new_job()]}),
        signed_in(200)),
    ("GET", "/api/v1/admin/tokens"): (
        lambda w: ("GET", "/api/v1/admin/tokens", None), admins(200)),
    ("DELETE", "/api/v1/admin/tokens/{token_id}"): (
        lambda w: ("DELETE", f"/api/v1/admin/tokens/{w.new_member_token()}", None),
        {**admins(204), "other_admin": 404}),
    ("GET", "/api/v1/cluster"): (lambda w: ("GET", "/api/v1/cluster", None), signed_in(200)),
    ("POST", "/api/v1/experiments"): (
        lambda w: ("POST", "/api/v1/experiments", SHORT_EXPERIMENT), signed_in(201)),
    ("GET", "/api/v1/experiments"): (
        lambda w: ("GET", "/api/v1/experiments", None), signed_in(200)),
    ("GET", "/api/v1/experiments/{experiment_id}"): (
        lambda w: ("GET", f"/api/v1/experiments/{w.new_experiment(pause=True)}", None),
        tenant_a_job(200)),
    ("POST", "/api/v1/experiments/{experiment_id}/pause"): (
        lambda w: ("POST", f"/api/v1/experiments/{w.new_experiment()}/pause", None),
        tenant_a_job(200)),
    ("POST", "/api/v1/experiments/{experiment_id}/resume"): (
        lambda w: ("POST", f"/api/v1/experiments/{w.new_experiment(pause=True)}/resume", None),
        tenant_a_job(200)),
    ("POST", "/api/v1/experiments/{experiment_id}/cancel"): (
        lambda w: ("POST", f"/api/v1/experiments/{w.new_experiment()}/cancel", None),
        tenant_a_job(200)),
    ("GET", "/api/v1/cluster/history"): (
        lambda w: ("GET", "/api/v1/cluster/history", None), signed_in(200)),
    ("GET", "/api/v1/jobs/{job_id}/metrics"): (
        lambda w: ("GET", f"/api/v1/jobs/{w.member_job}/metrics", None), tenant_a_job(200)),
    ("GET", "/api/v1/jobs/{job_id}/export"): (
        lambda w: ("GET", f"/api/v1/jobs/{w.member_job}/export", None), tenant_a_job(200)),
    ("POST", "/api/v1/code"): (
        lambda w: ("POST", "/api/v1/code", {"__code__": _unique("c")}), signed_in(201)),
    ("GET", "/api/v1/code"): (lambda w: ("GET", "/api/v1/code", None), signed_in(200)),
    ("GET", "/api/v1/code/{code_id}"): (
        lambda w: ("GET", f"/api/v1/code/{w.new_code()}", None), tenant_a_job(200)),
    ("DELETE", "/api/v1/code/{code_id}"): (
        lambda w: ("DELETE", f"/api/v1/code/{w.new_code()}", None), tenant_a_job(204)),
    ("GET", "/api/v1/admin/pools"): (
        lambda w: ("GET", "/api/v1/admin/pools", None), platform_only(200)),
    ("PATCH", "/api/v1/admin/pools/{name}"): (
        lambda w: ("PATCH", f"/api/v1/admin/pools/{w.new_pool()}", {"reserved_for": ["alpha"]}),
        platform_only(200)),
    ("GET", "/api/v1/health"): (lambda w: ("GET", "/api/v1/health", None), everyone(200)),
    ("POST", "/api/v1/admin/what-if"): (_what_if, platform_only(202)),
    ("GET", "/api/v1/admin/what-if/{run_id}"): (
        lambda w: ("GET", f"/api/v1/admin/what-if/{w.what_if_run}", None), platform_only(200)),
    ("GET", "/api/v1/admin/what-if/latest"): (_latest_what_if, platform_only(200)),
}


def route_table() -> list[tuple[str, str]]:
    return [(method.upper(), path) for path, ops in app.openapi()["paths"].items()
            for method in ops]


def test_every_route_has_a_rule() -> None:
    missing = [r for r in route_table() if r not in RULES]
    assert not missing, f"routes without an authorization rule: {missing}"
    stale = [r for r in RULES if r not in route_table()]
    assert not stale, f"rules for routes that no longer exist: {stale}"


def _call(client: httpx.Client, method: str, path: str, body: dict[str, Any] | None) -> int:
    if path.endswith("/stream") or path.endswith("/events"):
        with client.stream(method, path) as resp:
            return resp.status_code
    if body is not None and "__code__" in body:
        return client.request(method, path, files={"file": ("t.py", TRAINER, "text/x-python")},
                              data={"name": body["__code__"]}).status_code
    if body is not None and "__csv__" in body:
        return client.request(method, path, files={"file": ("d.csv", CSV, "text/csv")},
                              data={"name": body["__csv__"], "task": "classification"}
                              ).status_code
    return client.request(method, path, json=body).status_code


@pytest.mark.parametrize("route", sorted(RULES), ids=lambda r: f"{r[0]} {r[1]}")
def test_route_matrix(world: World, route: tuple[str, str]) -> None:
    build, expected = RULES[route]
    assert set(expected) == set(ROLES)
    got = {}
    for role in ROLES:
        if route == ("DELETE", "/api/v1/auth/tokens/{token_id}") and role == "member":
            continue  # revoking would lock the member out of later checks; see below
        method, path, body = build(world)
        with world.client(role) as client:
            got[role] = _call(client, method, path, body)
    want = {r: c for r, c in expected.items() if r in got}
    assert got == want


def test_member_revokes_own_token_last(world: World) -> None:
    build, expected = RULES[("DELETE", "/api/v1/auth/tokens/{token_id}")]
    extra = make_user_token(world.portal.db_url, tenant="alpha", email="m@alpha.test")
    method, path, _ = build(world)
    with world.client("member") as client:
        assert client.request(method, path).status_code == expected["member"]
        assert client.get("/api/v1/jobs").status_code == 401, "a revoked token must stop working"
    world.tokens["member"] = extra


def test_admin_lists_are_scoped_to_the_tenant(world: World) -> None:
    with world.client("other_admin") as client:
        tenants = client.get("/api/v1/admin/tenants").json()
        users = client.get("/api/v1/admin/users").json()
    assert [t["name"] for t in tenants] == ["beta"]
    assert {u["email"].split("@")[1] for u in users} == {"beta.test"}
    # The route matrix leaves jobs queued in every tenant, and the cluster view
    # lists only the head of the queue: start from an empty queue.
    for role in ("member", "other_member", "platform_admin"):
        with world.client(role) as client:
            for status in ("queued", "running", "paused"):
                resp = client.post("/api/v1/jobs/bulk",
                                   json={"action": "cancel", "filter": {"status": status}})
                assert resp.status_code == 200, resp.text
    # An active job in each tenant, so there is something to leak and something to show.
    alpha_job = world.new_job()
    with world.client("other_member") as client:
        created = client.post("/api/v1/jobs", json=JOB_SPEC)
        assert created.status_code == 201, created.text
        beta_job = int(created.json()["id"])
        try:
            jobs = client.get("/api/v1/jobs").json()["items"]
            cluster = client.get("/api/v1/cluster").json()
        finally:
            assert client.post(f"/api/v1/jobs/{beta_job}/cancel").status_code == 200
    with world.client("member") as client:
        assert client.post(f"/api/v1/jobs/{alpha_job}/cancel").status_code == 200
    assert beta_job in {j["id"] for j in jobs}
    assert all(j["tenant_id"] != world.tenant_a for j in jobs)
    active = cluster["running"] + cluster["queued"]
    shown = [e for e in active if e["job_id"] is not None]
    # Once seen failing under load (2026-11-24, not reproduced): say what the view held.
    assert beta_job in {e["job_id"] for e in shown}, \
        ([j for j in jobs if j["id"] == beta_job], cluster["running"], cluster["queued"])
    assert all(e["tenant_id"] != world.tenant_a for e in shown)
    assert any(e["job_id"] is None and e["tenant_id"] is None for e in active), \
        "tenant alpha's active job should be listed, anonymised"


def test_csrf_is_required_for_cookie_sessions(world: World) -> None:
    with httpx.Client(base_url=world.portal.base_url) as browser:
        me = browser.post("/api/v1/auth/login",
                          json={"email": "m@alpha.test", "password": "pw-m@alpha.test"})
        assert me.status_code == 200
        cookie = me.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie
        csrf = me.json()["csrf_token"]
        assert browser.get("/api/v1/jobs").status_code == 200
        assert browser.post("/api/v1/jobs", json=JOB_SPEC).status_code == 403
        assert browser.post("/api/v1/jobs", json=JOB_SPEC,
                            headers={"X-CSRF-Token": "forged"}).status_code == 403
        made = browser.post("/api/v1/jobs", json=JOB_SPEC, headers={"X-CSRF-Token": csrf})
        assert made.status_code == 201
        browser.post(f"/api/v1/jobs/{made.json()['id']}/cancel", headers={"X-CSRF-Token": csrf})
        assert browser.post("/api/v1/auth/logout").status_code == 204
        assert browser.get("/api/v1/jobs").status_code == 401


def test_sign_in_is_rate_limited(world: World) -> None:
    with httpx.Client(base_url=world.portal.base_url) as c:
        answers: list[httpx.Response] = []
        # The back-off doubles with each failure, so a 429 comes within a few
        # guesses however slowly they arrive (more in tests/integration/test_login.py).
        while len(answers) < 10 and (not answers or answers[-1].status_code != 429):
            answers.append(c.post("/api/v1/auth/login", json={"email": "a@beta.test",
                                                              "password": "guess"}))
        codes = [a.status_code for a in answers]
        assert codes[:3] == [401] * 3 and codes[-1] == 429, codes
        assert "try again" in answers[-1].json()["detail"]
        assert int(answers[-1].headers["Retry-After"]) >= 1


def test_bulk_actions_ignore_other_tenants_jobs(world: World) -> None:
    job = world.new_job()
    with world.client("other_member") as client:
        resp = client.post("/api/v1/jobs/bulk", json={"action": "cancel", "ids": [job]})
        assert resp.status_code == 200, resp.text
        assert resp.json()["changed"] == 0
    with world.client("member") as client:
        assert client.get(f"/api/v1/jobs/{job}").json()["status"] != "cancelled"
        assert client.post(f"/api/v1/jobs/{job}/cancel").status_code == 200


def test_admin_token_list_is_scoped_to_the_tenant(world: World) -> None:
    token_id = world.new_member_token()
    with world.client("other_admin") as client:
        theirs = client.get("/api/v1/admin/tokens").json()
    with world.client("tenant_admin") as client:
        ours = client.get("/api/v1/admin/tokens").json()
    assert token_id in {t["id"] for t in ours}
    assert theirs and token_id not in {t["id"] for t in theirs}
    assert all(t["tenant_id"] != world.tenant_a for t in theirs)
