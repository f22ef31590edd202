"""Running one granted chunk of a job: the plain function behind run_chunk.

Order of effects, chosen so that a crash anywhere loses nothing:
1. check the lease and the job's chunk_seq (a stale or duplicate chunk stops);
2. restore the trainer from the checkpoint the database names;
3. run the granted iterations, streaming points to Redis for live charts;
4. write the new checkpoint file (named by iteration, atomic rename);
5. one DB transaction, fenced by chunk_seq: insert loss points (duplicates
   ignored), move checkpoint_iteration and progress forward, set the status;
6. release the lease and wake the scheduler.
Training is deterministic from a checkpoint, so re-running a chunk whose
commit never happened reproduces exactly the same points.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import redis
from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from backend.core.leases import Leases, local_slot_id
from backend.core.loss_store import insert_loss_points
from backend.core.models import Job, JobStatus, LossRecord, utcnow
from backend.core.notify import publish_job_event, wake_scheduler
from backend.core.redis_keys import RedisKeys
from workers.algorithms import make_trainer, restore_trainer
from workers.checkpoints import CheckpointStore
from workers.stopping import StopRule, Verdict, check
from workers.uploaded import resolve_dataset

log = logging.getLogger(__name__)

STREAM_MAXLEN = 20_000
# Push points to the live stream at least this often during a chunk.
STREAM_FLUSH_SECONDS = 0.2


@dataclass
class ChunkOutcome:
    job_id: int
    chunk_seq: int
    outcome: str  # ran, discarded, failed
    detail: str = ""
    iterations: int = 0
    status: str | None = None


@dataclass
class _Run:
    points: list[tuple[int, float, float]] = field(default_factory=list)
    verdict: Verdict | None = None
    state: bytes | None = None
    iteration: int = 0
    error: str | None = None
    abandoned: bool = False


@dataclass
class ChunkContext:
    engine: Engine
    redis: redis.Redis
    keys: RedisKeys
    checkpoints: CheckpointStore
    lease_seconds: float


def run_chunk(ctx: ChunkContext, job_id: int, chunk_seq: int, budget: int) -> ChunkOutcome:
    leases = Leases(ctx.redis, ctx.keys)
    # Claimed for this slot, so the scheduler can reclaim it once we stop heartbeating.
    holder = leases.claim(job_id, chunk_seq, local_slot_id())
    if holder != chunk_seq:
        return ChunkOutcome(job_id, chunk_seq, "discarded", f"lease held by {holder}")
    with Session(ctx.engine, expire_on_commit=False) as session:
        job = session.get(Job, job_id)
        if job is None or job.chunk_seq != chunk_seq or job.status in (
            JobStatus.completed, JobStatus.failed
        ):
            leases.release(job_id, chunk_seq)
            return ChunkOutcome(job_id, chunk_seq, "discarded", "job moved on")
        recent = session.execute(
            select(col(LossRecord.loss))
            .where(col(LossRecord.job_id) == job_id,
                   col(LossRecord.iteration) <= job.checkpoint_iteration)
            .order_by(col(LossRecord.iteration).desc())
            .limit(job.convergence_window + 1)
        ).all()
    history = [float(r[0]) for r in reversed(recent)]
    run = _train(ctx, job, chunk_seq, budget, history, leases)
    if run.abandoned:
        return ChunkOutcome(job_id, chunk_seq, "discarded", "lease expired while running")
    if run.state is not None:
        ctx.checkpoints.save(job_id, run.iteration, run.state)
    status = _commit(ctx, job, chunk_seq, run)
    if status is None:
        leases.release(job_id, chunk_seq)
        return ChunkOutcome(job_id, chunk_seq, "discarded", "fenced off by a newer chunk")
    if run.state is not None:
        ctx.checkpoints.prune(job_id, run.iteration)
    leases.release(job_id, chunk_seq)
    publish_job_event(ctx.redis, ctx.keys, job_id=job_id, tenant_id=job.tenant_id,
                      status=status, iterations_done=run.iteration)
    wake_scheduler(ctx.redis, ctx.keys, f"chunk {job_id}:{chunk_seq}")
    outcome = "failed" if status == JobStatus.failed else "ran"
    return ChunkOutcome(job_id, chunk_seq, outcome, run.error or "", len(run.points), status)


def _train(ctx: ChunkContext, job: Job, seq: int, budget: int, history: list[float],
           leases: Leases) -> _Run:
    run = _Run(iteration=job.checkpoint_iteration)
    try:
        dataset = resolve_dataset(ctx.engine, job)  # built-in or the tenant's upload
        if job.checkpoint_iteration > 0:
            data = ctx.checkpoints.load(job.id or 0, job.checkpoint_iteration)
            if data is None:
                raise RuntimeError(
                    f"checkpoint for iteration {job.checkpoint_iteration} is missing"
                )
            trainer = restore_trainer(job.algorithm, data, dataset, job.params, job.seed)
        else:
            trainer = make_trainer(job.algorithm, dataset, job.params, job.seed)
    except Exception as exc:  # a broken spec or store fails this job only
        log.exception("job %s could not start its chunk", job.id)
        run.verdict = Verdict("failed", f"could not start: {type(exc).__name__}: {exc}")
        run.error = str(exc)
        return run

    rule = StopRule(job.max_iterations, job.target_loss, job.tolerance, job.convergence_window)
    initial = job.initial_loss if job.initial_loss is not None else None
    last_flush = last_renew = time.monotonic()
    flushed = 0
    stop_at = min(job.checkpoint_iteration + budget, job.max_iterations)
    try:
        while run.iteration < stop_at:
            started = time.perf_counter()
            loss = float(trainer.step(1)[0])
            elapsed = time.perf_counter() - started
            run.iteration += 1
            run.points.append((run.iteration, loss, elapsed))
            history.append(loss)
            if initial is None:
                initial = loss
            run.verdict = check(rule, run.iteration, history, initial)
            if len(history) > rule.window + 1:
                del history[0]
            now = time.monotonic()
            if now - last_flush >= STREAM_FLUSH_SECONDS:
                _stream(ctx, job.id or 0, run.points[flushed:])
                flushed, last_flush = len(run.points), now
            if now - last_renew >= ctx.lease_seconds / 3:
                if not leases.renew(job.id or 0, seq, ctx.lease_seconds):
                    run.abandoned = True
                    return run
                last_renew = now
            if run.verdict is not None:
                break
    except Exception as exc:
        log.exception("job %s failed in training", job.id)
        run.verdict = Verdict("failed", f"training error at iteration {run.iteration + 1}: "
                                        f"{type(exc).__name__}: {exc}")
        run.error = str(exc)
        return run
    _stream(ctx, job.id or 0, run.points[flushed:])
    if run.verdict is None or run.verdict.status == "completed":
        run.state = trainer.state_bytes()
    else:
        # A NaN/divergent step poisons the model: keep the last good checkpoint
        # and only the finite points before it.
        run.points = [p for p in run.points if math.isfinite(p[1])]
        run.iteration = job.checkpoint_iteration
    return run


def _stream(ctx: ChunkContext, job_id: int, points: list[tuple[int, float, float]]) -> None:
    if not points:
        return
    try:
        pipe = ctx.redis.pipeline()
        for iteration, loss, seconds in points:
            if math.isfinite(loss):
                pipe.xadd(ctx.keys.job_stream(job_id),
                          {"iteration": iteration, "loss": repr(loss), "seconds": repr(seconds),
                           "t": repr(time.time())},
                          maxlen=STREAM_MAXLEN, approximate=True)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("live stream unavailable: %s", exc)


def _commit(ctx: ChunkContext, job: Job, seq: int, run: _Run) -> str | None:
    """Store the chunk's results if ``seq`` still owns the job; returns the
    job's new status, or None when a newer chunk fenced this one off."""
    for _attempt in range(5):
        with Session(ctx.engine, expire_on_commit=False) as session:
            current = session.get(Job, job.id)
            if current is None or current.chunk_seq != seq:
                return None
            values = _progress_values(current, run)
            result = session.execute(
                update(Job)
                .where(Job.id == job.id, Job.chunk_seq == seq,  # type: ignore[arg-type]
                       Job.status == current.status)  # type: ignore[arg-type]
                .values(**values)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                session.rollback()
                continue  # the API changed the status meanwhile (pause, cancel): retry
            insert_loss_points(session, job.id or 0, run.points)
            session.commit()
            return str(values["status"])
    raise RuntimeError(f"job {job.id}: could not commit chunk {seq} after retries")


def _progress_values(current: Job, run: _Run) -> dict[str, Any]:
    values: dict[str, Any] = {}
    good = [p for p in run.points if math.isfinite(p[1])]
    if good:
        losses = [p[1] for p in good]
        values["current_loss"] = losses[-1]
        best = min(losses)
        values["best_loss"] = best if current.best_loss is None else min(best, current.best_loss)
        if current.initial_loss is None:
            values["initial_loss"] = losses[0]
    values["checkpoint_iteration"] = run.iteration
    last_reported = good[-1][0] if good else 0
    values["iterations_done"] = max(run.iteration, last_reported, current.checkpoint_iteration)
    values["attained_seconds"] = current.attained_seconds + sum(p[2] for p in run.points)
    values["chunks_run"] = current.chunks_run + 1
    status = current.status
    if status == JobStatus.cancelled:
        pass
    elif run.verdict is not None:
        status = run.verdict.status
        values["end_reason"] = run.verdict.reason
        if run.verdict.status == "failed":
            values["error"] = run.verdict.reason
    elif status == JobStatus.running:
        status = JobStatus.queued
        values["waiting_since"] = utcnow()
    if status in (JobStatus.completed, JobStatus.failed):
        values["finished_at"] = utcnow()
    values["status"] = status
    return values
