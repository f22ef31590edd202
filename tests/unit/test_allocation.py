"""The one hard-limits check (``split_grants``) that the simulator and the
live scheduler share: the simulator fails on a violation, the live scheduler
drops the offending grants and dispatches the rest."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from sqlalchemy import update
from sqlmodel import col, select

from backend.core.db import engine_for, migrate, session_scope
from backend.core.leases import Heartbeats
from backend.core.models import Decision, Job, Role, Tenant
from backend.core.portal_settings import set_completion_guard, set_completion_weight
from backend.core.redis_keys import RedisKeys
from backend.scheduler.service import Scheduler
from backend.scheduling import registry
from backend.scheduling.allocation import split_grants
from backend.scheduling.guards import ServiceFloor
from backend.scheduling.registry import POLICIES
from backend.scheduling.types import Grant, JobView, Snapshot, TenantView
from backend.seed import ensure_tenant, ensure_user


def view(job_id: int, tenant: int = 1, *, running: bool = False) -> JobView:
    return JobView(job_id=job_id, tenant_id=tenant, submitted_at=0.0, iterations_done=0,
                   max_iterations=100, running=running)


def snap(jobs: list[JobView], free: int, quotas: dict[int, int] | None = None) -> Snapshot:
    tenants = {t: TenantView(t, max_slots=q) for t, q in (quotas or {}).items()}
    return Snapshot(now=0.0, free_slots=free, total_slots=free + sum(j.running for j in jobs),
                    chunk_seconds=1.0, jobs=jobs, tenants=tenants)


def grant(job_id: int, iterations: int = 10) -> Grant:
    return Grant(job_id, iterations, "test")


def test_valid_grants_pass_unchanged_and_in_order() -> None:
    s = snap([view(1), view(2), view(3)], free=3)
    grants = [grant(3), grant(1), grant(2)]
    assert split_grants(s, grants) == (grants, [])


def test_grants_beyond_the_free_slots_are_rejected() -> None:
    s = snap([view(1), view(2), view(3)], free=2)
    ok, rejected = split_grants(s, [grant(1), grant(2), grant(3)])
    assert ok == [grant(1), grant(2)]
    assert [(g.job_id, reason) for g, reason in rejected] == [
        (3, "grant 3 of 3 exceeds the 2 free slots")]


def test_grants_beyond_a_tenant_quota_are_rejected_counting_chunks_in_flight() -> None:
    jobs = [view(1, tenant=1, running=True), view(2, tenant=1), view(3, tenant=1),
            view(4, tenant=2)]
    ok, rejected = split_grants(snap(jobs, free=3, quotas={1: 2}),
                                [grant(2), grant(3), grant(4)])
    assert ok == [grant(2), grant(4)]
    assert [(g.job_id, reason) for g, reason in rejected] == [
        (3, "tenant 1 over its slot quota (2)")]


@pytest.mark.parametrize(("bad", "why"), [
    (grant(9), "not runnable"),
    (grant(1), "already has a chunk in flight"),
    (grant(2, iterations=0), "fewer than one iteration"),
])
def test_invalid_grants_are_rejected_and_take_no_slot(bad: Grant, why: str) -> None:
    s = snap([view(1, running=True), view(2), view(3)], free=1)
    ok, rejected = split_grants(s, [bad, grant(3)])
    assert ok == [grant(3)], "the refused grant must not use up the only free slot"
    assert len(rejected) == 1 and rejected[0][0] == bad and why in rejected[0][1]


def test_a_second_grant_for_one_job_is_rejected() -> None:
    ok, rejected = split_grants(snap([view(1), view(2)], free=2), [grant(1), grant(1, 5)])
    assert ok == [grant(1)]
    assert "second grant for job 1" in rejected[0][1]


# -- the live scheduler's round --------------------------------------------------------------


class OverGrant:
    """A broken policy: a grant for every waiting job, whatever the limits."""

    name = "over-grant"

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        return [Grant(job.job_id, 5, "greedy") for job in snapshot.waiting()]


class Sent(list[tuple[int, int, int]]):
    def __call__(self, job_id: int, chunk_seq: int, iterations: int, pool: str = "",
                 queue: str = "", yield_after: int = 0) -> None:
        self.append((job_id, chunk_seq, iterations))


@dataclass
class Live:
    sched: Scheduler
    sent: Sent
    tenant_id: int
    job_ids: list[int]

    def set_quota(self, max_slots: int) -> None:
        with session_scope(self.sched.engine) as session:
            session.execute(update(Tenant).where(col(Tenant.id) == self.tenant_id)
                            .values(max_slots=max_slots))
            session.commit()

    def statuses(self) -> list[str]:
        with session_scope(self.sched.engine) as session:
            return [session.get_one(Job, job_id).status for job_id in self.job_ids]


@pytest.fixture
def live(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    """A scheduler on SQLite and the test Redis running ``OverGrant``, with 2
    live worker slots and 3 queued jobs of one tenant."""
    monkeypatch.setitem(POLICIES, OverGrant.name, OverGrant)
    db_url = f"sqlite:///{tmp_path / 'alloc.db'}"
    migrate(db_url)
    engine = engine_for(db_url)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = RedisKeys(f"alloctest{tmp_path.name}")
    with session_scope(engine) as session:
        tenant = ensure_tenant(session, "t")
        user, _ = ensure_user(session, email="u@t.test", password="x", tenant=tenant,
                              role=Role.member)
        jobs = [Job(tenant_id=tenant.id or 0, user_id=user.id or 0,
                    algorithm="logistic_regression", dataset="iris", params={},
                    dataset_params={}, max_iterations=30) for _ in range(3)]
        session.add_all(jobs)
        session.commit()
        tenant_id, job_ids = tenant.id or 0, [job.id or 0 for job in jobs]
    sent = Sent()
    sched = Scheduler(engine=engine, client=client, keys=keys, send=sent, chunk_seconds=10,
                      lease_seconds=30, default_policy=OverGrant.name)
    heartbeats = Heartbeats(client, keys)
    heartbeats.beat("slot-1", 60)
    heartbeats.beat("slot-2", 60)
    yield Live(sched, sent, tenant_id, job_ids)
    for key in client.scan_iter(f"{keys.prefix}:*"):
        client.delete(key)
    client.close()


def test_live_round_drops_grants_over_a_tenant_quota(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    live.set_quota(1)
    with caplog.at_level(logging.WARNING, logger="backend.scheduler.service"):
        result = live.sched.run_round()
    first, *others = live.job_ids
    # Three grants for two free slots, of a tenant allowed one: only the first runs.
    assert live.sent == [(first, 1, 5)]
    assert [g.job_id for g in result.grants] == [first]
    quota = f"tenant {live.tenant_id} over its slot quota (1)"
    assert [(g.job_id, reason) for g, reason in result.rejected] == [
        (job_id, quota) for job_id in others]
    dropped = [r.getMessage() for r in caplog.records if "dropped grant" in r.getMessage()]
    assert len(dropped) == 2 and all(quota in message for message in dropped)
    assert live.statuses() == ["running", "queued", "queued"]
    with session_scope(live.sched.engine) as session:
        assert [d.job_id for d in session.exec(select(Decision)).all()] == [first]


def test_live_round_dispatches_no_more_than_the_free_slots(live: Live) -> None:
    # The round asks for a ranking longer than the free slots (placement may
    # skip jobs no free pool can run), so a third grant is the ranking's tail,
    # not a broken limit: it waits, and nothing is rejected.
    result = live.sched.run_round()
    assert [sent[0] for sent in live.sent] == live.job_ids[:2]
    assert result.rejected == []
    assert live.statuses() == ["running", "running", "queued"]


def test_live_rounds_apply_the_admins_completion_guard(
        live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    # A guarded policy that notes the service floor each instance is built
    # with: the round reads the setting from the database, builds a new
    # instance when it changes and keeps the one it has (and its memo) when not.
    built: list[float | None] = []

    def probe(floor: ServiceFloor | None = None) -> OverGrant:
        built.append(None if floor is None else floor.fraction)
        return OverGrant()

    monkeypatch.setitem(POLICIES, OverGrant.name, probe)
    monkeypatch.setattr(registry, "GUARDED", frozenset({OverGrant.name}))
    live.sched.default_completion_guard = 0.25
    live.sched.run_round()
    with session_scope(live.sched.engine) as session:
        set_completion_guard(session, 0.6)
    live.sched.run_round()
    live.sched.run_round()
    with session_scope(live.sched.engine) as session:
        set_completion_guard(session, 0.0)
    live.sched.run_round()
    assert built == [0.25, 0.6, 0.0]


def test_the_operators_completion_weight_reaches_the_live_slaq(live: Live) -> None:
    # COMPLETION_WEIGHT is the default: every policy instance the scheduler
    # builds for slaq carries it until an admin sets another.
    live.sched.default_completion_weight = 0.02
    first = live.sched.policy("slaq")
    assert getattr(first, "completion_weight", None) == 0.02
    # The admin's new guard builds a new instance; the weight stays.
    second = live.sched.policy("slaq", completion_guard=0.6)
    assert second is not first and getattr(second, "completion_weight", None) == 0.02


def test_live_rounds_apply_the_admins_completion_weight(
        live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    # As the guard: the round reads the admin's weight from the database,
    # builds a new slaq instance when it changes and keeps the one it has
    # (and its memo) when not; COMPLETION_WEIGHT until the admin sets one.
    built: list[float] = []

    def probe(completion_weight: float = 0.0, **_: object) -> OverGrant:
        built.append(completion_weight)
        return OverGrant()

    monkeypatch.setitem(POLICIES, "slaq", probe)
    live.sched.default_policy = "slaq"
    live.sched.default_completion_weight = 0.02
    live.sched.run_round()
    with session_scope(live.sched.engine) as session:
        set_completion_weight(session, 0.3)
    live.sched.run_round()
    live.sched.run_round()
    assert built == [0.02, 0.3]
