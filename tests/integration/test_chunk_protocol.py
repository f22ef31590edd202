"""The chunk protocol on a real Redis and real databases, without Celery:
duplicate delivery, stale chunks after a reclaim, and lost-chunk recovery."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import select
from sqlmodel import col

from backend.core.checkpoints import CheckpointStore
from backend.core.db import engine_for, migrate, session_scope
from backend.core.leases import Heartbeats, Leases, local_slot_id
from backend.core.models import Job, JobStatus, LossRecord, Role
from backend.core.redis_keys import RedisKeys
from backend.scheduler.service import Scheduler
from backend.seed import ensure_tenant, ensure_user
from workers.chunk_service import ChunkContext, Outcome, run_chunk
from workers.datasets import load_dataset
from workers.resident import SLOT
from workers.trainers.data import holdout
from workers.trainers.registry import make_trainer


class Sent(list[tuple[int, int, int]]):
    def __call__(self, job_id: int, chunk_seq: int, iterations: int, pool: str = "",
                 queue: str = "", yield_after: int = 0) -> None:
        self.append((job_id, chunk_seq, iterations))


Setup = tuple[Scheduler, ChunkContext, Sent, int]


@pytest.fixture
def setup(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[Setup]:
    migrate(db_url)
    engine = engine_for(db_url)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = RedisKeys(f"chunktest{tmp_path.name}")
    with session_scope(engine) as session:
        tenant = ensure_tenant(session, "t")
        user, _ = ensure_user(session, email="u@t.test", password="x", tenant=tenant,
                              role=Role.member)
        job = Job(tenant_id=tenant.id or 0, user_id=user.id or 0, algorithm="logistic_regression",
                  dataset="iris", params={}, dataset_params={}, max_iterations=30,
                  tolerance=None)
        session.add(job)
        session.commit()
        job_id = job.id or 0
    sent = Sent()
    sched = Scheduler(engine=engine, client=client, keys=keys, send=sent, chunk_seconds=10,
                      lease_seconds=5, default_policy="fifo", default_chunk_iterations=10)
    Heartbeats(client, keys).beat("slot-1", 60)
    ctx = ChunkContext(engine=engine, redis=client, keys=keys,
                       checkpoints=CheckpointStore(tmp_path / "ckpt"), lease_seconds=5)
    yield sched, ctx, sent, job_id
    for key in client.scan_iter(f"{keys.prefix}:*"):
        client.delete(key)


def _iterations(ctx: ChunkContext, job_id: int) -> list[int]:
    with session_scope(ctx.engine) as session:
        rows = session.execute(select(col(LossRecord.iteration))
                               .where(col(LossRecord.job_id) == job_id)
                               .order_by(col(LossRecord.iteration))).all()
    return [int(r[0]) for r in rows]


def test_duplicate_delivery_writes_nothing_twice(setup: Setup) -> None:
    sched, ctx, sent, job_id = setup
    sched.run_round()
    assert sent == [(job_id, 1, 10)]
    first = run_chunk(ctx, *sent[0])
    assert first.outcome == Outcome.ran and first.iterations == 10
    again = run_chunk(ctx, *sent[0])
    assert again.outcome == Outcome.discarded
    assert _iterations(ctx, job_id) == list(range(1, 11))


def test_stale_chunk_is_fenced_off_after_reclaim(setup: Setup) -> None:
    sched, ctx, sent, job_id = setup
    sched.run_round()
    stale = sent[-1]
    # The lease expires as if the worker hung; the scheduler re-grants.
    Leases(ctx.redis, ctx.keys).release(job_id, stale[1])
    result = sched.run_round()
    assert result.reclaimed == [job_id]
    sched.run_round()
    fresh = sent[-1]
    assert fresh[1] == stale[1] + 1
    # The stale worker wakes up and runs: its lease is gone, it must do nothing.
    assert run_chunk(ctx, *stale).outcome == Outcome.discarded
    assert run_chunk(ctx, *fresh).outcome == Outcome.ran
    assert _iterations(ctx, job_id) == list(range(1, 11))


def test_checkpoint_resume_is_exact(setup: Setup) -> None:
    """Chunks resumed from checkpoints give the same losses as one long run."""
    sched, ctx, sent, job_id = setup
    for _ in range(10):
        result = sched.run_round()
        if not result.grants:
            break
        assert run_chunk(ctx, *sent[-1]).outcome == Outcome.ran
    assert len(sent) >= 2, "the job should have needed more than one chunk"
    with session_scope(ctx.engine) as session:
        losses = [r[0] for r in session.execute(
            select(col(LossRecord.loss)).where(col(LossRecord.job_id) == job_id)
            .order_by(col(LossRecord.iteration))).all()]
        job = session.get(Job, job_id)
        assert job is not None and job.status == JobStatus.completed
    # Jobs train on the split that holds validation rows out.
    trainer = make_trainer("logistic_regression", holdout(load_dataset("iris", {})), {}, 0)
    assert losses == [metrics["loss"] for metrics in trainer.step(30)]


def test_policy_respects_free_slots_and_leases(setup: Setup) -> None:
    sched, ctx, sent, job_id = setup
    sched.run_round()
    sched.run_round()  # the job's chunk is in flight: nothing more to grant
    assert len(sent) == 1


def test_a_cadence_state_is_written_behind_and_recorded_by_the_next_commit(
        setup: Setup) -> None:
    sched, ctx, sent, job_id = setup
    ctx.checkpoint_seconds = 0.0  # every chunk's end is due
    ctx.checkpoint_share = 1.0
    # This process is the slot: alive, so the scheduler keeps its resident job there.
    Heartbeats(ctx.redis, ctx.keys).beat(local_slot_id(), 60)
    sched.run_round()
    assert run_chunk(ctx, *sent[-1]).outcome == Outcome.ran
    resident = SLOT.current
    assert resident is not None and resident.job_id == job_id
    pending = resident.pending
    assert pending is not None and pending.iteration == 10, "the state was not written behind"
    with session_scope(ctx.engine) as session:
        job = session.get(Job, job_id)
        # Not durable when the chunk committed, so not yet the job's checkpoint.
        assert job is not None and job.checkpoint_iteration == 0
    assert pending.done.wait(30) and pending.error is None
    assert ctx.checkpoints.load(job_id, 10) is not None
    sched.run_round()
    granted, seq, _ = sent[-1]
    # 10 iterations, whatever the grant: the job must not end (an end saves at once).
    assert run_chunk(ctx, granted, seq, 10).outcome == Outcome.ran
    with session_scope(ctx.engine) as session:
        job = session.get(Job, job_id)
        assert job is not None and job.iterations_done == 20
        assert (job.restores, job.resident_chunks) == (1, 1), "it did not step on"
        assert job.checkpoint_iteration == 10 and job.checkpoints_saved == 1
