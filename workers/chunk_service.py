"""Running one granted chunk of a job: the plain function behind run_chunk.

Order of effects, chosen so that a crash anywhere loses nothing:
1. check the lease and the job's chunk_seq (a stale or duplicate chunk stops);
2. take the trainer left resident on this slot when it stands exactly at the
   job's committed progress; otherwise write and let go of the slot's other
   job and restore this one from the checkpoint the database names
   (:mod:`workers.resident`);
3. run the granted iterations, streaming points to Redis for live charts;
4. when the job ends or its cadence has passed since the last save
   (``checkpoint_seconds``, longer for a state slow to save:
   :func:`workers.resident.cadence_seconds`), write the checkpoint file
   (named by iteration, atomic rename);
5. one DB transaction, fenced by chunk_seq: insert loss points (duplicates
   ignored), move progress (and checkpoint_iteration, if saved) forward, set
   the status;
6. record this slot as the job's holder, release the lease, wake the scheduler.
Training is deterministic from a checkpoint, so re-running from it (a chunk
whose commit never happened, or a job that moved) reproduces exactly the
points already stored.
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

from backend.core.checkpoints import CheckpointStore
from backend.core.leases import Leases, local_slot_id
from backend.core.loss_store import insert_loss_points, insert_metric_points
from backend.core.models import Job, JobStatus, LossRecord, MetricRecord, utcnow
from backend.core.notify import publish_job_event, wake_scheduler
from backend.core.redis_keys import RedisKeys
from backend.core.safe_text import storable
from workers.iterations import Iterations, Point, Sample, run_iterations
from workers.metrics import observe_chunk
from workers.resident import SLOT, Resident, StateWriter, cadence_seconds, close_quietly
from workers.stopping import StopRule, Verdict
from workers.trainer_loading import load_trainer
from workers.trainers.contract import Trainer

log = logging.getLogger(__name__)

STREAM_MAXLEN = 20_000
# Push points to the live stream at least this often during a chunk.
STREAM_FLUSH_SECONDS = 0.2
STATUS_CHECK_SECONDS = 1.0
"""How often a running chunk looks whether its job was paused or cancelled."""
WANTED_CHECK_SECONDS = 0.2
"""How often a lengthened chunk past its yield point looks whether a job waits
for a slot (one Redis read): the wait it adds to an arrival's."""
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
    text_sample: tuple[int, str] | None = None
    output: str | None = None
    verdict: Verdict | None = None
    iteration: int = 0
    error: str | None = None
    abandoned: bool = False
    trainer: Resident | None = None
    """The trainer the chunk ran; closed unless ``keep`` leaves it resident."""
    keep: Resident | None = None
    resident: bool = False
    """It stepped on the trainer left on this slot."""
    restored: bool = False
    """It built the trainer (and restored the checkpoint)."""
    saved: bool = False
    """It wrote the state at ``saved_iteration``."""
    saved_iteration: int | None = None
    switch_seconds: float | None = None


@dataclass
class ChunkContext:
    engine: Engine
    redis: redis.Redis
    keys: RedisKeys
    checkpoints: CheckpointStore
    lease_seconds: float
    checkpoint_seconds: float = 30.0
    """A resident trainer's state is written at a chunk's end at most this often."""
    checkpoint_share: float = 0.02
    """...and no more often than keeps those saves within this share of its time
    (:func:`workers.resident.cadence_seconds`)."""


def run_chunk(ctx: ChunkContext, job_id: int, chunk_seq: int, budget: int,
              yield_after: int = 0) -> ChunkOutcome:
    """Run ``budget`` iterations of ``job_id`` granted as chunk ``chunk_seq``;
    ``yield_after`` (> 0: a chunk lengthened while slots idled) ends it after
    that many once the scheduler says a job waits for a slot."""
    began = time.perf_counter()
    leases = Leases(ctx.redis, ctx.keys)
    slot = local_slot_id()
    # Claimed for this slot, so the scheduler can reclaim it once we stop heartbeating.
    holder = leases.claim(job_id, chunk_seq, slot)
    if holder != chunk_seq:
        return ChunkOutcome(job_id, chunk_seq, Outcome.discarded, f"lease held by {holder}")
    with Session(ctx.engine, expire_on_commit=False) as session:
        job = session.get(Job, job_id)
        if job is None or job.chunk_seq != chunk_seq or job.status in (
            JobStatus.completed, JobStatus.failed
        ):
            leases.release(job_id, chunk_seq)
            return ChunkOutcome(job_id, chunk_seq, Outcome.discarded, "job moved on")
    with SLOT.lock:
        return _run_on_slot(ctx, job, chunk_seq, budget, leases, slot, began, yield_after)


