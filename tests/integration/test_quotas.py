"""Quotas hold under concurrency (real server, SQLite and PostgreSQL) and in
every scheduling round."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from sqlalchemy import func, select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.models import Decision, Job, Role, Tenant
from tests.utils.portal import Portal, make_user_token
from tests.utils.waiting import wait_until

SPEC = {"algorithm": "logistic_regression", "dataset": "iris",
        "stopping": {"max_iterations": 100000, "tolerance": None}}


def test_fifty_concurrent_submissions_against_a_quota_of_ten(portal: Portal) -> None:
    token = make_user_token(portal.db_url, tenant="crowded", email="c@crowded.test",
                            max_active_jobs=10, max_slots=0)
    headers = {"Authorization": f"Bearer {token}"}

    def submit(i: int) -> httpx.Response:
        with httpx.Client(base_url=portal.base_url, headers=headers, timeout=60) as c:
            return c.post("/api/v1/jobs", json={**SPEC, "name": f"crowd {i}"})

    with ThreadPoolExecutor(max_workers=25) as pool:
        responses = list(pool.map(submit, range(50)))
    codes = [r.status_code for r in responses]
    assert codes.count(201) == 10, codes
    assert codes.count(409) == 40, codes
    refused = [r.json()["detail"] for r in responses if r.status_code == 409]
    assert all(d["quota"] == "max_active_jobs" and d["limit"] == 10 for d in refused)
    assert all("max_active_jobs" in d["message"] and "10 of 10" in d["message"]
               for d in refused)
    with session_scope(engine_for(portal.db_url)) as session:
        tenant = session.execute(
            select(Tenant).where(col(Tenant.name) == "crowded")).scalar_one()
        stored = session.execute(select(func.count()).select_from(Job)
                                 .where(col(Job.tenant_id) == tenant.id)).scalar_one()
    assert stored == 10


def test_slot_quota_is_enforced_by_the_scheduler(portal: Portal) -> None:
    """A tenant capped at one slot never has two chunks in flight, although
    two slots are free and three of its jobs wait."""
    token = make_user_token(portal.db_url, tenant="capped", email="x@capped.test",
                            max_slots=1)
    admin = make_user_token(portal.db_url, tenant="platform", email="boss@platform.test",
                            role=Role.platform_admin)
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as c, \
            httpx.Client(base_url=portal.base_url, timeout=30,
                         headers={"Authorization": f"Bearer {admin}"}) as a:
        ids = [c.post("/api/v1/jobs", json={**SPEC, "stopping": {
            "max_iterations": 400, "tolerance": None}}).json()["id"] for _ in range(3)]
        in_flight: list[int] = []

        def all_done() -> bool:
            usage = next(t for t in a.get("/api/v1/admin/tenants").json()
                         if t["name"] == "capped")["usage"]
            in_flight.append(usage["running_slots"])
            return all(c.get(f"/api/v1/jobs/{i}").json()["status"] == "completed" for i in ids)

        wait_until(all_done, 120, "the capped jobs to complete", interval=0.05)
    assert max(in_flight) == 1, "the quota allows one chunk in flight, and one did run"
    with session_scope(engine_for(portal.db_url)) as session:
        granted = set(session.execute(select(col(Decision.job_id))
                                      .where(col(Decision.job_id).in_(ids))).scalars())
    assert granted == set(ids)


def test_admin_lowers_a_quota_and_the_next_submission_is_refused(portal: Portal) -> None:
    admin = make_user_token(portal.db_url, tenant="platform", email="boss@platform.test",
                            role=Role.platform_admin)
    member = make_user_token(portal.db_url, tenant="shrinking", email="s@shrinking.test",
                             max_slots=0)
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {member}"}) as m, \
            httpx.Client(base_url=portal.base_url, timeout=30,
                         headers={"Authorization": f"Bearer {admin}"}) as a:
        assert m.post("/api/v1/jobs", json=SPEC).status_code == 201
        tid = next(t["id"] for t in a.get("/api/v1/admin/tenants").json()
                   if t["name"] == "shrinking")
        bad = a.patch(f"/api/v1/admin/tenants/{tid}", json={"max_active_jobs": -1})
        assert bad.status_code == 422
        ok = a.patch(f"/api/v1/admin/tenants/{tid}", json={"max_active_jobs": 1})
        assert ok.status_code == 200 and ok.json()["quotas"]["max_active_jobs"] == 1
        refused = m.post("/api/v1/jobs", json=SPEC)
        assert refused.status_code == 409
        assert refused.json()["detail"]["quota"] == "max_active_jobs"
        audit = a.get("/api/v1/admin/audit").json()
        assert any(e["action"] == "tenant.quotas" and e["target"] == "shrinking"
                   and e["details"]["after"] == {"max_active_jobs": 1} for e in audit)


def test_a_waiting_job_says_why(portal: Portal) -> None:
    token = make_user_token(portal.db_url, tenant="blocked", email="w@blocked.test",
                            max_slots=0)
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as c:
        first, second = (c.post("/api/v1/jobs", json=SPEC).json()["id"] for _ in range(2))

        def explained() -> dict[str, Any] | None:
            job = c.get(f"/api/v1/jobs/{second}").json()
            return job if job["queue_position"] is not None else None

        job = wait_until(explained, 30, "the scheduler to explain the queue")
        assert job["status"] == "queued"
        assert "slot quota is 0" in job["scheduler_reason"]
        listed = {j["id"]: j for j in c.get("/api/v1/jobs").json()["items"]}
        assert listed[first]["queue_position"] < listed[second]["queue_position"]
        for job_id in (first, second):
            c.post(f"/api/v1/jobs/{job_id}/cancel")


def test_a_taken_tenant_name_or_email_is_a_409_and_nothing_changes(portal: Portal) -> None:
    admin = make_user_token(portal.db_url, tenant="platform", email="names@platform.test",
                            role=Role.platform_admin)
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {admin}"}) as a:
        made = a.post("/api/v1/admin/tenants", json={"name": "twice"})
        assert made.status_code == 201, made.text
        again = a.post("/api/v1/admin/tenants", json={"name": "twice", "quotas": {"max_slots": 9}})
        assert again.status_code == 409 and "exists already" in again.json()["detail"]
        tenants = [t for t in a.get("/api/v1/admin/tenants").json() if t["name"] == "twice"]
        assert len(tenants) == 1 and tenants[0]["quotas"]["max_slots"] != 9
        user = {"email": "Dup@Twice.test", "password": "long enough pw",
                "tenant_id": made.json()["id"]}
        assert a.post("/api/v1/admin/users", json=user).status_code == 201
        dup = a.post("/api/v1/admin/users", json=dict(user, email="dup@twice.test"))
        assert dup.status_code == 409 and "exists already" in dup.json()["detail"]
        emails = [u["email"] for u in a.get("/api/v1/admin/users").json()]
        assert emails.count("dup@twice.test") == 1
