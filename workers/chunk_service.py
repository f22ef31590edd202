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
from enum import StrEnum
from typing import Any, cast

import redis
from sqlalchemy import select, update
from sqlalchemy.engine import CursorResult, Engine
from sqlmodel import Session, col

from backend.core.leases import Leases, local_slot_id
from backend.core.loss_store import insert_loss_points, insert_metric_points
from backend.core.models import Job, JobStatus, LossRecord, MetricRecord, utcnow
from backend.core.notify import publish_job_event, wake_scheduler
from backend.core.redis_keys import RedisKeys
from backend.core.safe_text import storable
from workers.checkpoints import CheckpointStore
from workers.iterations import Iterations, Point, Sample, run_iterations
from workers.metrics import observe_chunk
from workers.stopping import StopRule, Verdict
from workers.trainer_loading import load_trainer
from workers.trainers.contract import Trainer

log = logging.getLogger(__name__)

STREAM_MAXLEN = 20_000
# Push points to the live stream at least this often during a chunk.
STREAM_FLUSH_SECONDS = 0.2
COMMIT_ATTEMPTS = 5
"""Tries at storing a chunk while API status changes (pause, cancel) keep racing it."""


class Outcome(StrEnum):
    """What became of one delivered chunk."""

    ran = "ran"
    discarded = "discarded"  # stale or duplicate: nothing stored
    failed = "failed"  # ran, and the job failed


@dataclass
class ChunkOutcome:
    job_id: int
    chunk_seq: int
    outcome: Outcome
    detail: str = ""
    iterations: int = 0
    status: str | None = None


@dataclass
class _Run:
    points: list[Point] = field(default_factory=list)
    metrics: list[Sample] = field(default_factory=list)
    evaluations: list[Sample] = field(default_factory=list)
    output: str | None = None
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
    began = time.perf_counter()
    leases = Leases(ctx.redis, ctx.keys)
    # Claimed for this slot, so the scheduler can reclaim it once we stop heartbeating.
    holder = leases.claim(job_id, chunk_seq, local_slot_id())
    if holder != chunk_seq:
        return ChunkOutcome(job_id, chunk_seq, Outcome.discarded, f"lease held by {holder}")
    with Session(ctx.engine, expire_on_commit=False) as session:
        job = session.get(Job, job_id)
        if job is None or job.chunk_seq != chunk_seq or job.status in (
            JobStatus.completed, JobStatus.failed
        ):
            leases.release(job_id, chunk_seq)
            return ChunkOutcome(job_id, chunk_seq, Outcome.discarded, "job moved on")
        rule = StopRule(job.max_iterations, job.target_loss, job.tolerance,
                        job.convergence_window, job.quality_metric)
        # The convergence test spans chunks: it needs the losses just before this one.
        recent = session.execute(
            select(col(LossRecord.loss))
            .where(col(LossRecord.job_id) == job_id,
                   col(LossRecord.iteration) <= job.checkpoint_iteration)
            .order_by(col(LossRecord.iteration).desc())
            .limit(rule.window + 1)
        ).all()
        quality = [] if rule.metric == "loss" else session.execute(
            select(col(MetricRecord.value))
            .where(col(MetricRecord.job_id) == job_id, col(MetricRecord.split) == "eval",
                   col(MetricRecord.name) == rule.metric,
                   col(MetricRecord.iteration) <= job.checkpoint_iteration)
            .order_by(col(MetricRecord.iteration).desc())
            .limit(rule.window + 1)
        ).all()
    history = [float(r[0]) for r in reversed(recent)]
    quality_history = [float(r[0]) for r in reversed(quality)]
    run = _train(ctx, job, chunk_seq, budget, rule, history, quality_history, leases)
    if run.abandoned:
        return ChunkOutcome(job_id, chunk_seq, Outcome.discarded, "lease expired while running")
    if run.state is not None:
        ctx.checkpoints.save(job_id, run.iteration, run.state)
    status = _commit(ctx, job, chunk_seq, run)
    if status is None:
        leases.release(job_id, chunk_seq)
        return ChunkOutcome(job_id, chunk_seq, Outcome.discarded, "fenced off by a newer chunk")
    if run.state is not None:
        ctx.checkpoints.prune(job_id, run.iteration)
    leases.release(job_id, chunk_seq)
    publish_job_event(ctx.redis, ctx.keys, job_id=job_id, tenant_id=job.tenant_id,
                      status=status, iterations_done=run.iteration)
    wake_scheduler(ctx.redis, ctx.keys, f"chunk {job_id}:{chunk_seq}")
    observe_chunk(ctx.redis, ctx.keys, began, run.points)
    outcome = Outcome.failed if status == JobStatus.failed else Outcome.ran
    return ChunkOutcome(job_id, chunk_seq, outcome, run.error or "", len(run.points), status)


def _train(ctx: ChunkContext, job: Job, seq: int, budget: int, rule: StopRule,
           history: list[float], quality_history: list[float], leases: Leases) -> _Run:
    start = job.checkpoint_iteration
    try:
        trainer = _load_trainer(ctx, job)
    except Exception as exc:  # a broken spec or store fails this job only
        log.exception("job %s could not start its chunk", job.id)
        return _Run(iteration=start,
                    verdict=Verdict("failed", f"could not start: {type(exc).__name__}: {exc}"),
                    error=str(exc), output=_output_of(exc))
    try:
        return _train_with(ctx, job, seq, budget, rule, history, quality_history, leases,
                           trainer)
    finally:
        trainer.close()