def _run_on_slot(ctx: ChunkContext, job: Job, seq: int, budget: int, leases: Leases,
                 slot: str, began: float, yield_after: int = 0) -> ChunkOutcome:
    job_id = job.id or 0
    writer = StateWriter(ctx, slot)
    res, how = _trainer_for(ctx, job, writer)
    if isinstance(res, _Run):  # could not start: fails this job only
        run = res
    else:
        run = _train(ctx, job, seq, budget, res, how, leases, yield_after)
        _settle(ctx, writer, res, run)
    if run.abandoned:
        _drop(writer, run)  # another slot may own the job by now
        return ChunkOutcome(job_id, seq, Outcome.discarded, "lease expired while running")
    try:
        status = _commit(ctx, job, seq, run)
    except Exception as exc:
        # The job fails alone, once, instead of its chunk being lost and re-run for ever.
        log.exception("job %s: storing chunk %s failed", job_id, seq)
        _drop(writer, run)
        status = _fail_uncommitted(ctx, job, seq, f"storing its chunk failed: "
                                                  f"{type(exc).__name__}")
    if status is None:
        _drop(writer, run)
        leases.release(job_id, seq)
        return ChunkOutcome(job_id, seq, Outcome.discarded, "fenced off by a newer chunk")
    if run.saved and run.saved_iteration is not None:
        # Safe under the lease: no other slot is restoring this job now.
        ctx.checkpoints.prune(job_id, run.saved_iteration)
    if run.keep is not None:
        # Before the lease goes: the next chunk's placement reads it.
        run.keep.iteration = run.iteration
        run.keep.idle_since = time.monotonic()
        SLOT.current = run.keep
        writer.residency.hold(job_id, slot)
    else:
        _drop(writer, run)
    leases.release(job_id, seq)
    publish_job_event(ctx.redis, ctx.keys, job_id=job_id, tenant_id=job.tenant_id,
                      status=status, iterations_done=run.iteration)
    wake_scheduler(ctx.redis, ctx.keys, f"chunk {job_id}:{seq}")
    observe_chunk(ctx.redis, ctx.keys, began, run.points)
    outcome = Outcome.failed if status == JobStatus.failed else Outcome.ran
    return ChunkOutcome(job_id, seq, outcome, run.error or "", len(run.points), status)


def _drop(writer: StateWriter, run: _Run) -> None:
    """Close a trainer this chunk will not leave resident."""
    res = run.keep or run.trainer
    run.keep = None
    if res is not None:
        close_quietly(res)
        writer.residency.release(res.job_id, writer.slot_id)


def _trainer_for(ctx: ChunkContext, job: Job, writer: StateWriter) -> tuple[Resident | _Run, str]:
    """The job's trainer on this slot: the resident one when it is exactly at the
    job's committed progress, else built and restored from its checkpoint (after
    the slot's previous job, if any, is written and let go)."""
    job_id = job.id or 0
    current = SLOT.take()
    if current is not None:
        if current.job_id == job_id and current.iteration == job.iterations_done and \
                writer.residency.holder(job_id) == writer.slot_id:
            return current, "resident"
        # Another job's, or this job's but behind what another slot committed since.
        writer.let_go(current, save=current.job_id != job_id)
    start = job.checkpoint_iteration
    began = time.perf_counter()
    try:
        trainer = _load_trainer(ctx, job)
    except Exception as exc:  # a broken spec or store fails this job only
        log.exception("job %s could not start its chunk", job_id)
        return _Run(iteration=start,
                    verdict=Verdict("failed", f"could not start: {type(exc).__name__}: {exc}"),
                    error=str(exc), output=_output_of(exc)), "failed"
    now = time.monotonic()
    return Resident(job_id=job_id, trainer=trainer, iteration=start, saved_iteration=start,
                    saved_at=now, start_seconds=time.perf_counter() - began,
                    unpaid_start_seconds=float(getattr(trainer, "unpaid_start_seconds", 0.0)),
                    idle_since=now), "restored"


def _output_of(source: object) -> str | None:
    """What a sandboxed trainer printed (the sandbox attaches it); None otherwise."""
    output = getattr(source, "output_tail", None)
    if callable(output):
        return str(output())
    return output if isinstance(output, str) else None


