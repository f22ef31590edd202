"""What the scheduler publishes to Redis, on a real Redis and real databases:
the loss-curve fits behind the job chart, and the single-active lock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from backend.core.db import engine_for, migrate, session_scope
from backend.core.fits import FIT_TTL_SECONDS, publish_fits, read_fit
from backend.core.leases import Heartbeats, SchedulerLock
from backend.core.loss_store import insert_loss_points
from backend.core.models import Job, Role
from backend.core.redis_keys import RedisKeys
from backend.scheduler.service import Scheduler
from backend.scheduling.predictor import LossPredictor, default_horizon, predict_curve
from backend.scheduling.types import JobView, LossPoint
from backend.schemas import Prediction
from backend.seed import ensure_tenant, ensure_user


@dataclass
class Setup:
    client: redis.Redis
    keys: RedisKeys
    db_url: str
    job_ids: list[int]

    def scheduler(self, policy: str) -> Scheduler:
        return Scheduler(engine=engine_for(self.db_url), client=self.client, keys=self.keys,
                         send=lambda *_, **__: None, chunk_seconds=1, lease_seconds=30,
                         default_policy=policy)

    def report(self, job_id: int, iterations: range) -> list[LossPoint]:
        """Loss points 1/k at 0.01 s each, as a worker would write them."""
        points = [(k, 1.0 / k, 0.01) for k in iterations]
        with session_scope(engine_for(self.db_url)) as session:
            insert_loss_points(session, job_id, points)
            session.commit()
        return [LossPoint(*p) for p in points]


@pytest.fixture
def setup(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[Setup]:
    """Two queued jobs (1000 iterations each), one live worker slot."""
    migrate(db_url)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = RedisKeys(f"fittest{tmp_path.name}")
    with session_scope(engine_for(db_url)) as session:
        tenant = ensure_tenant(session, "t")
        user, _ = ensure_user(session, email="u@t.test", password="x", tenant=tenant,
                              role=Role.member)
        jobs = [Job(tenant_id=tenant.id or 0, user_id=user.id or 0, algorithm="mlp",
                    dataset="digits", params={}, dataset_params={}, max_iterations=1000)
                for _ in range(2)]
        session.add_all(jobs)
        session.commit()
        job_ids = [job.id or 0 for job in jobs]
    Heartbeats(client, keys).beat("slot-1", 60)
    yield Setup(client, keys, db_url, job_ids)
    for key in client.scan_iter(f"{keys.prefix}:*"):
        client.delete(key)
    client.close()


def test_published_fit_has_the_prediction_routes_shape(setup: Setup) -> None:
    """Under a policy without a predictor (fifo) the scheduler fits for the
    chart itself; the payload is what the prediction route returned before."""
    fitted, bare = setup.job_ids
    history = setup.report(fitted, range(1, 41))
    setup.scheduler("fifo").run_round()
    payload = read_fit(setup.client, setup.keys, fitted)
    assert payload is not None
    assert Prediction.model_validate(payload).model_dump() == {
        "job_id": fitted, "from_iteration": 40,
        "points": [{"iteration": i, "loss": p, "low": lo, "high": hi}
                   for i, p, lo, hi in predict_curve(history, default_horizon(40, 1000))],
        "family": payload["family"],
    }
    assert len(payload["points"]) == 50 and payload["points"][-1]["iteration"] == 40 + 50
    assert payload["family"] not in ("unknown", "geometric")
    assert payload["fitted_at"] == pytest.approx(time.time(), abs=60)
    assert 0 < setup.client.ttl(setup.keys.fit(fitted)) <= FIT_TTL_SECONDS
    assert read_fit(setup.client, setup.keys, bare) is None, "no history, nothing to publish"


def test_only_refitted_jobs_are_published_again(setup: Setup) -> None:
    job_id = setup.job_ids[0]
    setup.report(job_id, range(1, 41))
    scheduler = setup.scheduler("fifo")
    scheduler.run_round()
    setup.client.delete(setup.keys.fit(job_id))
    scheduler.run_round()
    assert read_fit(setup.client, setup.keys, job_id) is None, "no new points, no refit"
    setup.report(job_id, range(41, 61))
    scheduler.run_round()
    payload = read_fit(setup.client, setup.keys, job_id)
    assert payload is not None and payload["from_iteration"] == 60


def test_slaq_publishes_the_fit_it_schedules_by(setup: Setup) -> None:
    job_id = setup.job_ids[0]
    setup.report(job_id, range(1, 41))
    scheduler = setup.scheduler("slaq")
    scheduler.run_round()
    predictor = getattr(scheduler.policy("slaq"), "predictor", None)
    assert isinstance(predictor, LossPredictor) and len(predictor) >= 1
    refits = predictor.refits
    fit = predictor.fit(JobView(job_id=job_id, tenant_id=0, submitted_at=0.0,
                                iterations_done=40, max_iterations=1000,
                                losses=scheduler.history.points(job_id)))
    assert predictor.refits == refits, "the published fit is the policy's memoised one"
    payload = read_fit(setup.client, setup.keys, job_id)
    assert payload is not None
    assert (payload["from_iteration"], payload["family"]) == (fit.k_last, fit.family)
    assert len(scheduler.predictor) == 0, "no second predictor runs beside slaq's"


def test_read_fit_ignores_unreadable_payloads(setup: Setup) -> None:
    setup.client.set(setup.keys.fit(7), "not json")
    assert read_fit(setup.client, setup.keys, 7) is None
    assert publish_fits(setup.client, setup.keys, []) == 0


# -- the scheduler lock --------------------------------------------------------------------


def test_scheduler_lock_is_renewed_and_released_only_by_its_owner(setup: Setup) -> None:
    a = SchedulerLock(setup.client, setup.keys, "host-a:1", ttl_s=30)
    b = SchedulerLock(setup.client, setup.keys, "host-b:2", ttl_s=30)
    assert a.hold() and not b.hold()
    setup.client.pexpire(setup.keys.scheduler_lock, 5000)
    assert not b.renew()
    assert setup.client.pttl(setup.keys.scheduler_lock) <= 5000, "b must not extend a's lock"
    assert not b.release()
    assert setup.client.get(setup.keys.scheduler_lock) == "host-a:1"
    assert a.renew() and setup.client.pttl(setup.keys.scheduler_lock) > 5000
    assert a.release() and not a.release()
    assert b.hold() and not a.hold()


def test_scheduler_lock_passes_on_when_its_owner_stops_renewing(setup: Setup) -> None:
    a = SchedulerLock(setup.client, setup.keys, "host-a:1", ttl_s=0.2)
    b = SchedulerLock(setup.client, setup.keys, "host-b:2", ttl_s=30)
    assert a.hold() and not b.hold()
    time.sleep(0.3)
    assert b.hold()
    assert not a.renew() and not a.release()
    assert setup.client.get(setup.keys.scheduler_lock) == "host-b:2"
