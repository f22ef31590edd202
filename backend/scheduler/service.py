"""One scheduling round, and the loop that runs rounds.

A round: return lost chunks to the queue (lease expired, or the worker slot
that started the chunk stopped heartbeating), bring the in-memory job state up
to date with what changed (:mod:`backend.scheduler.state`), serve free slots
from the head of the last full ranking (the backlog; a slot freed since the
last round is served from it first, before anything is read from the
database), ask the active policy for
grants for any slot still free, drop any grant that breaks a hard
limit (the simulator's own check), and dispatch the rest (DB update fenced by
chunk_seq, decision row, lease, Celery message). Then it publishes what the
queue page and the job chart show: why jobs wait, and the loss-curve fits made
this round. The policy itself is pure and shared with the simulator.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import redis
from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from backend.core.cluster_history import HistoryRecorder
from backend.core.fits import fit_payload, publish_fits
from backend.core.leases import Heartbeats, Leases
from backend.core.models import Decision, Job, JobStatus, Tenant, utcnow
from backend.core.notify import publish_job_event
from backend.core.pools import DEFAULT_POOL, SlotInfo
from backend.core.portal_settings import PolicyChoice, policy_choice
from backend.core.redis_keys import RedisKeys
from backend.core.residency import Residency
from backend.scheduler.experiment_stopping import ExperimentStopper
from backend.scheduler.history import HistoryCache
from backend.scheduler.lost_chunks import LOST_IN_A_ROW, LostChunks, keep_failing_reason
from backend.scheduler.metrics import observe_reclaimed, observe_round
from backend.scheduler.pools import PoolRegistry
from backend.scheduler.state import JobState
from backend.scheduling.allocation import Rejected
from backend.scheduling.experiment_focus import Focused
from backend.scheduling.explain import MetricNamedPolicy, explain_waiting, wait_estimate
from backend.scheduling.placement import pool_waits
from backend.scheduling.predictor import LossPredictor, curve_rows, default_horizon
from backend.scheduling.registry import DEFAULT_COMPLETION_GUARD, make_policy
from backend.scheduling.residency import IDLE_CHUNK_FACTOR, SlotView, slots_wanted
from backend.scheduling.round import (
    BACKLOG_PREFIX,
    HELD_BACK_EXPLAINED,
    RANKING_EXTRA,
    admit,
    after,
    allowance,
    backlog,
    decide,
    from_backlog,
    warmup_shares,
)
from backend.scheduling.rungs import Owed, continuations, cut_at_rung
from backend.scheduling.types import Grant, JobView, Policy, Snapshot, TenantView
from backend.scheduling.waiting import WaitingEntry, WaitKind

log = logging.getLogger(__name__)

# Explaining the queue asks the policy for a full ranking: at most this often.
EXPLAIN_EVERY_SECONDS = 1.0
# Grants ranked beyond the free slots, kept to serve a freed slot before
# re-ranking: the round's one ranking extra (backend/scheduling/round.py).
BACKLOG_LENGTH = RANKING_EXTRA
__all__ = ["BACKLOG_LENGTH", "BACKLOG_PREFIX", "HELD_BACK_EXPLAINED", "Scheduler",
           "wait_for_wake"]
# Round durations kept in Redis for the cluster page and benchmarks.
ROUNDS_KEPT = 200
WANTED_TTL_MS = 10_000
"""How long the word that a job waits for a slot outlives the round that said it."""
# Chunks whose wall time (dispatch to lease gone) the wait estimates average.
CHUNK_TIMES_KEPT = 50


class ChunkSender(Protocol):
    """Sends a chunk to ``queue`` (a slot's own) when given, else to the pool's queue."""

    def __call__(self, job_id: int, chunk_seq: int, iterations: int, pool: str,
                 queue: str = "", yield_after: int = 0) -> None: ...


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
                 default_completion_guard: float = DEFAULT_COMPLETION_GUARD,
                 default_completion_weight: float = 0.0,
                 idle_chunk_factor: float = IDLE_CHUNK_FACTOR,
                 owner: str = "", may_grant: Callable[[], bool] = lambda: True) -> None:
        self.engine = engine
        self.redis = client
        self.keys = keys
        self.send = send
        self.chunk_seconds = chunk_seconds
        self.idle_chunk_factor = idle_chunk_factor
        self.lease_seconds = lease_seconds
        self.default_policy = default_policy
        self.default_completion_guard = default_completion_guard
        self.default_completion_weight = default_completion_weight
        self.default_chunk_iterations = default_chunk_iterations
        self.owner = owner
        # Asked before every grant: false once this process may no longer be
        # the only scheduler (its lock lapsed or passed to another).
        self.may_grant = may_grant
        self.leases = Leases(client, keys)
        self.lost_chunks = LostChunks(client, keys)
        self.heartbeats = Heartbeats(client, keys)
        self.state = JobState(client, keys)
        self.pools = PoolRegistry()
        # Fits the chart for policies that keep no predictor of their own.
        self.predictor = LossPredictor()
        self._policy: Policy | None = None
        self._policy_basis: PolicyChoice | None = None
        self._explained_at = float("-inf")
        self._explain_cost = 0.0
        self._backlog: list[Grant] = []
        self._backlog_basis: tuple[PolicyChoice, dict[int, TenantView], int] | None = None
        self._held_back: list[int] = []
        self.recorder = HistoryRecorder(client, keys)
        self.stopper = ExperimentStopper(client, keys)
        # Dispatch times of chunks in flight, and the wall times of recent
        # chunks: what "starts in about N s" is estimated from.
        self._dispatched_at: dict[int, float] = {}
        self._chunk_times: deque[float] = deque(maxlen=CHUNK_TIMES_KEPT)
        # Residency: which slot holds which job's trainer, the slots free this
        # round, and where chunks not yet claimed were sent.
        self.residency = Residency(client, keys)
        self._resident: dict[int, str] = {}
        self._free: list[SlotView] = []
        self._sent_to: dict[int, str] = {}
        # Job id -> iterations of its last grant cut off at a rung of its
        # experiment's rule, granted again once the rule has kept it.
        self._owed: dict[int, Owed] = {}
        # Job id -> tenant of each lengthened chunk in flight (it may yield).
        self._yielding: dict[int, int] = {}
        self._wanted_published = False

    def stand_by(self) -> None:
        """Drop the in-memory state while another scheduler grants: events would
        pile up unread, and on taking over the state is rebuilt from the database."""
        if self.state.built:
            self.state.close()
            self.state = JobState(self.redis, self.keys)
            self._backlog = []
            self._owed = {}
            # Chunks this scheduler lengthened run out if another one takes over.
            self._yielding = {}

    @property
    def defaults(self) -> PolicyChoice:
        """What is in force where the admin has set nothing."""
        return PolicyChoice(self.default_policy, self.default_completion_guard,
                            self.default_completion_weight)

    def policy(self, name: str, completion_guard: float | None = None,
               completion_weight: float | None = None) -> Policy:
        # One instance across rounds, so a policy may memoise its fits; a new
        # one when the admin changes the policy, its completion guard or its
        # completion weight. Its reasons name the metric of jobs scheduled on
        # val_loss; the state is looked up per grant, as stand_by replaces it.
        guard = self.default_completion_guard if completion_guard is None else completion_guard
        weight = self.default_completion_weight if completion_weight is None \
            else completion_weight
        choice = PolicyChoice(name, guard, weight)
        if self._policy is None or self._policy_basis != choice:
            self._policy = MetricNamedPolicy(make_policy(name, completion_guard=guard,
                                                         completion_weight=weight),
                                             lambda job_id: self.state.metric(job_id))
            self._policy_basis = choice
        return self._policy

    @property
    def history(self) -> HistoryCache:
        return self.state.history

    def run_round(self) -> RoundResult:
        began = time.perf_counter()
        with Session(self.engine, expire_on_commit=False) as session:
            choice = policy_choice(session, self.defaults)
            name = choice.name
            live = self.leases.live_job_ids()
            # Claims before heartbeats: a slot beats before it claims, so a
            # claim listed here names a slot the heartbeats below still show
            # unless that slot really went quiet.
            claims = self.leases.claimed_slots()
            adverts = self.heartbeats.alive_info()
            alive = set(adverts)
            self._plan_slots(live, claims, adverts)
            self._note_finished_chunks(live)
            tenants = self._tenants(session)
            # Counted in ``live`` from here on, like any chunk in flight.
            early = self._serve_backlog_first(session, choice, tenants, live, adverts)
            live.update(g.job_id for g in early)
            early_ms = (time.perf_counter() - began) * 1000
            reclaimed = self._reclaim_lost(session, live, claims, alive)
            for job_id in reclaimed:
                self.state.mark_dirty(job_id)
            self.state.sync(session, live)
            # Experiments' early-stopping rules judge every chunk committed up
            # to now, so a hopeless configuration is paused before the policy
            # could grant it again; the next sync reads the paused rows.
            stopped = set(self.stopper.run(session))
            for job_id in stopped:
                self.state.mark_dirty(job_id)
            slots = len(alive)
            free = max(slots - len(live), 0)
            pools = self.pools.views(session, adverts, self._in_flight_by_pool(live))
            views, self._held_back = self._admitted(slots, live, tenants, choice)
            if stopped:
                views = [view for view in views if view.job_id not in stopped]
            snapshot = Snapshot(now=time.time(), free_slots=free, total_slots=slots,
                                chunk_seconds=self.chunk_seconds, jobs=views, tenants=tenants,
                                default_chunk_iterations=self.default_chunk_iterations,
                                pools=pools, resident=self._resident_on_free_slots())
            policy = self.policy(*choice)
            if (choice, tenants, self.state.arrivals) != self._backlog_basis:
                # Ranked under another policy or other quotas, or before a job
                # arrived that might outrank it all.
                self._backlog = []
            dispatched: list[Grant] = []
            rejected: list[Rejected] = []
            # Grants cut at a rung go on where the rule kept their job: the
            # rest of a grant the policy made, not a new decision.
            continuing = continuations(
                self._owed, {job.job_id: job for job in snapshot.waiting()},
                {j for j in self._owed if j not in self.state.rows or j in stopped},
                snapshot.free_slots, snapshot.now)
            if continuing:
                dispatched, rejected = self._grant(session, snapshot, policy, name, continuing)
                snapshot = after(snapshot, dispatched)
            if snapshot.free_slots > 0 and self._backlog:
                # Slots freed while the state synced: still the last ranking
                # first, so they never wait for the policy.
                more, dropped = self._grant(session, snapshot, policy, name,
                                            from_backlog(snapshot, self._backlog))
                dispatched += more
                rejected += dropped
                snapshot = after(snapshot, more)
            if snapshot.free_slots > 0:
                # The round's own ranking, beyond the free slots
                # (backend/scheduling/round.py: rank, check, place).
                more, dropped = self._grant(session, snapshot, policy, name)
                dispatched += more
                rejected += dropped
                snapshot = after(snapshot, more)
            granted_ms = (time.perf_counter() - began) * 1000 if dispatched or not early \
                else early_ms
            # ``live`` counts the early grants already; ``dispatched`` names them all.
            running = len(live) + len(dispatched)
            dispatched = early + dispatched
            # Re-rank after dispatch, off the grant's path: the next few grants
            # the policy would make are the backlog the next freed slot takes.
            self._backlog = backlog(policy, snapshot, standings=self.stopper.standings)
            self._backlog_basis = (choice, tenants, self.state.arrivals)
            self._explain(policy, snapshot, {g.job_id for g in dispatched})
            self._publish_wanted(snapshot, live | {g.job_id for g in dispatched})
            if self.may_grant():
                self._publish_status(name, slots, free, len(self.state.rows), dispatched,
                                     granted_ms, (time.perf_counter() - began) * 1000)
                rows = self.state.rows
                self.recorder.round_done(
                    total=slots, running=running,
                    queued=lambda: sum(1 for r in rows.values() if r.status == JobStatus.queued),
                    granted=len(dispatched), rejected=len(rejected), reclaimed=len(reclaimed))
            self._publish_fits(policy, snapshot)
        observe_round(self.redis, self.keys, began, granted_ms, dispatched, rejected)
        return RoundResult(name, slots, free, len(self.state.rows), dispatched, reclaimed,
                           rejected)

    @staticmethod
    def _tenants(session: Session) -> dict[int, TenantView]:
        rows = session.execute(select(col(Tenant.id), col(Tenant.max_slots),
                                      col(Tenant.share_weight), col(Tenant.pool_slots))).all()
        return {int(t): TenantView(int(t), int(m), float(w), dict(p or {}))
                for t, m, w, p in rows}

    def _serve_backlog_first(self, session: Session, choice: PolicyChoice,
                             tenants: dict[int, TenantView], live: set[int],
                             adverts: dict[str, Any]) -> list[Grant]:
        """Give slots freed since the last round the head of the last ranking,
        before the state sync, lost-chunk checks and early-stopping rules.

        Only when that ranking still holds: same policy, guard and quotas, and no job
        has arrived since that it did not know. Its rows may be a round old;
        the dispatch is fenced on the database row (a job paused or cancelled
        since is skipped), and quotas are this round's.
        """
        slots = len(adverts)
        # A slot whose job's grant was cut at a rung is kept for the rest of
        # that grant until the rule has judged the job (after the sync).
        owed = sum(1 for job_id in self._owed if job_id not in live)
        if not self._backlog or slots <= len(live) + owed or \
                (choice, tenants, self.state.arrivals) != self._backlog_basis or \
                self.state.arrival_pending():
            return []
        rows = self.state.rows
        running = [self.state.view(j, True) for j in live if j in rows]
        candidates = [self.state.view(g.job_id, False) for g in self._backlog
                      if g.job_id in rows and g.job_id not in live
                      and rows[g.job_id].status == JobStatus.queued]
        snapshot = Snapshot(now=time.time(), free_slots=slots - len(live) - owed, total_slots=slots,
                            chunk_seconds=self.chunk_seconds, jobs=running + candidates,
                            tenants=tenants,
                            default_chunk_iterations=self.default_chunk_iterations,
                            pools=self.pools.views(session, adverts,
                                                   self._in_flight_by_pool(live)),
                            resident=self._resident_on_free_slots())
        # Its snapshot holds the backlog's jobs only, not every waiting job:
        # it cannot tell that slots stay idle, so no chunk is lengthened.
        dispatched, _ = self._grant(session, snapshot, self.policy(*choice), choice.name,
                                    from_backlog(snapshot, self._backlog), idle_factor=1.0)
        return dispatched

    def _admitted(self, slots: int, live: set[int], tenants: dict[int, TenantView],
                  choice: PolicyChoice) -> tuple[list[JobView], list[int]]:
        """Views the policy sees: every job that has run, plus the never-run
        jobs the round's admission lets in (:func:`backend.scheduling.round.admit`,
        at the active policy's warm-up shares); the other new jobs wait their turn."""
        rows = self.state.rows
        known = [self.state.view(job_id, job_id in live or rows[job_id].status == JobStatus.running)
                 for job_id in self.state.known]
        shares = warmup_shares(self.policy(*choice))
        new = self.state.new_waiting(allowance(known, slots, shares).new + HELD_BACK_EXPLAINED)
        experiment_of = {job_id: rows[job_id].experiment_id
                         for jobs in new.values() for job_id in jobs}
        admitted, held = admit(known, new, experiment_of, slots=slots, tenants=tenants,
                               shares=shares)
        known.extend(self.state.view(job_id, False) for job_id in admitted)
        return known, held

    def _grant(self, session: Session, snapshot: Snapshot, policy: Policy, name: str,
               ranking: list[Grant] | None = None, idle_factor: float | None = None
               ) -> tuple[list[Grant], list[Rejected]]:
        """Decide (:func:`backend.scheduling.round.decide`: rank unless
        ``ranking`` is given, check against the hard limits, place on pools and
        slots) and dispatch; a grant no pool can take now keeps waiting."""
        decided = decide(
            policy, snapshot, ranking=ranking, standings=self.stopper.standings,
            free=self._free, resident=self._resident, reserved=self._owed.keys(),
            default_pool=DEFAULT_POOL,
            idle_factor=self.idle_chunk_factor if idle_factor is None else idle_factor,
            # Cut at the experiment's next rung (recording what it owes).
            cut=lambda grant, job, moved: cut_at_rung(
                grant, job, self.stopper.rule_for(session, job.experiment_id), self._owed,
                snapshot.now, self.chunk_seconds, moved))
        for grant, reason in decided.rejected:
            # A policy bug must not oversubscribe workers or a tenant's
            # quota; the valid grants still run so the cluster keeps going.
            log.warning("policy %s: dropped grant of %d iterations to job %d: %s",
                        name, grant.iterations, grant.job_id, reason)
        dispatched = []
        for grant, slot in decided.grants:
            if self._dispatch(session, grant, name, slot):
                dispatched.append(grant)
                if slot is not None:
                    self._free.remove(slot)
                    self._sent_to[grant.job_id] = slot.slot_id
            else:
                self._owed.pop(grant.job_id, None)
        return dispatched, decided.rejected

    def _plan_slots(self, live: set[int], claims: dict[int, str],
                    adverts: Mapping[str, SlotInfo]) -> None:
        """This round's free slots, each with the job whose trainer it holds.

        A slot is busy while a chunk it claimed, or one sent to it and not yet
        claimed, is in flight. Entries of slots gone from the heartbeats are
        dropped: their trainers died with them.
        """
        self._sent_to = {j: s for j, s in self._sent_to.items() if j in live}
        busy = {claims[j] for j in live if j in claims}
        busy.update(s for j, s in self._sent_to.items() if j not in claims)
        resident = self.residency.where()
        self.residency.forget_slots({s for s in resident.values() if s not in adverts})
        self._resident = {j: s for j, s in resident.items() if s in adverts}
        holds = {s: j for j, s in self._resident.items()}
        self._free = [SlotView(slot, info.pool, info.queue, holds.get(slot))
                      for slot, info in adverts.items() if slot not in busy]

    def _in_flight_by_pool(self, live: set[int]) -> Counter[str]:
        """Chunks in flight per pool: a dispatched chunk holds its pool's slot
        from the grant on, before any worker of the pool has claimed it."""
        rows = self.state.rows
        return Counter((row.pool if row is not None and row.pool else DEFAULT_POOL)
                       for row in (rows.get(job_id) for job_id in live))

    def _reclaim_lost(self, session: Session, live: set[int], claims: dict[int, str],
                      alive: set[str]) -> list[int]:
        """Jobs marked running whose lease is gone lost their chunk: queue them.

        A lease whose claiming slot is not in ``alive`` is revoked first (and
        dropped from ``live``), so a dead worker's chunk is queued again now
        rather than when its lease would have expired. A job that keeps
        losing chunks while their workers stay up fails instead
        (:mod:`backend.scheduler.lost_chunks`): its own code crashes them.
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
        # Chunks a slot still up had started (claimed): lost, they crashed or hung
        # by themselves. One never started (its message waited or went missing)
        # or whose worker died says nothing against the job, and is not counted.
        started_alive = {job_id for job_id, slot in claims.items()
                         if slot in alive and job_id not in orphaned}
        running = session.exec(  # type: ignore[call-overload]
            select(col(Job.id), col(Job.chunk_seq), col(Job.chunks_run), col(Job.tenant_id))
            .where(col(Job.status) == JobStatus.running)
        ).all()
        lost = [row for row in running if row[0] not in live]
        reclaimed = []
        failed: list[tuple[int, int]] = []
        for job_id, seq, done, tenant_id in lost:
            if self.leases.holder(job_id) is not None:
                continue  # taken or renewed since we listed leases
            in_a_row = self.lost_chunks.lost(job_id, done) if job_id in started_alive else 0
            fenced = update(Job).where(col(Job.id) == job_id, col(Job.chunk_seq) == seq,
                                       col(Job.status) == JobStatus.running)
            if in_a_row >= LOST_IN_A_ROW:
                reason = keep_failing_reason(in_a_row)
                result = session.execute(fenced.values(
                    status=JobStatus.failed, error=reason, end_reason=reason,
                    last_reason=reason, finished_at=utcnow()))
                if result.rowcount == 1:  # type: ignore[attr-defined]
                    failed.append((job_id, tenant_id))
                continue
            why = ("its worker stopped heartbeating" if job_id in orphaned
                   else "its last chunk was lost (worker gone)")
            result = session.execute(fenced.values(status=JobStatus.queued,
                                                   waiting_since=utcnow(),
                                                   last_reason=f"{why}; queued again"))
            if result.rowcount == 1:  # type: ignore[attr-defined]
                reclaimed.append(job_id)
        session.commit()
        if reclaimed:
            log.warning("returned lost chunks of jobs %s to the queue", reclaimed)
        for job_id, tenant_id in failed:
            log.warning("failed job %s: its chunks keep getting lost while their workers "
                        "stay up", job_id)
            self.state.mark_dirty(job_id)
            publish_job_event(self.redis, self.keys, job_id=job_id, tenant_id=tenant_id,
                              status=JobStatus.failed)
        observe_reclaimed(self.redis, self.keys, session, reclaimed)
        return reclaimed

    def _resident_on_free_slots(self) -> frozenset[int]:
        """Jobs a grant would not move: their trainer is on a slot free now."""
        free = {slot.slot_id for slot in self._free}
        return frozenset(job for job, slot in self._resident.items() if slot in free)

    def _dispatch(self, session: Session, grant: Grant, policy: str,
                  slot: SlotView | None = None) -> bool:
        if not self.may_grant():
            return False
        row = self.state.rows.get(grant.job_id)
        if row is None or row.status != JobStatus.queued:
            return False
        seq = row.chunk_seq + 1
        now = utcnow()
        # By primary key, fenced by chunk_seq and status: no ORM object is
        # loaded, so nothing is checked against thousands of identity-map rows.
        result = session.execute(
            update(Job)
            .where(col(Job.id) == grant.job_id, col(Job.chunk_seq) == row.chunk_seq,
                   col(Job.status) == JobStatus.queued)
            .values(status=JobStatus.running, chunk_seq=seq,
                    started_at=func.coalesce(col(Job.started_at), now),
                    last_reason=grant.reason, predicted_gain=grant.predicted_gain,
                    pool=grant.pool)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            session.rollback()
            self.state.mark_dirty(grant.job_id)
            return False  # paused or cancelled between snapshot and grant
        session.execute(insert(Decision).values(
            job_id=grant.job_id, tenant_id=row.tenant_id, chunk_seq=seq,
            iterations=grant.iterations, policy=policy, reason=grant.reason,
            predicted_gain=grant.predicted_gain, created_at=now, pool=grant.pool))
        session.commit()
        self.state.dispatched(grant.job_id, seq, grant.pool)
        self._dispatched_at[grant.job_id] = time.monotonic()
        # Lease before message: a worker only runs a chunk whose lease it sees.
        self.leases.acquire(grant.job_id, seq, self.lease_seconds)
        self.send(grant.job_id, seq, grant.iterations, grant.pool,
                  queue=slot.queue if slot is not None else "",
                  yield_after=grant.yield_after or 0)
        if grant.yield_after is not None:
            self._yielding[grant.job_id] = row.tenant_id
        publish_job_event(self.redis, self.keys, job_id=grant.job_id, tenant_id=row.tenant_id,
                          status=JobStatus.running, reason=grant.reason)
        return True

    def _note_finished_chunks(self, live: set[int]) -> None:
        """Time the chunks whose lease is gone since they were dispatched."""
        now = time.monotonic()
        for job_id in [j for j in self._dispatched_at if j not in live]:
            self._chunk_times.append(now - self._dispatched_at.pop(job_id))

    def chunk_seconds_recent(self) -> float | None:
        """Mean wall time of the recent chunks (dispatch to done); ``None``
        before any chunk finished under this scheduler."""
        if not self._chunk_times:
            return None
        return sum(self._chunk_times) / len(self._chunk_times)

    def _explain(self, policy: Policy, snapshot: Snapshot, granted: set[int]) -> None:
        """Publish why jobs wait (and, for new jobs not yet admitted, their turn).

        Runs after dispatch, and at most every ``EXPLAIN_EVERY_SECONDS`` or ten
        times its own last cost, so a large queue cannot make it the bulk of
        the scheduler's time.
        """
        now = time.monotonic()
        if now - self._explained_at < max(EXPLAIN_EVERY_SECONDS, 10 * self._explain_cost):
            return
        self._explained_at = now
        # The jobs granted this round run now: explained as running, after
        # their slots are taken, so what is ahead of a waiting job is true.
        snapshot = replace(snapshot, free_slots=max(snapshot.free_slots - len(granted), 0),
                           jobs=[replace(j, running=True) if j.job_id in granted else j
                                 for j in snapshot.jobs])
        # Explained as granted: with each experiment's focus applied.
        waiting = explain_waiting(Focused(policy, lambda: self.stopper.standings), snapshot)
        chunk = self.chunk_seconds_recent()
        held = pool_waits(snapshot, [j for j in snapshot.jobs if j.job_id in waiting])
        for job_id, pool in held.items():
            # Behind its pools rather than the ranking: say which pool.
            if waiting[job_id].kind not in (WaitKind.QUOTA, WaitKind.QUOTA_ZERO):
                waiting[job_id] = replace(waiting[job_id], kind=WaitKind.POOL, pool=pool)

        def estimate(kind: str, position: int, ahead_in_tenant: int, quota: int,
                     ahead: int) -> float | None:
            found = wait_estimate(kind=kind, position=position, free_slots=snapshot.free_slots,
                                  total_slots=snapshot.total_slots,
                                  ahead_in_tenant=ahead_in_tenant, quota=quota,
                                  chunk_seconds=chunk, ahead=ahead, policy=policy.name)
            return None if found is None else round(found, 1)

        entries = [replace(why, policy=policy.name,
                           estimate_seconds=estimate(why.kind, why.position, why.ahead_in_tenant,
                                                     why.quota, why.ahead))
                   for job_id, why in waiting.items() if job_id not in granted]
        # New jobs not yet admitted come after every ranked job, in arrival
        # order; a quota-bound one waits on its own team's jobs before it.
        ranked_jobs = len(snapshot.jobs)
        running = snapshot.running_by_tenant()
        tenant_of = {job.job_id: job.tenant_id for job in snapshot.jobs}
        own_before: dict[int | None, int] = {}
        for job_id in waiting:
            own_before[tenant_of[job_id]] = own_before.get(tenant_of[job_id], 0) + 1
        sweep = warmup_shares(policy).sweep
        for number, job_id in enumerate(self._held_back[:HELD_BACK_EXPLAINED], start=1):
            row = self.state.rows.get(job_id)
            tenant_id = row.tenant_id if row else None
            mine = own_before.get(tenant_id, 0)
            own_before[tenant_id] = mine + 1
            quota = snapshot.tenant(row.tenant_id).max_slots if row else 1
            if quota == 0:
                kind = WaitKind.QUOTA_ZERO
            elif row is not None and running.get(row.tenant_id, 0) >= quota:
                kind = WaitKind.QUOTA
            else:
                kind = WaitKind.NEW
            entries.append(WaitingEntry(
                job_id, kind=kind, position=ranked_jobs + number, policy=policy.name, ranked=False,
                at_quota=kind != WaitKind.NEW, ahead=ranked_jobs + number - 1,
                ahead_in_tenant=mine, quota=quota, new_ahead=number - 1,
                sweep_share=None if row is None or row.experiment_id is None else sweep,
                estimate_seconds=estimate(kind, number, mine, quota, ranked_jobs + number - 1)))
        # dict[Any, Any]: redis-py's stubs want a Mapping over its own key union.
        published: dict[Any, Any] = {str(entry.job_id): entry.to_json() for entry in entries}
        try:
            pipe = self.redis.pipeline()
            pipe.delete(self.keys.waiting)
            if published:
                pipe.hset(self.keys.waiting, mapping=published)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not publish queue explanations: %s", exc)
        self._explain_cost = time.monotonic() - now

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

    def _publish_wanted(self, snapshot: Snapshot, in_flight: set[int]) -> None:
        """Tell lengthened chunks in flight to yield while a job waits for a
        slot (Redis ``slots_wanted``, refreshed each round, gone a while after
        this scheduler stops); clear it once none waits or none can yield."""
        self._yielding = {j: t for j, t in self._yielding.items() if j in in_flight}
        wanted = bool(self._yielding) and slots_wanted(snapshot, set(self._yielding.values()))
        if not (wanted or self._wanted_published) or not self.may_grant():
            return
        try:
            if wanted:
                self.redis.set(self.keys.slots_wanted, "1", px=WANTED_TTL_MS)
            else:
                self.redis.delete(self.keys.slots_wanted)
            self._wanted_published = wanted
        except redis.RedisError as exc:
            log.warning("could not publish whether slots are wanted: %s", exc)

    def _publish_status(self, policy: str, slots: int, free: int, runnable: int,
                        grants: list[Grant], granted_ms: float, round_ms: float) -> None:
        status: dict[str, Any] = {
            "at": time.time(), "policy": policy, "slots": slots, "free_slots": free,
            "runnable": runnable, "granted": len(grants), "owner": self.owner,
            "round_ms": round(round_ms, 2), "granted_ms": round(granted_ms, 2),
        }
        try:
            pipe = self.redis.pipeline()
            pipe.hset(self.keys.scheduler_status,
                      mapping={k: json.dumps(v) for k, v in status.items()})
            pipe.lpush(self.keys.scheduler_rounds,
                       json.dumps([round(round_ms, 2), round(granted_ms, 2), len(grants)]))
            pipe.ltrim(self.keys.scheduler_rounds, 0, ROUNDS_KEPT - 1)
            pipe.execute()
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
