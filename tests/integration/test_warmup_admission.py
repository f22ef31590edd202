"""The live scheduler's warm-up shares on a real Redis and real databases: a
sweep's new configurations start on at most half the slots, and a job of its
own submitted after them starts at once (with one share for both, the
configurations, first in line, would take both slots)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import redis

from backend.core.db import engine_for, migrate, session_scope
from backend.core.leases import Heartbeats
from backend.core.models import Experiment, Job, Role, utcnow
from backend.core.redis_keys import RedisKeys
from backend.scheduler.service import Scheduler
from backend.seed import ensure_tenant, ensure_user

SLOTS = 2


class Sent(list[int]):
    def __call__(self, job_id: int, chunk_seq: int, iterations: int, pool: str = "",
                 queue: str = "", yield_after: int = 0) -> None:
        self.append(job_id)


def test_sweep_configurations_leave_slots_to_a_job_of_its_own(
        db_url: str, redis_url: str, tmp_path: Path) -> None:
    migrate(db_url)
    engine = engine_for(db_url)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = RedisKeys(f"warmup{tmp_path.name}")
    start = utcnow() - timedelta(seconds=2)
    with session_scope(engine) as session:
        tenant = ensure_tenant(session, "t")
        user, _ = ensure_user(session, email="u@t.test", password="x", tenant=tenant,
                              role=Role.member)
        sweep = Experiment(tenant_id=tenant.id or 0, user_id=user.id or 0, name="sweep")
        session.add(sweep)
        session.flush()

        def job(offset: float, experiment: int | None) -> Job:
            moment = start + timedelta(seconds=offset)
            return Job(tenant_id=tenant.id or 0, user_id=user.id or 0,
                       algorithm="logistic_regression", dataset="iris", params={},
                       dataset_params={}, max_iterations=30, tolerance=None,
                       experiment_id=experiment, created_at=moment, waiting_since=moment)

        configurations = [job(0.1 * i, sweep.id) for i in range(6)]
        own = job(1.0, None)
        session.add_all([*configurations, own])
        session.commit()
        sweep_ids = {j.id or 0 for j in configurations}
        own_id = own.id
    sent = Sent()
    sched = Scheduler(engine=engine, client=client, keys=keys, send=sent, chunk_seconds=10,
                      lease_seconds=30, default_policy="slaq", default_chunk_iterations=10)
    for slot in range(SLOTS):
        Heartbeats(client, keys).beat(f"slot-{slot}", 60)
    try:
        sched.run_round()
        assert own_id in sent, f"the job of its own did not start: {sent}"
        started = [j for j in sent if j in sweep_ids]
        assert started == [min(sweep_ids)], "the oldest configuration, on half the slots"
        # The configurations left waiting say why.
        waiting = {int(k): json.loads(v) for k, v in client.hgetall(keys.waiting).items()}
        held = sweep_ids - set(sent)
        assert held and held <= set(waiting)
    finally:
        for key in client.scan_iter(f"{keys.prefix}:*"):
            client.delete(key)
