"""The live scheduler with 1,000 queued jobs: time-sized chunks, backlog grants,
changes that take effect in the next grant, a rebuild from the database that
matches the incremental state, and a bulk cancel of everything in one request.

Real Redis, real Celery workers (2 slots), real SQLite; the tests run in order
on one queue.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlmodel import Session, col

from backend.client.api import SlaqClient
from backend.core.db import engine_for, session_scope
from backend.core.leases import Leases
from backend.core.models import Decision, Job, JobStatus, Role, Tenant
from backend.scheduler.service import BACKLOG_PREFIX
from backend.scheduler.state import JobState
from tests.bench.live_scale import BIG_QUOTAS, insert_copies
from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.waiting import wait_until

SPEC: dict[str, Any] = {"algorithm": "logistic_regression", "dataset": "iris", "seed": 0,
                        "params": {}, "stopping": {"max_iterations": 5000, "tolerance": None}}
QUEUED = 1000
DEFAULT_CHUNK = 10  # the portal's DEFAULT_CHUNK_ITERATIONS


@dataclass
class World:
    portal: Portal
    api: httpx.Client
    other: httpx.Client
    admin: httpx.Client
    member_token: str
    other_token: str
    ids: list[int]
    other_ids: list[int]

    def decisions(self, after: int = 0) -> list[Decision]:
        with session_scope(engine_for(self.portal.db_url)) as session:
            return list(session.execute(select(Decision).where(col(Decision.id) > after)
                                        .order_by(col(Decision.id))).scalars())

    def last_decision(self) -> int:
        with session_scope(engine_for(self.portal.db_url)) as session:
            return int(session.execute(select(func.max(col(Decision.id)))).scalar() or 0)

    def grants_after(self, mark: int, n: int) -> list[Decision]:
        return wait_until(lambda: d if len(d := self.decisions(mark)) >= n else None, 90,
                          f"{n} grants after decision {mark}")

    def tenant_id(self, name: str) -> int:
        with session_scope(engine_for(self.portal.db_url)) as session:
            return int(session.execute(select(col(Tenant.id))
                                       .where(col(Tenant.name) == name)).scalar_one())


@pytest.fixture(scope="module")
def world(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    data: Path = tmp_path_factory.mktemp("scale")
    portal = start_portal(data_dir=data, db_url=f"sqlite:///{data / 'scale.db'}",
                          redis_url=redis_url, workers=2, policy="slaq",
                          extra_env={"CHUNK_SECONDS": "0.3"})
    member = make_user_token(portal.db_url, tenant="scale", email="m@scale.test", **BIG_QUOTAS)
    other = make_user_token(portal.db_url, tenant="other", email="o@other.test")
    admin = make_user_token(portal.db_url, tenant="ops", email="a@ops.test",
                            role=Role.platform_admin)
    clients = [httpx.Client(base_url=portal.base_url, timeout=60,
                            headers={"Authorization": f"Bearer {token}"})
               for token in (member, other, admin)]
    try:
        api = clients[0]
        ids = [api.post("/api/v1/jobs", json=dict(SPEC, seed=s)).json()["id"] for s in range(5)]
        ids += insert_copies(portal.db_url, ids[0], QUEUED - len(ids))
        other_ids = [clients[1].post("/api/v1/jobs", json=dict(SPEC, seed=s)).json()["id"]
                     for s in range(3)]
        portal.redis().lpush(portal.keys.wake, "test")
        yield World(portal, clients[0], clients[1], clients[2], member, other, ids, other_ids)
    finally:
        for client in clients:
            client.close()
        portal.close()


def test_chunks_are_sized_by_time_and_freed_slots_granted_from_the_backlog(
        world: World) -> None:
    decisions = world.grants_after(0, 40)
    first_chunks = [d for d in decisions if d.chunk_seq == 1]
    assert len(first_chunks) >= 10, "new jobs should keep being warmed up"
    fixed = [d for d in decisions if d.iterations == DEFAULT_CHUNK]
    # Only the very first chunks, before any job of the kind has reported its
    # speed, may fall back to the default length.
    assert len(fixed) <= 4, [(d.job_id, d.chunk_seq, d.iterations) for d in decisions]
    later_first = first_chunks[4:]
    assert later_first and all(d.iterations > DEFAULT_CHUNK for d in later_first), \
        [(d.job_id, d.iterations, d.reason) for d in later_first]
    assert any(d.reason.startswith(BACKLOG_PREFIX) for d in decisions), \
        [d.reason for d in decisions]


def _head_of_queue(world: World, n: int) -> list[int]:
    """The member's ``n`` jobs nearest the head of the published queue (the
    other tenant's jobs are not the member's to pause)."""
    raw: dict[str, str] = world.portal.redis().hgetall(  # type: ignore[assignment]
        world.portal.keys.waiting)
    mine = set(world.ids)
    ranked = sorted((int(json.loads(v)["position"]), int(k)) for k, v in raw.items()
                    if int(k) in mine)
    return [job_id for _, job_id in ranked[:n]]


@pytest.mark.parametrize("action", ["pause", "cancel"])
def test_pause_and_cancel_take_effect_in_the_next_grant(world: World, action: str) -> None:
    head = wait_until(lambda: _head_of_queue(world, 6), 30, "a published queue")
    done = world.api.post("/api/v1/jobs/bulk", json={"action": action, "ids": head})
    assert done.status_code == 200, done.text
    mark = world.last_decision()
    after = world.grants_after(mark, 4)
    assert not {d.job_id for d in after} & set(head), (head, [d.job_id for d in after])
    if action == "pause":
        # One that was already running may finish its whole job in the chunk
        # it had (chunks are sized by time): resume finds the rest paused.
        paused = [i for i in done.json()["ids"]
                  if world.api.get(f"/api/v1/jobs/{i}").json()["status"] == "paused"]
        assert paused
        resumed = world.api.post("/api/v1/jobs/bulk", json={"action": "resume", "ids": head})
        assert sorted(resumed.json()["ids"]) == sorted(paused)


def test_quota_and_policy_changes_take_effect_in_the_next_grant(world: World) -> None:
    scale, other = world.tenant_id("scale"), world.tenant_id("other")
    patched = world.admin.patch(f"/api/v1/admin/tenants/{scale}", json={"max_slots": 0})
    assert patched.status_code == 200, patched.text
    # Work the other tenant still has to grant: its first jobs may have run
    # to the end already, each in one time-sized chunk on a fast machine.
    world.other_ids += [world.other.post("/api/v1/jobs", json={
        **SPEC, "seed": s, "stopping": {"max_iterations": 50_000, "tolerance": None}}).json()["id"]
        for s in (10, 11)]
    mark = world.last_decision()
    # A round already under way when the change landed may still grant its
    # (at most 2, the free slots) chunks; every later grant must obey.
    after = world.grants_after(mark, 5)[2:]
    assert {d.tenant_id for d in after} == {other}, [(d.job_id, d.tenant_id) for d in after]
    assert world.admin.patch(f"/api/v1/admin/tenants/{scale}",
                             json={"max_slots": BIG_QUOTAS["max_slots"]}).status_code == 200

    assert world.admin.put("/api/v1/admin/policy", json={"name": "fifo"}).status_code == 200
    mark = world.last_decision()
    after = world.grants_after(mark, 5)[2:]
    assert {d.policy for d in after} == {"fifo"}
    assert world.admin.put("/api/v1/admin/policy", json={"name": "slaq"}).status_code == 200


def _comparable(state: JobState) -> dict[int, Any]:
    # The estimate is learnt from history as it streams in; a rebuild starts
    # without one, so it is left out of the comparison.
    return {job_id: replace(state.view(job_id, False), estimated_seconds_per_iteration=None)
            for job_id in state.rows}


def test_incremental_state_matches_a_rebuild_from_the_database(world: World) -> None:
    portal = world.portal
    engine = engine_for(portal.db_url)
    scale, other = world.tenant_id("scale"), world.tenant_id("other")
    for tenant in (scale, other):
        world.admin.patch(f"/api/v1/admin/tenants/{tenant}", json={"max_slots": 0})
    leases = Leases(portal.redis(), portal.keys)
    wait_until(lambda: not leases.live_job_ids(), 60, "the chunks in flight to finish")
    incremental = JobState(portal.redis(), portal.keys, reconcile_seconds=3600)
    with Session(engine) as session:
        incremental.sync(session, set())
    assert incremental.full_scans == 1
    queued = sorted(j for j, r in incremental.rows.items() if r.status == JobStatus.queued
                    and r.tenant_id == scale)
    # Changes the incremental state learns from events alone (it never rescans).
    assert world.api.post("/api/v1/jobs/bulk",
                          json={"action": "pause", "ids": queued[:5]}).json()["changed"] == 5
    assert world.api.post("/api/v1/jobs/bulk",
                          json={"action": "cancel", "ids": queued[5:8]}).json()["changed"] == 3
    assert world.api.post("/api/v1/jobs/bulk",
                          json={"action": "resume", "ids": queued[:2]}).json()["changed"] == 2
    assert world.api.post(f"/api/v1/jobs/{queued[9]}/pause").status_code == 200
    world.ids.append(world.api.post("/api/v1/jobs", json=SPEC).json()["id"])
    world.ids += insert_copies(portal.db_url, world.ids[0], 5)  # no event at all

    def converged() -> bool:
        rebuilt = JobState(portal.redis(), portal.keys)
        with Session(engine) as session:
            incremental.sync(session, set())
            rebuilt.sync(session, set())
        rebuilt.close()
        return incremental.rows == rebuilt.rows and \
            _comparable(incremental) == _comparable(rebuilt)

    wait_until(converged, 15, "the incremental state to match a rebuild")
    assert incremental.full_scans == 1, "caught up from events and new ids, not a rescan"
    assert queued[2] not in incremental.rows and queued[0] in incremental.rows
    assert queued[9] not in incremental.rows and max(world.ids) in incremental.rows
    incremental.close()

    # A restarted scheduler rebuilds its state from the database and grants again.
    portal.stop("scheduler")
    mark = world.last_decision()
    portal.start_scheduler()
    for tenant in (scale, other):
        world.admin.patch(f"/api/v1/admin/tenants/{tenant}",
                          json={"max_slots": BIG_QUOTAS["max_slots"]})
    after = world.grants_after(mark, 3)
    stopped = set(queued[2:8]) | {queued[9]}  # paused or cancelled; [8] was left alone
    assert not stopped & {d.job_id for d in after}


def test_bulk_cancel_of_a_thousand_jobs_is_one_request(world: World) -> None:
    with session_scope(engine_for(world.portal.db_url)) as session:
        active = [int(r[0]) for r in session.execute(
            select(col(Job.id)).where(col(Job.id).in_(world.ids),
                                      col(Job.status).in_([JobStatus.queued, JobStatus.running,
                                                           JobStatus.paused]))).all()]
    # Earlier tests let the scheduler run (and finish) some of them; the point
    # is one request over about a thousand.
    assert len(active) >= QUEUED * 0.9, len(active)
    # Another tenant's ids in the request are ignored, not cancelled.
    done = world.api.post("/api/v1/jobs/bulk",
                          json={"action": "cancel", "ids": active + world.other_ids})
    assert done.status_code == 200, done.text
    changed = set(done.json()["ids"])
    assert done.json()["changed"] == len(changed) and changed <= set(active)
    # A job running when the ids were read may have finished before the
    # request (2 slots: at most 2); every other one is cancelled by it.
    with session_scope(engine_for(world.portal.db_url)) as session:
        finished = {int(r[0]) for r in session.execute(
            select(col(Job.id)).where(col(Job.id).in_(set(active) - changed),
                                      col(Job.status).in_([JobStatus.completed,
                                                           JobStatus.failed]))).all()}
    assert changed | finished == set(active) and len(finished) <= 2, sorted(finished)
    with SlaqClient(world.portal.base_url, world.other_token) as other:
        assert other.bulk("cancel", status="queued")["changed"] >= 0

    def statuses() -> dict[str, int]:
        with session_scope(engine_for(world.portal.db_url)) as session:
            return {str(s): int(n) for s, n in session.execute(
                select(col(Job.status), func.count()).where(col(Job.id).in_(world.ids))
                .group_by(col(Job.status))).all()}

    assert set(statuses()) <= {"cancelled", "completed", "failed"}, statuses()
    leases = Leases(world.portal.redis(), world.portal.keys)
    wait_until(lambda: not set(leases.live_job_ids()) & set(world.ids), 60,
               "the last chunks in flight to finish")
    assert set(statuses()) <= {"cancelled", "completed", "failed"}, statuses()
    cluster = world.api.get("/api/v1/cluster").json()
    assert len(cluster["queued"]) <= 20
    assert cluster["by_tenant"].get("scale", {}).get("queued", 0) == 0