def _train(ctx: ChunkContext, job: Job, seq: int, budget: int, res: Resident, how: str,
           leases: Leases, yield_after: int = 0) -> _Run:
    start = res.iteration
    if how == "restored":
        # A job that moved re-runs from its checkpoint to where it was, then
        # makes the progress it was granted.
        budget += max(job.iterations_done - start, 0)
    rule = StopRule(job.max_iterations, job.target_loss, job.tolerance,
                    job.convergence_window, job.quality_metric)
    history, quality_history = _recent(ctx, job, rule, start)
    # Counted from where the grant's progress begins (past a restore's re-run).
    yield_at = max(job.iterations_done, start) + yield_after if yield_after > 0 else None
    live = _LiveTicker(ctx, job.id or 0, seq, leases, yield_at)
    if not live.renew():
        # Claimed before the trainer's start (a sandbox, a restore), which may
        # have taken most of the lease: a first step that hangs until its
        # deadline must find a whole lease, or the chunk is lost, not failed.
        return _Run(iteration=start, trainer=res, abandoned=True)
    trainer = res.trainer
    result = run_iterations(trainer, rule, budget, live.tick, start=start, history=history,
                            initial=job.initial_loss, eval_every=job.eval_every,
                            quality_history=quality_history)
    run = _Run(points=result.points, metrics=result.metrics, evaluations=result.evaluations,
               text_sample=result.text_sample, verdict=result.verdict, iteration=result.iteration,
               output=_output_of(trainer), trainer=res,
               resident=how == "resident", restored=how == "restored")
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
    if run.verdict is not None and run.verdict.status != "completed":
        # A NaN/divergent step poisons the model: keep the last good checkpoint
        # and only the finite points before it.
        run.points = [p for p in run.points if math.isfinite(p[1])]
        run.iteration = start
    return run


def _recent(ctx: ChunkContext, job: Job, rule: StopRule,
            start: int) -> tuple[list[float], list[float]]:
    """The losses (and quality values) just before ``start``: the convergence
    test spans chunks."""
    with Session(ctx.engine) as session:
        recent = session.execute(
            select(col(LossRecord.loss))
            .where(col(LossRecord.job_id) == job.id, col(LossRecord.iteration) <= start)
            .order_by(col(LossRecord.iteration).desc())
            .limit(rule.history_length)
        ).all()
        quality = [] if rule.metric == "loss" else session.execute(
            select(col(MetricRecord.value))
            .where(col(MetricRecord.job_id) == job.id, col(MetricRecord.split) == "eval",
                   col(MetricRecord.name) == rule.metric,
                   col(MetricRecord.iteration) <= start)
            .order_by(col(MetricRecord.iteration).desc())
            .limit(rule.history_length)
        ).all()
    return [float(r[0]) for r in reversed(recent)], [float(r[0]) for r in reversed(quality)]


def _settle(ctx: ChunkContext, writer: StateWriter, res: Resident, run: _Run) -> None:
    """After the steps: write the state when the job ends or the cadence is due,
    and decide whether the trainer stays resident. Any exception of the
    trainer's here fails the job with its reason."""
    if run.abandoned or run.error is not None or (
            run.verdict is not None and run.verdict.status != "completed"):
        return  # dropped: the last good checkpoint stays in force
    res.iteration = run.iteration
    ended = run.verdict is not None
    landed = writer.landed(res)
    if landed is not None:  # recorded by this chunk's commit, under its lease
        run.saved = True
    due = time.monotonic() - res.saved_at >= cadence_seconds(
        res, ctx.checkpoint_seconds, ctx.checkpoint_share)
    if res.dirty and (ended or (due and res.pending is None)):
        try:
            if ended:  # its final state, durable before the job reads as over
                writer.save(res)
            else:
                writer.save_behind(res)
        except Exception as exc:
            log.exception("job %s: state() failed", res.job_id)
            run.verdict = Verdict("failed", f"saving its state failed at iteration "
                                            f"{run.iteration}: {type(exc).__name__}: {exc}")
            run.error = str(exc)
            run.output = _output_of(res.trainer) or _output_of(exc)
            run.iteration = res.saved_iteration
            return
        run.saved = run.saved or ended
    run.saved_iteration = res.saved_iteration
    run.switch_seconds = res.switch_seconds
    if not ended:
        run.keep = res


def _load_trainer(ctx: ChunkContext, job: Job) -> Trainer:
    blob = None
    if job.checkpoint_iteration > 0:
        blob = ctx.checkpoints.load(job.id or 0, job.checkpoint_iteration)
        if blob is None:
            raise RuntimeError(f"checkpoint for iteration {job.checkpoint_iteration} is missing")
    return load_trainer(ctx.engine, job, blob)


