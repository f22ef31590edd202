"""Recovery from killed processes on real Redis, Celery workers and databases:
a SIGKILLed scheduler is replaced within the scheduler lock's short TTL, a
SIGKILLed Celery main process's chunks are reclaimed once its slots stop
heartbeating (not when their leases expire), and of two schedulers started
together exactly one grants."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import redis
from sqlalchemy import select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.leases import Heartbeats, Leases, SchedulerLock
from backend.core.models import Decision, Job, JobStatus, as_utc
from backend.core.redis_keys import RedisKeys
from tests.integration.test_end_to_end import stored_iterations, submit, wait_finished
from tests.utils.portal import Portal, make_user_token, running_portal
from tests.utils.waiting import wait_until

TAKEOVER_BOUND_SECONDS = 3.0
"""The issue asks for recovery within 2 s; the margin absorbs a loaded test host."""
HEARTBEAT_TTL_SECONDS = 3.0
"""HEARTBEAT_SECONDS=1 in the test portal, times the misses a slot is allowed."""
RECLAIM_BOUND_SECONDS = HEARTBEAT_TTL_SECONDS + 5.0
"""Heartbeat TTL plus a few scheduler ticks on a loaded host; far below the lease."""
LEASE_SECONDS = 60
"""So long that a chunk recovered before it could only have been reclaimed by heartbeat."""
ITERATIONS = 240
JOB_SPEC: dict[str, Any] = {
    "algorithm": "mlp", "dataset": "digits", "params": {"hidden_units": 128, "batch_size": 256},
    "stopping": {"max_iterations": ITERATIONS, "tolerance": None},
}


@pytest.fixture
def portal(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[Portal]:
    with running_portal(data_dir=tmp_path / "portal", db_url=db_url, redis_url=redis_url,
                        extra_env={"LEASE_SECONDS": str(LEASE_SECONDS)}) as running:
        yield running


@pytest.fixture
def api(portal: Portal) -> Iterator[httpx.Client]:
    token = make_user_token(portal.db_url, tenant="team-r", email="rita@team-r.test")
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def log_has(portal: Portal, name: str, text: str) -> bool:
    path = portal.logs.get(name)
    return path is not None and path.exists() and text in path.read_text(errors="replace")


def lock_token(portal: Portal, name: str) -> str:
    return f"{socket.gethostname()}:{portal.procs[name].pid}"


def decisions(db_url: str) -> list[tuple[int, int, float]]:
    """(job id, chunk_seq, created at as epoch seconds) of every grant, oldest first."""
    with session_scope(engine_for(db_url)) as session:
        rows = session.execute(
            select(col(Decision.job_id), col(Decision.chunk_seq), col(Decision.created_at))
            .order_by(col(Decision.created_at))
        ).all()
    return [(int(j), int(s), as_utc(at).timestamp()) for j, s, at in rows]


def requeued(db_url: str, job_id: int, lost_seq: int) -> bool:
    """Whether the job whose chunk ``lost_seq`` was lost is queued or granted again."""
    status, chunk_seq = job_row(db_url, job_id)
    return chunk_seq > lost_seq or status == JobStatus.queued


def job_row(db_url: str, job_id: int) -> tuple[str, int]:
    with session_scope(engine_for(db_url)) as session:
        job = session.get(Job, job_id)
        assert job is not None
        return str(job.status), job.chunk_seq


def pid_running(pid: int) -> bool:
    """False once ``pid`` is gone or a zombie nobody has reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def assert_all_finished_exactly(portal: Portal, api: httpx.Client, jobs: list[dict[str, Any]],
                                timeout: float = 180) -> None:
    for job in jobs:
        done = wait_finished(api, job["id"], timeout=timeout)
        assert done["status"] == "completed", done
        assert stored_iterations(portal.db_url, job["id"]) == list(range(1, ITERATIONS + 1)), \
            f"job {job['id']}: loss points lost or duplicated"
    seqs: dict[int, list[int]] = {}
    for job_id, seq, _ in decisions(portal.db_url):
        seqs.setdefault(job_id, []).append(seq)
    for job_id, granted in seqs.items():
        assert len(granted) == len(set(granted)), f"job {job_id}: a chunk granted twice"


# -- the pieces, on Redis alone ------------------------------------------------------------


@pytest.fixture
def client(redis_url: str, tmp_path: Path) -> Iterator[tuple[redis.Redis, RedisKeys]]:
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = RedisKeys(f"recovery{tmp_path.name}")
    yield conn, keys
    for key in conn.scan_iter(f"{keys.prefix}:*"):
        conn.delete(key)
    conn.close()