def _output_of(source: object) -> str | None:
    """What a sandboxed trainer printed (the sandbox attaches it); None otherwise."""
    output = getattr(source, "output_tail", None)
    if callable(output):
        return str(output())
    return output if isinstance(output, str) else None


def _train_with(ctx: ChunkContext, job: Job, seq: int, budget: int, rule: StopRule,
                history: list[float], quality_history: list[float], leases: Leases,
                trainer: Trainer) -> _Run:
    start = job.checkpoint_iteration
    live = _LiveTicker(ctx, job.id or 0, seq, leases)
    result = run_iterations(trainer, rule, budget, live.tick, start=start, history=history,
                            initial=job.initial_loss, eval_every=job.eval_every,
                            quality_history=quality_history)
    run = _Run(points=result.points, metrics=result.metrics, evaluations=result.evaluations,
               verdict=result.verdict, iteration=result.iteration,
               output=_output_of(trainer))
    if result.stopped:
        run.abandoned = True
        return run
    if result.error is not None:
        error = result.error
        log.error("job %s failed in training", job.id, exc_info=error)
        run.verdict = Verdict("failed", f"training error at iteration {run.iteration + 1}: "
                                        f"{type(error).__name__}: {error}")
        run.error = str(error)
        run.output = _output_of(trainer) or _output_of(error)
        return run
    live.flush(run.points)
    if run.verdict is None or run.verdict.status == "completed":
        run.state = trainer.state()
    else:
        # A NaN/divergent step poisons the model: keep the last good checkpoint
        # and only the finite points before it.
        run.points = [p for p in run.points if math.isfinite(p[1])]
        run.iteration = start
    return run


def _load_trainer(ctx: ChunkContext, job: Job) -> Trainer:
    blob = None
    if job.checkpoint_iteration > 0:
        blob = ctx.checkpoints.load(job.id or 0, job.checkpoint_iteration)
        if blob is None:
            raise RuntimeError(f"checkpoint for iteration {job.checkpoint_iteration} is missing")
    return load_trainer(ctx.engine, job, blob)


class _LiveTicker:
    """Between iterations: stream new points for live charts and keep the lease."""

    def __init__(self, ctx: ChunkContext, job_id: int, seq: int, leases: Leases) -> None:
        self.ctx, self.job_id, self.seq, self.leases = ctx, job_id, seq, leases
        self.last_flush = self.last_renew = time.monotonic()
        self.flushed = 0

    def tick(self, run: Iterations) -> bool:
        """False when the lease was lost: another worker may own the job now."""
        now = time.monotonic()
        if now - self.last_flush >= STREAM_FLUSH_SECONDS:
            self.flush(run.points)
            self.last_flush = now
        if now - self.last_renew >= self.ctx.lease_seconds / 3:
            if not self.leases.renew(self.job_id, self.seq, self.ctx.lease_seconds):
                return False
            self.last_renew = now
        return True

    def flush(self, points: list[Point]) -> None:
        _stream(self.ctx, self.job_id, points[self.flushed:])
        self.flushed = len(points)


def _stream(ctx: ChunkContext, job_id: int, points: list[Point]) -> None:
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
    for _attempt in range(COMMIT_ATTEMPTS):
        with Session(ctx.engine, expire_on_commit=False) as session:
            current = session.get(Job, job.id)
            if current is None or current.chunk_seq != seq:
                return None
            values = _progress_values(current, run)
            result = cast(CursorResult[Any], session.execute(
                update(Job)
                .where(col(Job.id) == job.id, col(Job.chunk_seq) == seq,
                       col(Job.status) == current.status)
                .values(**values)
            ))
            if result.rowcount != 1:
                session.rollback()
                continue  # the API changed the status meanwhile (pause, cancel): retry
            insert_loss_points(session, job.id or 0, run.points)
            insert_metric_points(session, job.id or 0, "train", run.metrics)
            insert_metric_points(session, job.id or 0, "eval", run.evaluations)
            session.commit()
            return str(values["status"])
    raise RuntimeError(f"job {job.id}: could not commit chunk {seq} "
                       f"after {COMMIT_ATTEMPTS} attempts")


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
    if run.evaluations:
        iteration, metrics = run.evaluations[-1]
        values["last_eval"] = dict({storable(k): v for k, v in metrics.items()},
                                   iteration=iteration)
    if run.output is not None:
        # Tenant text: a lone surrogate or NUL would make the commit itself
        # fail (outside the job's error handling), and ESC would reach terminals.
        values["trainer_output"] = storable(run.output)
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
        reason = storable(run.verdict.reason)  # often quotes a tenant's exception
        values["end_reason"] = reason
        if run.verdict.status == "failed":
            values["error"] = reason
    elif status == JobStatus.running:
        status = JobStatus.queued
        values["waiting_since"] = utcnow()
    if status in (JobStatus.completed, JobStatus.failed):
        values["finished_at"] = utcnow()
    values["status"] = status
    return values
