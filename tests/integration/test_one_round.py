"""The live scheduler and the simulator decide a round the same way (issue 35).

The same cluster is put before both: jobs of two tenants (one at a quota of
one slot) in a real database, three worker slots heartbeating in a real
Redis; some jobs have run (their loss points stored), more never-run jobs
wait than the warm-up admission lets in. The live scheduler runs one round
and sends its chunks; the simulator's round (``decide_round``) is handed
views of the same jobs, built here from the same rows, under a fresh
instance of the same policy. Both must grant the same chunks, in the same
order, of the same lengths.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from sqlmodel import select

from backend.core.db import engine_for, migrate, session_scope
from backend.core.leases import Heartbeats
from backend.core.loss_store import insert_loss_points
from backend.core.models import Job, Role, Tenant, as_utc, utcnow
from backend.core.pools import DEFAULT_POOL
from backend.core.redis_keys import RedisKeys
from backend.scheduler.service import Scheduler
from backend.scheduling.registry import make_policy
from backend.scheduling.simulator import SimConfig, SimPool, decide_round
from backend.scheduling.types import JobView, LossPoint, TenantView
from backend.seed import ensure_tenant, ensure_user

SLOTS = 3
CHUNK_SECONDS = 1.0


class Sent(list[tuple[int, int]]):
    def __call__(self, job_id: int, chunk_seq: int, iterations: int, pool: str = "",
                 queue: str = "", yield_after: int = 0) -> None:
        self.append((job_id, iterations))


def curve(rate: float, n: int) -> list[tuple[int, float, float]]:
    """``n`` loss points of ``0.1 + rate^k``, 0.004 s an iteration."""
    return [(k, 0.1 + rate ** k, 0.004) for k in range(1, n + 1)]


@pytest.mark.parametrize("policy", ["slaq", "fair", "las", "fifo"])
def test_live_and_simulated_rounds_grant_the_same_chunks(
        policy: str, db_url: str, redis_url: str, tmp_path: Path) -> None:
    migrate(db_url)
    engine = engine_for(db_url)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = RedisKeys(f"oneround{policy}{tmp_path.name}")
    start = utcnow() - timedelta(seconds=30)
    histories: dict[int, list[tuple[int, float, float]]] = {}
    with session_scope(engine) as session:
        teams = []
        for name, quota in (("a", 3), ("b", 1)):
            tenant = ensure_tenant(session, f"round-{name}")
            tenant.max_slots = quota
            user, _ = ensure_user(session, email=f"u@{name}.test", password="x",
                                  tenant=tenant, role=Role.member)
            teams.append((tenant.id or 0, user.id or 0))
        session.commit()

        def job(team: int, offset: float, dataset: str) -> Job:
            moment = start + timedelta(seconds=offset)
            tenant_id, user_id = teams[team]
            return Job(tenant_id=tenant_id, user_id=user_id, algorithm="logistic_regression",
                       dataset=dataset, params={}, dataset_params={}, max_iterations=5000,
                       tolerance=None, created_at=moment, waiting_since=moment)

        # Three jobs that have run (two of team a, one of team b) and, on
        # another dataset (so no speed estimate sizes them), seven never-run
        # jobs: four of team a, three of team b.
        ran = [job(0, 0.0, "iris"), job(0, 1.0, "iris"), job(1, 2.0, "iris")]
        new = [job(i % 2, 3.0 + i, "wine") for i in range(7)]
        session.add_all([*ran, *new])
        session.flush()
        for row, (rate, n) in zip(ran, [(0.99, 120), (0.9, 60), (0.97, 200)], strict=True):
            points = curve(rate, n)
            histories[row.id or 0] = points
            insert_loss_points(session, row.id or 0, points)
            row.iterations_done = n
            row.chunks_run = 2
            row.chunk_seq = 2
            row.attained_seconds = 0.004 * n
            row.initial_loss = points[0][1]
            row.waiting_since = start + timedelta(seconds=10 + (row.id or 0))
        session.commit()
        rows = session.exec(select(Job)).all()
        tenants = {t.id or 0: TenantView(t.id or 0, t.max_slots, t.share_weight,
                                         dict(t.pool_slots or {}))
                   for t in session.exec(select(Tenant)).all()}
        views = {
            row.id or 0: JobView(
                job_id=row.id or 0, tenant_id=row.tenant_id,
                submitted_at=as_utc(row.created_at).timestamp(),
                iterations_done=row.iterations_done, max_iterations=row.max_iterations,
                losses=[LossPoint(*p) for p in histories.get(row.id or 0, [])],
                attained_seconds=row.attained_seconds,
                waiting_since=as_utc(row.waiting_since).timestamp(),
                chunks_run=row.chunks_run, initial_loss=row.initial_loss)
            for row in sorted(rows, key=lambda r: r.id or 0)}

    sent = Sent()
    sched = Scheduler(engine=engine, client=client, keys=keys, send=sent,
                      chunk_seconds=CHUNK_SECONDS, lease_seconds=30, default_policy=policy,
                      default_chunk_iterations=10)
    for slot in range(SLOTS):
        Heartbeats(client, keys).beat(f"slot-{slot}", 60)
    try:
        sched.run_round()
        simulated = decide_round(
            make_policy(policy), views,
            SimConfig(slots=SLOTS, chunk_seconds=CHUNK_SECONDS, tenants=tenants,
                      default_chunk_iterations=10, pools=(SimPool(DEFAULT_POOL, SLOTS),)),
            now=time.time())
    finally:
        sched.state.close()
        for key in client.scan_iter(f"{keys.prefix}:*"):
            client.delete(key)
        client.close()
    assert len(sent) == SLOTS, sent
    assert [(grant.job_id, grant.iterations) for grant, _, _ in simulated] == sent