def test_lock_stops_granting_the_moment_renewal_fails(
    client: tuple[redis.Redis, RedisKeys]
) -> None:
    conn, keys = client
    lock = SchedulerLock(conn, keys, "host-a:1", ttl_s=30)
    assert lock.hold() and lock.held(margin_s=29)
    conn.set(keys.scheduler_lock, "host-b:2")  # as if it lapsed and b took it
    assert not lock.renew() and not lock.held()
    short = SchedulerLock(conn, keys, "host-c:3", ttl_s=0.3)
    conn.delete(keys.scheduler_lock)
    assert short.hold() and short.held()
    # Judged from the clock alone: no renewal, no grants, whatever Redis says.
    wait_until(lambda: not short.held(), 5, "the lock's validity to run out", interval=0.02)


def test_lease_of_a_silent_slot_is_revoked_and_others_are_kept(
    client: tuple[redis.Redis, RedisKeys]
) -> None:
    conn, keys = client
    leases, beats = Leases(conn, keys), Heartbeats(conn, keys)
    beats.beat("host:1", 60)
    beats.beat("host:2", 1.0)
    for job_id in (1, 2, 3):
        assert leases.acquire(job_id, 7, ttl_s=60)
    assert leases.claim(1, 7, "host:1") == 7
    assert leases.claim(2, 7, "host:2") == 7
    assert leases.claim(3, 7, "host:9") == 7, "claimed by a slot that never beat"
    assert leases.claim(3, 6, "host:1") == 7, "a stale seq claims nothing"
    assert leases.claimed_slots() == {1: "host:1", 2: "host:2"}
    assert leases.revoke_orphaned(1) is None and leases.revoke_orphaned(2) is None
    wait_until(lambda: "host:2" not in beats.alive(), 5, "slot 2's heartbeat to expire",
               interval=0.02)
    assert leases.revoke_orphaned(1) is None
    assert leases.revoke_orphaned(2) == 7
    assert leases.holder(2) is None and leases.live_job_ids() == {1, 3}
    assert leases.revoke_orphaned(3) is None, "no claim: only the lease's expiry frees it"
    # A finished chunk's claim goes with its lease; a new seq starts unclaimed.
    assert leases.release(1, 7) and leases.claimed_slots() == {}
    assert leases.acquire(1, 8, ttl_s=60) and leases.claim(1, 8, "host:1") == 8
    conn.delete(keys.lease(1))
    assert leases.acquire(1, 9, ttl_s=60) and leases.claimed_slots() == {}


# -- whole portals ---------------------------------------------------------------------------


def test_sigkilled_scheduler_is_replaced_within_the_lock_ttl(
    portal: Portal, api: httpx.Client
) -> None:
    # The replacement is started first and waits as a standby: interpreter
    # start-up on a loaded host takes seconds and is not what the lock governs.
    portal.start_scheduler("scheduler-2")
    wait_until(lambda: log_has(portal, "scheduler-2", "standing by"), 60,
               "the new scheduler to stand by")
    jobs = [submit(api, seed=s, **JOB_SPEC) for s in range(4)]
    wait_until(lambda: len(decisions(portal.db_url)) >= 3, 60, "training under way")
    assert not log_has(portal, "scheduler-2", "acquired scheduler lock")
    killed_at = time.time()
    portal.stop("scheduler", signal.SIGKILL)
    last_old = max(at for _, _, at in decisions(portal.db_url))
    first_new = wait_until(
        lambda: min((at for _, _, at in decisions(portal.db_url) if at > killed_at),
                    default=None),
        30, "a grant by the new scheduler", interval=0.05)
    takeover = first_new - killed_at
    print(f"\nscheduler takeover: first grant {takeover:.2f}s after SIGKILL "
          f"({first_new - last_old:.2f}s after the dead scheduler's last grant)")
    assert log_has(portal, "scheduler-2", "acquired scheduler lock")
    assert takeover < TAKEOVER_BOUND_SECONDS, portal.log_tail()
    assert_all_finished_exactly(portal, api, jobs)