class _LiveTicker:
    """Between iterations: stream new points for live charts, keep the lease,
    and end the chunk early once the job is paused or cancelled, or, for a
    lengthened chunk past its yield point, once a job waits for a slot."""

    def __init__(self, ctx: ChunkContext, job_id: int, seq: int, leases: Leases,
                 yield_at: int | None = None) -> None:
        self.ctx, self.job_id, self.seq, self.leases = ctx, job_id, seq, leases
        self.yield_at = yield_at
        self.last_flush = self.last_renew = self.last_status = time.monotonic()
        self.last_wanted = float("-inf")
        self.flushed = 0

    def tick(self, run: Iterations) -> bool:
        """False when the lease was lost: another worker may own the job now."""
        now = time.monotonic()
        if now - self.last_flush >= STREAM_FLUSH_SECONDS:
            self.flush(run.points)
            self.last_flush = now
        if now - self.last_status >= STATUS_CHECK_SECONDS:
            # A chunk long enough to amortise a move may last minutes: a pause
            # or cancel takes effect at the next iteration, the points kept.
            self.last_status = now
            with Session(self.ctx.engine) as session:
                status = session.execute(select(col(Job.status))
                                         .where(col(Job.id) == self.job_id)).scalar()
            run.wind_down = run.wind_down or status in (JobStatus.paused, JobStatus.cancelled)
        if self.yield_at is not None and run.iteration >= self.yield_at and \
                now - self.last_wanted >= WANTED_CHECK_SECONDS:
            self.last_wanted = now
            run.wind_down = run.wind_down or self._slot_wanted()
        if now - self.last_renew >= self.ctx.lease_seconds / 3:
            return self.renew()
        return True

    def _slot_wanted(self) -> bool:
        """Whether the scheduler says a job waits for a slot; a Redis outage
        reads as no (the chunk runs out, as before lengthened chunks yielded)."""
        try:
            return bool(self.ctx.redis.exists(self.ctx.keys.slots_wanted))
        except redis.RedisError:
            return False

    def renew(self) -> bool:
        """Extend the lease to a whole one from now; False when it was lost."""
        if not self.leases.renew(self.job_id, self.seq, self.ctx.lease_seconds):
            return False
        self.last_renew = time.monotonic()
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


def _fail_uncommitted(ctx: ChunkContext, job: Job, seq: int, reason: str) -> str | None:
    """Fail the job without its chunk's points, fenced by chunk_seq like a commit."""
    with Session(ctx.engine) as session:
        result = cast(CursorResult[Any], session.execute(
            update(Job)
            .where(col(Job.id) == job.id, col(Job.chunk_seq) == seq,
                   col(Job.status).not_in([JobStatus.completed, JobStatus.failed]))
            .values(status=JobStatus.failed, error=reason, end_reason=reason,
                    finished_at=utcnow())))
        session.commit()
    return JobStatus.failed if result.rowcount == 1 else None


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
    if run.text_sample is not None:
        # Generated text: stored as text (control characters made visible),
        # shown on the job page as text, never as markup.
        values["sample_iteration"], text = run.text_sample
        values["sample_text"] = storable(text)
    if run.output is not None:
        # Tenant text: a lone surrogate or NUL would make the commit itself
        # fail (outside the job's error handling), and ESC would reach terminals.
        values["trainer_output"] = storable(run.output)
    if run.saved and run.saved_iteration is not None:
        values["checkpoint_iteration"] = run.saved_iteration
        values["checkpoints_saved"] = current.checkpoints_saved + 1
    last_reported = good[-1][0] if good else 0
    values["iterations_done"] = max(run.iteration, last_reported, current.checkpoint_iteration)
    values["restores"] = current.restores + int(run.restored)
    values["resident_chunks"] = current.resident_chunks + int(run.resident)
    if run.switch_seconds is not None:
        values["switch_seconds"] = run.switch_seconds
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
        elif current.stopped_early:
            # Its rule stopped it while this, its last chunk, ran: the run
            # reached its end all the same, so nothing was cut short or saved
            # (the stop stays in its decision log).
            values["stopped_early"] = False
    elif status == JobStatus.running:
        status = JobStatus.queued
        values["waiting_since"] = utcnow()
    if status in (JobStatus.completed, JobStatus.failed):
        values["finished_at"] = utcnow()
    values["status"] = status
    return values
