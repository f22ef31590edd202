"""The trainer a worker slot keeps loaded between chunks: at most one per slot.

A chunk is a scheduling decision, not a restart. The slot that ran a job's
last chunk keeps its trainer (in this process for built-in and plugin
trainers; tenant code keeps its sandbox alive), so the job's next chunk on
this slot steps on with no build, no restore and no sandbox start.

The state leaves the slot only when the job does:
- another job is granted this slot: the resident job is *evicted*;
- the job is paused, cancelled or over (the slot's idle thread writes it and
  lets it go within ``STATUS_CHECK_SECONDS``), or is not granted again for
  ``IDLE_SAVE_SECONDS`` (written, and kept while the job is queued);
- the process shuts down;
plus, while it stays, at a chunk's end at most every ``CHECKPOINT_SECONDS``:
the state is taken between chunks, but its file is written and made durable
by a background thread while the next chunks train (:class:`WriteBehind`),
and recorded as the job's checkpoint by the first commit after it landed.
A slot holds at most one such state in memory besides its trainer.

Loss points stay exactly-once: the database's ``iterations_done`` is the
job's progress and ``checkpoint_iteration`` its newest saved state, which may
be behind. A chunk that cannot step on restores that state and runs the
iterations between again; training is deterministic from a checkpoint, so
they reproduce the points already stored (duplicates are ignored).

A leaving job's state is written only while no chunk of it is in flight and
this slot is still its holder (:mod:`backend.core.residency`): once the job
runs elsewhere, that slot's state is the job's and this one is dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import update
from sqlalchemy.engine import CursorResult
from sqlmodel import Session, col

from backend.core.leases import Leases
from backend.core.models import Job, JobStatus, utcnow
from backend.core.residency import Residency
from workers.trainers.contract import Trainer

log = logging.getLogger(__name__)

IDLE_POLL_SECONDS = 0.25
"""How often the idle thread looks at the resident trainer."""
STATUS_CHECK_SECONDS = 0.5
"""How often an idle slot reads its resident job's status (a query each)."""
LET_GO = (JobStatus.paused, JobStatus.cancelled, JobStatus.completed, JobStatus.failed)
"""A resident job in one of these has left the slot: written, then closed."""


@dataclass
class WriteBehind:
    """A state taken at ``iteration`` whose file a background thread writes."""

    iteration: int
    state_seconds: float
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    write_seconds: float = 0.0


@dataclass
class Resident:
    """One loaded trainer and where it stands against its job's records."""

    job_id: int
    trainer: Trainer
    iteration: int
    """The trainer's position: its job's committed progress."""
    saved_iteration: int
    """The iteration of the newest checkpoint of this trainer (its start when none)."""
    saved_at: float
    start_seconds: float
    """Build + restore (+ sandbox start) of its latest start on this slot."""
    unpaid_start_seconds: float = 0.0
    """What its start would have cost on top without a warm spare sandbox
    (tenant code; 0 in the worker): moves come in bursts, and a move to a
    slot whose spare is still importing pays it."""
    save_seconds: float = 0.0
    """How long its latest state() and checkpoint write took."""
    hold_seconds: float = 0.0
    """How long its latest save held its training up: state() when the file
    was written behind, else the whole save."""
    idle_since: float = 0.0
    checked_at: float = 0.0
    """When the idle thread last read its job's status."""
    pending: WriteBehind | None = None
    """Its cadence state being written behind, not yet recorded."""

    @property
    def dirty(self) -> bool:
        return self.iteration > self.saved_iteration

    @property
    def switch_seconds(self) -> float:
        """What moving the job costs: a cold start where it goes (build, restore
        and the sandbox's imports), a save here."""
        return self.start_seconds + self.unpaid_start_seconds + self.save_seconds


def cadence_seconds(res: Resident, every: float, share: float) -> float:
    """Seconds between a resident trainer's saves while it stays: ``every``
    (``CHECKPOINT_SECONDS``), or longer where its saves hold training up for
    more than ``share`` of the time (``CHECKPOINT_SHARE``; 1: never longer).

    A crash costs at most this much compute, never a loss point. Example: a
    state whose ``state()`` takes 5 s is saved every 250 s at a share of
    0.02, not every 30 s (17% of its slot time); one of 0.1 s every 30 s.
    (CheckFreq, FAST'21, sizes its checkpoint interval by the same bound.)
    """
    if share >= 1:
        return every
    return max(every, res.hold_seconds / share)


