"""A job whose chunks keep getting lost while their worker stays up fails
instead of being queued again for ever; losses that are not the job's doing
(its worker died, its chunk never started) and losses with a stored chunk
between them do not count. Real Redis and both databases, no Celery: the
test plays the worker that starts a chunk and then crashes (claims its lease
and never reports)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from backend.core.checkpoints import CheckpointStore
from backend.core.db import engine_for, migrate, session_scope
from backend.core.leases import Heartbeats, Leases
from backend.core.models import Job, JobStatus, Role
from backend.core.redis_keys import RedisKeys
from backend.scheduler.service import Scheduler
from backend.seed import ensure_tenant, ensure_user
from tests.utils.waiting import wait_until
from workers.chunk_service import ChunkContext, ChunkOutcome, Outcome, run_chunk

LEASE_SECONDS = 0.4
"""Short, so a crashed chunk's lease runs out quickly; the slot's heartbeat outlives it."""
SLOT = "slot-up"


class Sent(list[tuple[int, int, int]]):
    def __call__(self, job_id: int, chunk_seq: int, iterations: int, pool: str = "",
                 queue: str = "", yield_after: int = 0) -> None:
        self.append((job_id, chunk_seq, iterations))


class World:
    def __init__(self, db_url: str, redis_url: str, tmp: Path) -> None:
        migrate(db_url)
        self.engine = engine_for(db_url)
        self.client = redis.Redis.from_url(redis_url, decode_responses=True)
        self.keys = RedisKeys(f"losttest{tmp.name}")
        self.sent = Sent()
        self.sched = Scheduler(engine=self.engine, client=self.client, keys=self.keys,
                               send=self.sent, chunk_seconds=10, lease_seconds=LEASE_SECONDS,
                               default_policy="fifo", default_chunk_iterations=5)
        self.leases = Leases(self.client, self.keys)
        self.beats = Heartbeats(self.client, self.keys)
        self.beats.beat(SLOT, 600)
        self.ctx = ChunkContext(engine=self.engine, redis=self.client, keys=self.keys,
                                checkpoints=CheckpointStore(tmp / "ckpt"), lease_seconds=30)
        with session_scope(self.engine) as session:
            tenant = ensure_tenant(session, "t")
            user, _ = ensure_user(session, email="u@t.test", password="x", tenant=tenant,
                                  role=Role.member)
            job = Job(tenant_id=tenant.id or 0, user_id=user.id or 0,
                      algorithm="logistic_regression", dataset="iris", params={},
                      dataset_params={}, max_iterations=1000, tolerance=None)
            session.add(job)
            session.commit()
            self.job_id = job.id or 0

    def grant(self) -> tuple[int, int, int]:
        """Rounds until the job is granted its next chunk (a lost chunk's job
        is queued again, and granted in that round or the next)."""
        before = len(self.sent)
        try:
            wait_until(lambda: self.sched.run_round().grants, 10, "a grant")
        except TimeoutError:
            raise AssertionError(f"no grant: {self.job()} live={self.leases.live_job_ids()} "
                                 f"slots={self.beats.alive()}") from None
        assert len(self.sent) == before + 1, f"one chunk granted: {self.sent}"
        return self.sent[-1]

    def run(self, chunk: tuple[int, int, int]) -> ChunkOutcome:
        """The chunk runs on this process's slot and reports. Its lease is first
        lengthened to a worker's: the short one is for losing chunks quickly,
        and a trainer's first start in a process (a sandbox, its imports) can
        take longer than it (1.8 s measured when this test ran alone)."""
        assert self.leases.renew(self.job_id, chunk[1], self.ctx.lease_seconds)
        return run_chunk(self.ctx, *chunk)

    def lose(self, chunk: tuple[int, int, int], slot: str | None = SLOT) -> None:
        """The chunk is started by ``slot`` (None: never started), then never reports."""
        if slot is not None:
            assert self.leases.claim(self.job_id, chunk[1], slot) == chunk[1]
        wait_until(lambda: self.leases.holder(self.job_id) is None, 10, "the lease to run out")

    def job(self) -> Job:
        with session_scope(self.engine) as session:
            job = session.get(Job, self.job_id)
            assert job is not None
            return job


@pytest.fixture
def world(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[World]:
    w = World(db_url, redis_url, tmp_path)
    yield w
    for key in w.client.scan_iter(f"{w.keys.prefix}:*"):
        w.client.delete(key)


def test_two_chunks_lost_in_a_row_with_the_worker_up_fail_the_job(world: World) -> None:
    world.lose(world.grant())
    second = world.grant()
    assert second[1] == 2 and world.job().status == JobStatus.running
    world.lose(second)
    world.sched.run_round()
    job = world.job()
    assert job.status == JobStatus.failed, job
    assert job.error is not None and job.error.startswith("its chunks keep failing: 2 chunks")
    assert job.end_reason == job.error and job.finished_at is not None
    # Failed for good: later rounds grant it nothing.
    world.sched.run_round()
    assert len(world.sent) == 2 and world.job().chunk_seq == 2


def test_a_stored_chunk_between_two_losses_breaks_the_row(world: World) -> None:
    world.lose(world.grant())
    ran = world.run(world.grant())
    assert ran.outcome == Outcome.ran, ran
    world.lose(world.grant())
    third = world.grant()
    assert third[1] == 4 and world.job().status == JobStatus.running
    assert world.job().chunks_run == 1


@pytest.mark.parametrize("slot", ["slot-dead", None], ids=["worker-died", "never-started"])
def test_losses_that_are_not_the_jobs_doing_are_not_counted(world: World,
                                                             slot: str | None) -> None:
    if slot is not None:
        world.beats.beat(slot, 60)  # alive when it starts the chunk, gone after
    for seq in range(1, 4):
        chunk = world.grant()
        assert chunk[1] == seq
        if slot is not None:
            assert world.leases.claim(world.job_id, seq, slot) == seq
            world.beats.leave(slot)
        world.lose(chunk, slot=None)
    assert world.grant()[1] == 4 and world.job().status == JobStatus.running
