"""One scheduling round, and the loop that runs rounds.

A round: return lost chunks to the queue (lease expired, or the worker slot
that started the chunk stopped heartbeating), build a snapshot from the database
and Redis, ask the active policy for grants, drop any grant that breaks a hard
limit (the simulator's own check), and dispatch the rest (DB update fenced by
chunk_seq, decision row, lease, Celery message). Then it publishes what the
queue page and the job chart show: why jobs wait, and the loss-curve fits made
this round. The policy itself is pure and shared with the simulator.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import redis
from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from backend.core.fits import fit_payload, publish_fits
from backend.core.leases import Heartbeats, Leases
from backend.core.models import Decision, Job, JobStatus, Tenant, as_utc, utcnow
from backend.core.notify import publish_job_event
from backend.core.portal_settings import active_policy_name
from backend.core.redis_keys import RedisKeys
from backend.scheduler.history import HistoryCache
from backend.scheduling.allocation import Rejected, split_grants
from backend.scheduling.explain import explain_waiting
from backend.scheduling.predictor import LossPredictor, curve_rows, default_horizon
from backend.scheduling.registry import make_policy
from backend.scheduling.types import Grant, JobView, Policy, Snapshot, TenantView

log = logging.getLogger(__name__)

# Explaining the queue asks the policy for a full ranking: at most this often.
EXPLAIN_EVERY_SECONDS = 1.0


class ChunkSender(Protocol):
    def __call__(self, job_id: int, chunk_seq: int, iterations: int) -> None: ...


def _epoch(moment: datetime | None) -> float:
    if moment is None:
        return 0.0
    return as_utc(moment).timestamp()


@dataclass
class RoundResult:
    policy: str
    slots: int
    free_slots: int
    runnable: int
    grants: list[Grant]
    reclaimed: list[int]
    rejected: list[Rejected] = field(default_factory=list)


class Scheduler:
    def __init__(self, *, engine: Engine, client: redis.Redis, keys: RedisKeys,
                 send: ChunkSender, chunk_seconds: float, lease_seconds: float,
                 default_policy: str, default_chunk_iterations: int = 10,
                 owner: str = "", may_grant: Callable[[], bool] = lambda: True) -> None:
        self.engine = engine
        self.redis = client
        self.keys = keys
        self.send = send
        self.chunk_seconds = chunk_seconds
        self.lease_seconds = lease_seconds
        self.default_policy = default_policy
        self.default_chunk_iterations = default_chunk_iterations
        self.owner = owner
        # Asked before every grant: false once this process may no longer be
        # the only scheduler (its lock lapsed or passed to another).
        self.may_grant = may_grant
        self.leases = Leases(client, keys)
        self.heartbeats = Heartbeats(client, keys)
        self.history = HistoryCache()
        # Fits the chart for policies that keep no predictor of their own.
        self.predictor = LossPredictor()
        self._policy: Policy | None = None
        self._explained_at = float("-inf")

    def policy(self, name: str) -> Policy:
        # One instance across rounds, so a policy may memoise its fits.
        if self._policy is None or self._policy.name != name:
            self._policy = make_policy(name)
        return self._policy

    def run_round(self) -> RoundResult:
        with Session(self.engine, expire_on_commit=False) as session:
            name = active_policy_name(session, self.default_policy)
            live = self.leases.live_job_ids()
            # Claims before heartbeats: a slot beats before it claims, so a
            # claim listed here names a slot the heartbeats below still show
            # unless that slot really went quiet.
            claims = self.leases.claimed_slots()
            alive = set(self.heartbeats.alive())
            reclaimed = self._reclaim_lost(session, live, claims, alive)
            jobs = list(session.exec(  # type: ignore[call-overload]
                select(Job).where(Job.status.in_([JobStatus.queued, JobStatus.running]))  # type: ignore[attr-defined]
            ).scalars())
            tenants = {t.id: t for t in session.exec(select(Tenant)).scalars()}  # type: ignore[call-overload]
            self.history.refresh(session, {j.id: j.checkpoint_iteration for j in jobs})
            slots = len(alive)
            free = max(slots - len(live), 0)
            snapshot = Snapshot(
                now=time.time(),
                free_slots=free,
                total_slots=slots,
                chunk_seconds=self.chunk_seconds,
                jobs=[self._view(job, job.id in live) for job in jobs],
                tenants={
                    tid: TenantView(tid, t.max_slots, t.share_weight) for tid, t in tenants.items()
                },
                default_chunk_iterations=self.default_chunk_iterations,
            )
            policy = self.policy(name)
            grants, rejected = split_grants(snapshot,
                                            policy.allocate(snapshot) if free > 0 else [])
            for grant, reason in rejected:
                # A policy bug must not oversubscribe workers or a tenant's
                # quota; the valid grants still run so the cluster keeps going.
                log.warning("policy %s: dropped grant of %d iterations to job %d: %s",
                            name, grant.iterations, grant.job_id, reason)
            dispatched = [g for g in grants if self._dispatch(session, g, name)]
            self._explain(policy, snapshot, {g.job_id for g in dispatched})
            if self.may_grant():
                self._publish_status(name, slots, free, len(jobs), dispatched)
            self._publish_fits(policy, snapshot)
        return RoundResult(name, slots, free, len(jobs), dispatched, reclaimed, rejected)

    def _view(self, job: Job, running: bool) -> JobView:
        return JobView(
            job_id=job.id or 0,
            tenant_id=job.tenant_id,
            submitted_at=_epoch(job.created_at),
            iterations_done=job.checkpoint_iteration,
            max_iterations=job.max_iterations,
            losses=self.history.points(job.id or 0),
            running=running or job.status == JobStatus.running,
            attained_seconds=job.attained_seconds,
            waiting_since=_epoch(job.waiting_since),
            chunks_run=job.chunks_run,
            initial_loss=job.initial_loss,
        )

    def _reclaim_lost(self, session: Session, live: set[int], claims: dict[int, str],
                      alive: set[str]) -> list[int]:
        """Jobs marked running whose lease is gone lost their chunk: queue them.

        A lease whose claiming slot is not in ``alive`` is revoked first (and
        dropped from ``live``), so a dead worker's chunk is queued again now
        rather than when its lease would have expired.
        """
        orphaned: set[int] = set()
        for job_id, slot in claims.items():
            # The script decides again atomically, so a slot that beat since
            # keeps its chunk; a claim without a lease is dropped on the way.
            if (slot not in alive or job_id not in live) and \
                    self.leases.revoke_orphaned(job_id) is not None:
                orphaned.add(job_id)
        if orphaned:
            log.warning("revoked the leases of jobs %s: the worker slots running their "
                        "chunks stopped heartbeating", sorted(orphaned))
        live.difference_update(orphaned)
        running = session.exec(  # type: ignore[call-overload]
            select(col(Job.id), col(Job.chunk_seq)).where(col(Job.status) == JobStatus.running)
        ).all()
        lost = [(jid, seq) for jid, seq in running if jid not in live]
        reclaimed = []
        for job_id, seq in lost:
            if self.leases.holder(job_id) is not None:
                continue  # taken or renewed since we listed leases
            why = ("its worker stopped heartbeating" if job_id in orphaned
                   else "its last chunk was lost (worker gone)")
            result = session.execute(
                update(Job)
                .where(col(Job.id) == job_id, col(Job.chunk_seq) == seq,
                       col(Job.status) == JobStatus.running)
                .values(status=JobStatus.queued, waiting_since=utcnow(),
                        last_reason=f"{why}; queued again")
            )
            if result.rowcount == 1:  # type: ignore[attr-defined]
                reclaimed.append(job_id)
        session.commit()
        if reclaimed:
            log.warning("returned lost chunks of jobs %s to the queue", reclaimed)
        return reclaimed

    def _dispatch(self, session: Session, grant: Grant, policy: str) -> bool:
        if not self.may_grant():
            return False
        job = session.get(Job, grant.job_id)
        if job is None or job.status != JobStatus.queued:
            return False
        seq = job.chunk_seq + 1
        result = session.execute(
            update(Job)
            .where(Job.id == job.id, Job.chunk_seq == job.chunk_seq,  # type: ignore[arg-type]
                   Job.status == JobStatus.queued)  # type: ignore[arg-type]
            .values(status=JobStatus.running, chunk_seq=seq,
                    started_at=job.started_at or utcnow(),
                    last_reason=grant.reason, predicted_gain=grant.predicted_gain)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            session.rollback()
            return False  # paused or cancelled between snapshot and grant
        session.add(Decision(job_id=grant.job_id, tenant_id=job.tenant_id, chunk_seq=seq,
                             iterations=grant.iterations, policy=policy, reason=grant.reason,
                             predicted_gain=grant.predicted_gain))
        session.commit()
        # Lease before message: a worker only runs a chunk whose lease it sees.
        self.leases.acquire(grant.job_id, seq, self.lease_seconds)
        self.send(grant.job_id, seq, grant.iterations)
        publish_job_event(self.redis, self.keys, job_id=grant.job_id, tenant_id=job.tenant_id,
                          status=JobStatus.running, reason=grant.reason)
        return True

    def _explain(self, policy: Policy, snapshot: Snapshot, granted: set[int]) -> None:
        now = time.monotonic()
        if now - self._explained_at < EXPLAIN_EVERY_SECONDS:
            return
        self._explained_at = now
        # dict[Any, Any]: redis-py's stubs want a Mapping over its own key union.
        entries: dict[Any, Any] = {
            str(job_id): json.dumps({"position": why.position, "reason": why.reason,
                                     "predicted_gain": why.predicted_gain})
            for job_id, why in explain_waiting(policy, snapshot).items() if job_id not in granted
        }
        try:
            pipe = self.redis.pipeline()
            pipe.delete(self.keys.waiting)
            if entries:
                pipe.hset(self.keys.waiting, mapping=entries)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not publish queue explanations: %s", exc)

    def _publish_fits(self, policy: Policy, snapshot: Snapshot) -> None:
        """Publish the fits made this round, as the chart's prediction.

        A predictive policy's own fits are published as they are, so the
        chart shows the belief behind its grants; fitting them again here
        would also change the error tracking the policy ranks by.
        """
        predictor = getattr(policy, "predictor", None)
        if not isinstance(predictor, LossPredictor):
            predictor = self.predictor
            predictor.fit_many([job for job in snapshot.jobs if job.losses])
            if len(predictor) > 2 * len(snapshot.jobs) + 64:
                predictor.forget_except(job.job_id for job in snapshot.jobs)
        fits = predictor.take_refitted()
        if not fits:
            return
        max_iterations = {job.job_id: job.max_iterations for job in snapshot.jobs}
        now = time.time()
        publish_fits(self.redis, self.keys, [
            fit_payload(job_id=fit.job_id, from_iteration=fit.k_last, family=fit.family,
                        rows=curve_rows(fit, default_horizon(fit.k_last,
                                                             max_iterations[fit.job_id])),
                        fitted_at=now)
            for fit in fits if fit.job_id in max_iterations
        ])

    def _publish_status(self, policy: str, slots: int, free: int, runnable: int,
                        grants: list[Grant]) -> None:
        status: dict[str, Any] = {
            "at": time.time(), "policy": policy, "slots": slots, "free_slots": free,
            "runnable": runnable, "granted": len(grants), "owner": self.owner,
        }
        try:
            self.redis.hset(self.keys.scheduler_status,
                            mapping={k: json.dumps(v) for k, v in status.items()})
        except redis.RedisError as exc:
            log.warning("could not publish scheduler status: %s", exc)


def wait_for_wake(client: redis.Redis, keys: RedisKeys, timeout: float) -> None:
    """Block until something wakes the scheduler or ``timeout`` passes."""
    try:
        got = client.blpop([keys.wake], timeout=max(timeout, 0.01))
        if got is not None:
            client.delete(keys.wake)  # one round serves every pending wake-up
    except redis.RedisError as exc:
        log.warning("wake list unavailable: %s", exc)
        time.sleep(timeout)