class SlotTrainer:
    """This process's resident trainer, shared by chunks and the idle thread.

    ``lock`` is held for a whole chunk and for every idle write, so a
    trainer is never stepped and saved at once.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.current: Resident | None = None

    def take(self) -> Resident | None:
        found, self.current = self.current, None
        return found


SLOT = SlotTrainer()
"""The one resident trainer of this worker process (a process is one slot)."""


class StateWriter:
    """Writes a resident trainer's state to the checkpoint store and records
    it in the database, fenced so a slot that lost its job writes nothing."""

    def __init__(self, ctx: Any, slot_id: str) -> None:
        # ctx: workers.chunk_service.ChunkContext (not imported: it imports us).
        self.ctx = ctx
        self.slot_id = slot_id
        self.residency = Residency(ctx.redis, ctx.keys)
        self.leases = Leases(ctx.redis, ctx.keys)

    def save(self, res: Resident) -> float:
        """Take the state and write its file; the seconds it took. Raises what
        ``state()`` raises (the caller fails the job with it)."""
        self.wait_behind(res)  # an older file landing after this one would be an orphan
        began = time.perf_counter()
        state = res.trainer.state()
        self.ctx.checkpoints.save(res.job_id, res.iteration, state)
        res.save_seconds = res.hold_seconds = time.perf_counter() - began
        res.saved_iteration = res.iteration
        res.saved_at = time.monotonic()
        return res.save_seconds

    def save_behind(self, res: Resident) -> None:
        """Take the state now and write its file on a thread while the job
        trains on; :meth:`landed` says when it is durable. Raises what
        ``state()`` raises."""
        began = time.perf_counter()
        state = res.trainer.state()
        pending = WriteBehind(res.iteration, time.perf_counter() - began)
        res.hold_seconds = pending.state_seconds
        res.pending = pending
        res.saved_at = time.monotonic()
        threading.Thread(target=self._write_behind, args=(res.job_id, pending, state),
                         name="slaq-write-behind", daemon=True).start()

    def _write_behind(self, job_id: int, pending: WriteBehind, state: bytes) -> None:
        began = time.perf_counter()
        try:
            self.ctx.checkpoints.save(job_id, pending.iteration, state)
        except BaseException as exc:  # kept for the chunk thread to log
            pending.error = exc
        pending.write_seconds = time.perf_counter() - began
        pending.done.set()

    def landed(self, res: Resident) -> int | None:
        """The iteration of a written-behind state now durable (once), else None."""
        pending = res.pending
        if pending is None or not pending.done.is_set():
            return None
        res.pending = None
        if pending.error is not None:
            # The job keeps its older checkpoint; the next cadence tries again.
            log.error("job %s: writing its checkpoint failed: %s", res.job_id, pending.error)
            return None
        res.saved_iteration = max(res.saved_iteration, pending.iteration)
        res.save_seconds = pending.state_seconds + pending.write_seconds
        return pending.iteration

    def wait_behind(self, res: Resident) -> int | None:
        """:meth:`landed`, after waiting for a write in progress."""
        if res.pending is not None:
            res.pending.done.wait()
        return self.landed(res)

    def still_ours(self, res: Resident) -> bool:
        """No chunk of the job is in flight and this slot still holds it."""
        return (self.leases.holder(res.job_id) is None
                and self.residency.holder(res.job_id) == self.slot_id)

    def save_leaving(self, res: Resident) -> bool:
        """Write a dirty resident trainer whose job is between chunks and
        record the checkpoint; False when the job moved on without it."""
        landed = self.wait_behind(res)
        if not res.dirty and landed is None:
            return True
        if not self.still_ours(res):
            return False
        if res.dirty:
            try:
                self.save(res)
            except Exception as exc:
                log.exception("job %s: state() failed while leaving its slot", res.job_id)
                self._fail(res, f"saving its state failed: {type(exc).__name__}: {exc}")
                return False
        with Session(self.ctx.engine) as session:
            result = cast(CursorResult[Any], session.execute(
                update(Job)
                .where(col(Job.id) == res.job_id, col(Job.iterations_done) == res.iteration,
                       col(Job.checkpoint_iteration) < res.iteration,
                       col(Job.status) != JobStatus.running)
                .values(checkpoint_iteration=res.iteration,
                        checkpoints_saved=col(Job.checkpoints_saved) + 1,
                        switch_seconds=res.switch_seconds)))
            session.commit()
        return result.rowcount == 1

    def _fail(self, res: Resident, reason: str) -> None:
        with Session(self.ctx.engine) as session:
            session.execute(
                update(Job)
                .where(col(Job.id) == res.job_id, col(Job.iterations_done) == res.iteration,
                       col(Job.status).in_([JobStatus.queued, JobStatus.paused]))
                .values(status=JobStatus.failed, error=reason, end_reason=reason,
                        finished_at=utcnow()))
            session.commit()

    def let_go(self, res: Resident, *, save: bool) -> None:
        """The job leaves this slot: write it when asked and safe, close it, and
        stop naming this slot as its holder."""
        if save:
            self.save_leaving(res)
        close_quietly(res)
        self.residency.release(res.job_id, self.slot_id)


def close_quietly(res: Resident) -> None:
    try:
        res.trainer.close()
    except Exception:
        log.exception("job %s: closing its trainer failed", res.job_id)


class IdleSaver:
    """A thread in each worker process that writes (and, once the job has
    left, closes) a resident trainer nobody granted again for a while."""

    def __init__(self, writer: StateWriter, idle_seconds: float) -> None:
        self.writer = writer
        self.idle_seconds = idle_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slaq-idle-saver", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(IDLE_POLL_SECONDS):
            try:
                self.tick()
            except Exception:  # the database or Redis restarting must not end the thread
                log.exception("idle save failed")

    def tick(self) -> None:
        if not SLOT.lock.acquire(blocking=False):
            return  # a chunk is running
        try:
            res = SLOT.current
            now = time.monotonic()
            if res is None or now - res.checked_at < STATUS_CHECK_SECONDS:
                return
            res.checked_at = now
            with Session(self.writer.ctx.engine) as session:
                job = session.get(Job, res.job_id)
                status = None if job is None else job.status
            if status is None or status in LET_GO:
                # Paused, cancelled or over: written now, so its checkpoint
                # (the model a user downloads) is there within a poll.
                SLOT.take()
                self.writer.let_go(res, save=status is not None)
            elif res.dirty and time.monotonic() - res.idle_since >= self.idle_seconds:
                self.writer.save_leaving(res)
        finally:
            SLOT.lock.release()


def shut_down(writer: StateWriter) -> None:
    """The process is ending: write the resident job and let it go."""
    with SLOT.lock:
        res = SLOT.take()
        if res is not None:
            writer.let_go(res, save=True)
