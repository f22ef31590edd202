"""The scheduler's in-memory view of the runnable jobs, kept up to date incrementally.

Loading every queued job as an ORM object each round made a round cost
O(queue). Here the scheduler keeps one light row and one cached ``JobView`` per
runnable job and, each round, reads only what may have changed:

* jobs named in "job changed" events (the API's submit/pause/cancel/resume and
  the workers' chunk completions publish them on ``keys.events``);
* jobs with an id above the largest seen (new submissions, even if their
  event was lost);
* every job the database or Redis says is running (at most one per slot), so
  a completion is seen even without its event;
* every ``reconcile_seconds`` (and after a lost subscription) a scan of four
  narrow columns (id, status, chunk_seq, progress) of all queued/running
  jobs, re-reading only the rows that differ, so a lost event (a pause of a
  queued job while Redis was away) costs at most that long.

The database stays the truth: a fresh :class:`JobState` (scheduler restart)
reads every runnable job once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
from sqlalchemy import select
from sqlmodel import Session, col

from backend.core.models import Job, JobStatus, as_utc
from backend.core.redis_keys import RedisKeys
from backend.scheduler.history import TRAINING_LOSS, HistoryCache
from backend.scheduling.placement import requirements_from
from backend.scheduling.speed import SpeedEstimates
from backend.scheduling.types import JobView, Requirements

log = logging.getLogger(__name__)

RUNNABLE = (JobStatus.queued, JobStatus.running)

_COLUMNS = (col(Job.id), col(Job.tenant_id), col(Job.status), col(Job.created_at),
            col(Job.waiting_since), col(Job.iterations_done), col(Job.max_iterations),
            col(Job.attained_seconds), col(Job.chunks_run), col(Job.initial_loss),
            col(Job.chunk_seq), col(Job.algorithm), col(Job.dataset), col(Job.quality_metric),
            col(Job.eval_every), col(Job.requirements), col(Job.pool), col(Job.experiment_id),
            col(Job.switch_seconds), col(Job.params), col(Job.dataset_params),
            col(Job.restores))

def shape_key(params: Any, dataset_params: Any) -> str:
    """What sets a job's seconds per iteration, as a key: its integer and
    text settings (widths, layers, batch size, data size), not its floats.

    Jobs share speed estimates per (algorithm, dataset, shape): a sweep over
    learning rates shares one, while a 33M-parameter MLP does not inherit the
    speed of a 0.1M one (its first chunk would last a hundred times too long).
    """
    kept = {f"{group}.{name}": value
            for group, values in (("p", params or {}), ("d", dataset_params or {}))
            for name, value in values.items() if not isinstance(value, float)}
    return json.dumps(kept, sort_keys=True, default=str)


def _epoch(moment: datetime | None) -> float:
    return 0.0 if moment is None else as_utc(moment).timestamp()


@dataclass(frozen=True)
class JobRow:
    """The columns a round needs; equal rows mean an unchanged job."""

    job_id: int
    tenant_id: int
    status: str
    submitted_at: float
    waiting_since: float
    iterations_done: int
    max_iterations: int
    attained_seconds: float
    chunks_run: int
    initial_loss: float | None
    chunk_seq: int
    algorithm: str
    dataset: str
    quality_metric: str = TRAINING_LOSS
    eval_every: int = 0
    requirements: Requirements = Requirements()
    pool: str | None = None
    experiment_id: int | None = None
    switch_seconds: float = 0.0
    shape: str = ""
    """The job's settings that size its work (see :func:`shape_key`)."""
    moves: int = 0
    """Trainer starts after its first (``restores`` counts the first too)."""

    @classmethod
    def of(cls, row: Any) -> JobRow:
        return cls(int(row[0]), int(row[1]), str(row[2]), _epoch(row[3]), _epoch(row[4]),
                   int(row[5]), int(row[6]), float(row[7]), int(row[8]),
                   None if row[9] is None else float(row[9]), int(row[10]), str(row[11]),
                   str(row[12]), str(row[13] or TRAINING_LOSS), int(row[14] or 0),
                   requirements_from(row[15] or {}), row[16],
                   None if row[17] is None else int(row[17]), float(row[18] or 0.0),
                   shape_key(row[19], row[20]), max(int(row[21] or 0) - 1, 0))

    @property
    def kind(self) -> tuple[str, str, str]:
        return self.algorithm, self.dataset, self.shape

    @property
    def is_new(self) -> bool:
        return self.chunks_run == 0 and self.iterations_done == 0