def test_sigkilled_celery_main_process_chunks_are_reclaimed_by_heartbeat(
    portal: Portal, api: httpx.Client
) -> None:
    jobs = [submit(api, seed=s, **JOB_SPEC) for s in range(3)]
    client = portal.redis()
    children = portal.slot_pids()
    assert len(children) == 2
    # Both pool processes mid-chunk, each chunk claimed for its slot.
    wait_until(lambda: len(client.hgetall(portal.keys.lease_slots)) == 2, 60,
               "both slots to run a chunk", interval=0.02)
    # Each slot is a Celery node of its own (workers.nodes): kill every
    # node's main process, as a host losing its workers would.
    nodes = portal.worker_nodes()
    assert len(nodes) == 2
    killed_at = time.time()
    for node in nodes:
        os.kill(node, signal.SIGKILL)
    portal.procs["workers"].wait()
    try:
        victims: dict[int, int] = {}
        # redis-py types every reply as a union over its sync and async clients.
        claims = cast(dict[str, str], client.hgetall(portal.keys.lease_slots))
        for job, claim in claims.items():
            claimed_seq, _, slot = claim.partition(":")
            assert int(slot.rsplit(":", 1)[1]) in children
            victims[int(job)] = int(claimed_seq)
        assert victims, "no chunk was running when the workers died"
        # Celery's prefork children ask for SIGKILL on their parent's death,
        # so no orphan keeps heartbeating for a dead worker.
        wait_until(lambda: not any(pid_running(p) for p in children), 10,
                   "the pool processes to die with their parent", interval=0.05)
        portal.start_workers(2, name="workers-2")
        leases = Leases(client, portal.keys)
        reclaimed: dict[int, float] = {}

        def all_reclaimed() -> bool:
            for job_id, seq in victims.items():
                if job_id not in reclaimed and leases.holder(job_id) != seq:
                    reclaimed[job_id] = time.time() - killed_at
            return len(reclaimed) == len(victims)

        wait_until(all_reclaimed, LEASE_SECONDS / 2, "the dead slots' chunks to be reclaimed",
                   interval=0.05)
        slowest = max(reclaimed.values())
        print(f"\nchunks of the SIGKILLed worker reclaimed {slowest:.2f}s after the kill "
              f"(heartbeat TTL {HEARTBEAT_TTL_SECONDS}s, lease {LEASE_SECONDS}s): {reclaimed}")
        assert slowest < RECLAIM_BOUND_SECONDS, portal.log_tail()
        # The scheduler revokes the lease in Redis, then queues the job in the
        # database: the row follows a moment later.
        for job_id, seq in victims.items():
            wait_until(partial(requeued, portal.db_url, job_id, seq), 10,
                       f"job {job_id} to be queued again or granted anew")
        assert log_has(portal, "scheduler", "stopped heartbeating")
        assert_all_finished_exactly(portal, api, jobs)
        new_slots = set(portal.slot_pids())
        assert new_slots and not new_slots & set(children)
    finally:
        with contextlib.suppress(ProcessLookupError):
            # Orphans, if the check above failed.
            os.killpg(portal.procs["workers"].pid, signal.SIGKILL)


def test_of_two_schedulers_started_together_exactly_one_grants(
    portal: Portal, api: httpx.Client
) -> None:
    portal.stop("scheduler")  # SIGTERM: releases its lock
    client = portal.redis()
    client.hdel(portal.keys.scheduler_status, "owner")  # the stopped one's
    portal.start_scheduler("sched-a")
    portal.start_scheduler("sched-b")
    names = ("sched-a", "sched-b")
    wait_until(lambda: all(log_has(portal, n, "acquired scheduler lock")
                           or log_has(portal, n, "standing by") for n in names),
               60, "both schedulers to start")
    jobs = [submit(api, seed=s, **JOB_SPEC) for s in range(4)]
    owners: set[str] = set()

    def finished_while_watching() -> bool:
        owner = client.hget(portal.keys.scheduler_status, "owner")
        if owner is not None:
            owners.add(json.loads(owner))
        assert all(portal.procs[n].poll() is None for n in names), portal.log_tail()
        return all(api.get(f"/api/v1/jobs/{j['id']}").json()["status"] == "completed"
                   for j in jobs)

    wait_until(finished_while_watching, 180, "the jobs to finish", interval=0.1)
    active = [n for n in names if log_has(portal, n, "acquired scheduler lock")]
    print(f"\nscheduler owners seen in the status hash: {owners}; lock taken by {active}")
    assert len(active) == 1, portal.log_tail()
    (standby,) = set(names) - set(active)
    assert log_has(portal, standby, "standing by")
    assert owners == {lock_token(portal, active[0])}
    assert_all_finished_exactly(portal, api, jobs)