class JobState:
    def __init__(self, client: redis.Redis, keys: RedisKeys, *,
                 reconcile_seconds: float = 3.0) -> None:
        self.redis = client
        self.keys = keys
        self.reconcile_seconds = reconcile_seconds
        self.rows: dict[int, JobRow] = {}
        self.history = HistoryCache()
        # Seconds per iteration by (algorithm, dataset), learnt from jobs that ran.
        self.estimates = SpeedEstimates()
        self._views: dict[int, tuple[tuple[Any, ...], JobView]] = {}
        self._max_id = 0
        self._dirty: set[int] = set()
        self._reconciled_at = float("-inf")
        self._pubsub: Any = None
        self._built = False
        self._running: set[int] = set()
        # Jobs that have run (or are running): the policy sees all of them.
        self.known: set[int] = set()
        # Never-run queued jobs per tenant as (waiting_since, id), appended in
        # arrival order; stale entries are skipped and compacted on read.
        self._new: dict[int, list[tuple[float, int]]] = {}
        self._unsorted: set[int] = set()
        # Jobs that became runnable (submitted, resumed): a ranking made before
        # an arrival does not know the newcomer.
        self.arrivals = 0
        self.full_scans = 0
        self.reconciles = 0
        self.partial_reads = 0

    # -- events ---------------------------------------------------------------

    def _subscribe(self) -> bool:
        if self._pubsub is not None:
            return True
        try:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(self.keys.events)
        except redis.RedisError as exc:
            log.warning("cannot subscribe to job events: %s", exc)
            return False
        self._pubsub = pubsub
        # Events published before the subscription are unseen: rescan.
        self._reconciled_at = float("-inf")
        return True

    def _drain_events(self) -> None:
        if not self._subscribe():
            self._reconciled_at = float("-inf")
            return
        try:
            while True:
                message = self._pubsub.get_message(timeout=0)
                if message is None:
                    break
                self._note_event(message.get("data"))
        except (redis.RedisError, OSError, ValueError) as exc:
            log.warning("job events lost (%s); rebuilding from the database", exc)
            self._drop_subscription()
            self._reconciled_at = float("-inf")

    def arrival_pending(self) -> bool:
        """Whether an event since the last sync names a job these rows do not
        hold (submitted or resumed): one that a ranking made before it does
        not know. The events stay pending for the next sync."""
        self._drain_events()
        return any(job_id not in self.rows for job_id in self._dirty)

    def _note_event(self, data: Any) -> None:
        try:
            event = json.loads(data)
        except (TypeError, ValueError):
            return
        ids = event.get("job_ids") or [event.get("job_id")]
        for job_id in ids:
            if isinstance(job_id, int):
                self._dirty.add(job_id)

    def _drop_subscription(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                pubsub.close()

    def close(self) -> None:
        self._drop_subscription()

    # -- database ------------------------------------------------------------

    def sync(self, session: Session, live: Iterable[int]) -> None:
        """Bring rows and loss histories up to date (see the module docstring)."""
        self._drain_events()
        now = time.monotonic()
        want = self._dirty | set(live) | self._running
        self._dirty = set()
        before = dict.fromkeys(self.rows)
        if not self._built:
            self._built = True
            self._reconciled_at = now
            for row in map(JobRow.of, session.execute(
                    select(*_COLUMNS).where(col(Job.status).in_(RUNNABLE))).all()):
                self._put(row)
            self.full_scans += 1
            changed = set(self.rows)
        else:
            if now - self._reconciled_at >= self.reconcile_seconds:
                self._reconciled_at = now
                want |= self._stale(session)
            changed = self._read(session, want)
        if self.rows:
            self._max_id = max(self._max_id, max(self.rows))
        gone = [j for j in before if j not in self.rows]
        progress = {j: self.rows[j].iterations_done for j in changed if j in self.rows}
        self.history.update(session, progress, gone, {
            j: (self.rows[j].quality_metric, self.rows[j].eval_every) for j in progress
            if self.rows[j].quality_metric != TRAINING_LOSS})
        for job_id in gone:
            self._views.pop(job_id, None)

    def _stale(self, session: Session) -> set[int]:
        """Ids whose (status, chunk_seq, progress) differ from the database's, by a
        scan of four narrow columns: what any change to a runnable job touches."""
        stale: set[int] = set()
        seen: set[int] = set()
        # Core on the session's connection: the ORM's per-statement machinery
        # costs more than these narrow rows.
        for found, status, seq, done in session.connection().execute(
                select(col(Job.id), col(Job.status), col(Job.chunk_seq),
                       col(Job.iterations_done))
                .where(col(Job.status).in_(RUNNABLE))).all():
            job_id = int(found or 0)
            seen.add(job_id)
            row = self.rows.get(job_id)
            if row is None or row.status != status or row.chunk_seq != seq or \
                    row.iterations_done != done:
                stale.add(job_id)
        stale.update(j for j in self.rows if j not in seen)
        self.reconciles += 1
        return stale

    def _read(self, session: Session, want: set[int]) -> set[int]:
        """Re-read ``want`` and every job newer than the newest seen; the ids read."""
        found: dict[int, JobRow] = {}
        ids = sorted(want)
        for start in range(0, len(ids), 500):
            for r in map(JobRow.of, session.execute(
                    select(*_COLUMNS).where(col(Job.id).in_(ids[start:start + 500]))).all()):
                found[r.job_id] = r
        for r in map(JobRow.of, session.execute(
                select(*_COLUMNS).where(col(Job.id) > self._max_id,
                                        col(Job.status).in_(RUNNABLE))).all()):
            found[r.job_id] = r
        for job_id in want:
            if job_id not in found:
                self._drop(job_id)
        for row in found.values():
            if row.status in RUNNABLE:
                self._put(row)
            else:
                self._drop(row.job_id)
        self.partial_reads += 1
        return set(found)

    def _put(self, row: JobRow) -> None:
        old = self.rows.get(row.job_id)
        if old == row:
            return
        if old is not None:
            self._drop(row.job_id)
        else:
            self.arrivals += 1
        self.rows[row.job_id] = row
        if row.status == JobStatus.running:
            self._running.add(row.job_id)
        if row.is_new and row.status == JobStatus.queued:
            order = self._new.setdefault(row.tenant_id, [])
            if order and order[-1] > (row.waiting_since, row.job_id):
                self._unsorted.add(row.tenant_id)
            order.append((row.waiting_since, row.job_id))
        else:
            self.known.add(row.job_id)

    def _drop(self, job_id: int) -> None:
        # A new job's place in its tenant's order is dropped lazily: new_waiting skips it.
        self.rows.pop(job_id, None)
        self._running.discard(job_id)
        self.known.discard(job_id)

    def new_waiting(self, limit: int) -> dict[int, list[int]]:
        """Up to ``limit`` never-run queued jobs per tenant, oldest first.

        Reads only the head of each tenant's order, so a round costs the
        admitted jobs, not the whole queue; stale entries (jobs since
        dispatched, paused or re-read) are skipped, and compacted away once
        they outnumber the live ones read.
        """
        out: dict[int, list[int]] = {}
        for tenant_id in list(self._new):
            order = self._new[tenant_id]
            if tenant_id in self._unsorted:
                order.sort()
                self._unsorted.discard(tenant_id)
            ids: list[int] = []
            seen: set[int] = set()
            stale = 0
            for since, job_id in order:
                if job_id in seen or not self._is_new_waiting(job_id, since):
                    stale += 1
                    continue
                seen.add(job_id)
                ids.append(job_id)
                if len(ids) >= limit:
                    break
            if stale > 64 and stale > len(ids):
                kept = {j: self.rows[j].waiting_since for _, j in order
                        if j in self.rows and self._is_new_waiting(j, self.rows[j].waiting_since)}
                self._new[tenant_id] = sorted((since, j) for j, since in kept.items())
            if ids:
                out[tenant_id] = ids
            elif not self._new[tenant_id]:
                del self._new[tenant_id]
        return out

    def _is_new_waiting(self, job_id: int, since: float) -> bool:
        row = self.rows.get(job_id)
        return row is not None and row.is_new and row.status == JobStatus.queued and \
            row.waiting_since == since

    @property
    def built(self) -> bool:
        return self._built

    def mark_dirty(self, job_id: int) -> None:
        self._dirty.add(job_id)

    def dispatched(self, job_id: int, chunk_seq: int, pool: str | None = None) -> None:
        row = self.rows.get(job_id)
        if row is not None:
            self._put(JobRow(**{**row.__dict__, "status": JobStatus.running,
                                "chunk_seq": chunk_seq, "pool": pool}))

    def metric(self, job_id: int) -> str:
        """The metric ``job_id`` is scheduled on (``loss`` for jobs not known)."""
        row = self.rows.get(job_id)
        return row.quality_metric if row is not None else TRAINING_LOSS

    # -- views ---------------------------------------------------------------

    def estimate(self, kind: tuple[str, str]) -> float | None:
        return self.estimates.get(kind)

    def view(self, job_id: int, running: bool) -> JobView:
        """The job's view, rebuilt only when its row, history or estimate changed."""
        row = self.rows[job_id]
        version = self.history.version(job_id)
        estimate = self.estimates.get(row.kind)
        key = (row, running, version, estimate)
        cached = self._views.get(job_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        losses = self.history.points(job_id)
        if losses and (cached is None or cached[0][2] != version):
            estimate = self.estimates.observe(row.kind, losses)
            key = (row, running, version, estimate)
        view = JobView(
            job_id=job_id,
            tenant_id=row.tenant_id,
            submitted_at=row.submitted_at,
            iterations_done=row.iterations_done,
            max_iterations=row.max_iterations,
            losses=losses,
            running=running or row.status == JobStatus.running,
            attained_seconds=row.attained_seconds,
            waiting_since=row.waiting_since,
            chunks_run=row.chunks_run,
            # A job scheduled on an evaluation metric starts from its first
            # evaluation, not from its first training loss (other units).
            initial_loss=row.initial_loss if row.quality_metric == TRAINING_LOSS else None,
            estimated_seconds_per_iteration=estimate,
            requirements=row.requirements,
            pool=row.pool,
            experiment_id=row.experiment_id,
            switch_seconds=row.switch_seconds,
            moves=row.moves,
        )
        self._views[job_id] = (key, view)
        return view
