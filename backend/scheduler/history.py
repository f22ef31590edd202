"""Incremental loss-history cache for building snapshots.

Each round reads only loss rows newer than the last one seen (by primary key),
so a round with thousands of runnable jobs costs one small query.

A job whose quality metric is not the training loss (``val_loss``) is
scheduled on its evaluations instead: its history is the ``(iteration,
value)`` series of that metric from ``metric_point`` (split ``eval``, one
point every ``eval_every`` iterations), read the same incremental way. Each
such point carries the job's recent measured seconds per *training*
iteration, so chunk sizing and per-second rates mean what they mean for
loss-scheduled jobs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from sqlalchemy import select
from sqlmodel import Session, col

from backend.core.models import LossRecord, MetricRecord
from backend.scheduling.loss_history import EMPTY, LossHistory, LossRing
from backend.scheduling.types import LIVE_HISTORY_POINTS, LossPoint

# Training iterations whose mean duration an evaluation point carries.
TIMING_POINTS = 50
TRAINING_LOSS = "loss"


class HistoryCache:
    def __init__(self) -> None:
        self._last_id = 0
        self._points: dict[int, LossRing] = {}
        self._first: dict[int, float] = {}
        # Bumped whenever a job's points change, so cached views know to rebuild.
        self._versions: dict[int, int] = {}
        # Jobs scheduled on an evaluation metric: job id -> (metric, eval_every).
        self._metric: dict[int, tuple[str, int]] = {}
        # Their recent seconds per training iteration.
        self._timing: dict[int, deque[float]] = {}
        # Their progress when their series was last reloaded (one reload per chunk).
        self._reloaded_at: dict[int, int] = {}
        self._last_metric_id = 0

    def refresh(self, session: Session, progress: dict[int, int]) -> None:
        """Bring the cache up to date for the jobs in ``progress`` (job id ->
        iterations done), forgetting every other job."""
        self.update(session, progress, [j for j in self._points if j not in progress])

    def update(self, session: Session, changed: dict[int, int], removed: Iterable[int],
               metrics: Mapping[int, tuple[str, int]] | None = None) -> None:
        """Forget ``removed``; read loss rows newer than the last seen (by id); and
        for the jobs in ``changed`` (job id -> iterations done) seen for the first
        time, or whose cache lags their recorded progress (rows committed out of
        id order), reload their own rows.

        ``metrics`` names, for jobs in ``changed`` scheduled on something other
        than the training loss, that metric and the job's ``eval_every``."""
        for job_id in removed:
            self._forget(job_id)
        for job_id, metric in (metrics or {}).items():
            if metric[0] != TRAINING_LOSS and job_id in changed:
                self._metric[job_id] = metric
        self._pull_new_rows(session)
        self._pull_new_metric_rows(session)
        evaluated = {j: done for j, done in changed.items() if j in self._metric}
        changed = {j: done for j, done in changed.items() if j not in self._metric}
        for job_id, done in evaluated.items():
            if done == 0 and job_id not in self._points:
                # Never ran: nothing to read (no query per new job).
                self._points[job_id] = LossRing(LIVE_HISTORY_POINTS)
                self._timing[job_id] = deque(maxlen=TIMING_POINTS)
            elif self._lags(job_id, done):
                self._reload_metric(session, job_id, done)
        unseen = [j for j, done in changed.items() if done == 0 and j not in self._points]
        with_rows = self._with_rows(session, unseen)
        for job_id in unseen:
            if job_id not in with_rows:
                # A job that never ran has no rows: no query per new job.
                self._points[job_id] = LossRing(LIVE_HISTORY_POINTS)
        for job_id, done in changed.items():
            points = self._points.get(job_id)
            if points is None or (done > 0 and points.newest_iteration < done):
                self._reload(session, job_id)

    def _forget(self, job_id: int) -> None:
        self._points.pop(job_id, None)
        self._versions.pop(job_id, None)
        self._metric.pop(job_id, None)
        self._timing.pop(job_id, None)
        self._reloaded_at.pop(job_id, None)

    def _lags(self, job_id: int, done: int) -> bool:
        """Whether a metric-scheduled job's cached series may miss points: never
        loaded, or short of the evaluation its progress implies (rows committed
        out of id order). Reloaded at most once per progress value, so a
        trainer that evaluates off the expected iterations costs one query a
        chunk, not one a round."""
        points = self._points.get(job_id)
        if points is None:
            return True
        if self._reloaded_at.get(job_id) == done:
            return False
        every = self._metric[job_id][1]
        expected = done - done % every if every > 0 else 0
        return expected > 0 and points.newest_iteration < expected

    def _load_timing(self, session: Session, job_id: int) -> None:
        timing = session.execute(
            select(col(LossRecord.seconds)).where(col(LossRecord.job_id) == job_id)
            .order_by(col(LossRecord.iteration).desc()).limit(TIMING_POINTS)).all()
        self._timing[job_id] = deque((float(r[0]) for r in reversed(timing)),
                                     maxlen=TIMING_POINTS)

    def _reload_metric(self, session: Session, job_id: int, done: int) -> None:
        name = self._metric[job_id][0]
        self._load_timing(session, job_id)
        rows = session.execute(
            select(col(MetricRecord.iteration), col(MetricRecord.value))
            .where(col(MetricRecord.job_id) == job_id, col(MetricRecord.split) == "eval",
                   col(MetricRecord.name) == name)
            .order_by(col(MetricRecord.iteration).desc())
            .limit(LIVE_HISTORY_POINTS)
        ).all()
        seconds = self._seconds(job_id)
        self._points[job_id] = LossRing.of(
            (LossPoint(int(r[0]), float(r[1]), seconds) for r in reversed(rows)),
            LIVE_HISTORY_POINTS)
        self._reloaded_at[job_id] = done
        self._versions[job_id] = self._versions.get(job_id, 0) + 1

    def _seconds(self, job_id: int) -> float:
        timing = self._timing.get(job_id)
        return sum(timing) / len(timing) if timing else 0.0

    def _pull_new_metric_rows(self, session: Session) -> None:
        """Evaluation rows newer than the last seen, for metric-scheduled jobs.

        With no such job nothing is read (the usual case costs no query); the
        first one to appear re-anchors at the newest row, as its own series is
        then reloaded whole."""
        if not self._metric:
            self._last_metric_id = 0
            return
        if not self._last_metric_id:
            top = session.execute(
                select(col(MetricRecord.id)).order_by(col(MetricRecord.id).desc()).limit(1)
            ).scalar()
            self._last_metric_id = int(top or 0) or -1
            return
        new_rows = session.execute(
            select(col(MetricRecord.id), col(MetricRecord.job_id), col(MetricRecord.name),
                   col(MetricRecord.iteration), col(MetricRecord.value))
            .where(col(MetricRecord.id) > self._last_metric_id,
                   col(MetricRecord.split) == "eval")
            .order_by(col(MetricRecord.id))
        ).all()
        for row_id, job_id, name, iteration, value in new_rows:
            self._last_metric_id = max(self._last_metric_id, int(row_id))
            tracked = self._metric.get(int(job_id))
            points = self._points.get(int(job_id))
            if tracked is None or tracked[0] != name or points is None or \
                    (points and points.newest_iteration >= iteration):
                continue
            if not self._timing.get(int(job_id)):
                # Its first evaluation: the loss rows before it may predate
                # this cache's first read, so its speed is read once.
                self._load_timing(session, int(job_id))
            points.append(int(iteration), float(value), self._seconds(int(job_id)))
            self._versions[int(job_id)] = self._versions.get(int(job_id), 0) + 1

    @staticmethod
    def _with_rows(session: Session, job_ids: list[int]) -> set[int]:
        """Which of ``job_ids`` have any loss rows, a few hundred per query."""
        found: set[int] = set()
        for start in range(0, len(job_ids), 500):
            part = job_ids[start:start + 500]
            found.update(int(r[0]) for r in session.execute(
                select(col(LossRecord.job_id)).where(col(LossRecord.job_id).in_(part))
                .distinct()).all())
        return found

    def _reload(self, session: Session, job_id: int) -> None:
        rows = session.execute(
            select(col(LossRecord.iteration), col(LossRecord.loss), col(LossRecord.seconds))
            .where(col(LossRecord.job_id) == job_id)
            .order_by(col(LossRecord.iteration).desc())
            .limit(LIVE_HISTORY_POINTS)
        ).all()
        self._points[job_id] = LossRing.of(
            (LossPoint(int(r[0]), float(r[1]), float(r[2])) for r in reversed(rows)),
            LIVE_HISTORY_POINTS)
        self._versions[job_id] = self._versions.get(job_id, 0) + 1

    def _pull_new_rows(self, session: Session) -> None:
        new_rows = session.execute(
            select(col(LossRecord.id), col(LossRecord.job_id), col(LossRecord.iteration),
                   col(LossRecord.loss), col(LossRecord.seconds))
            .where(col(LossRecord.id) > self._last_id)
            .order_by(col(LossRecord.id))
        ).all() if self._last_id else []
        if not self._last_id:
            top = session.execute(
                select(col(LossRecord.id)).order_by(col(LossRecord.id).desc()).limit(1)
            ).scalar()
            self._last_id = int(top or 0)
        for row_id, job_id, iteration, loss, seconds in new_rows:
            self._last_id = max(self._last_id, int(row_id))
            timing = self._timing.get(int(job_id))
            if timing is not None:
                timing.append(float(seconds))  # a metric-scheduled job's speed
                continue
            if int(job_id) in self._metric:
                continue
            points = self._points.get(int(job_id))
            if points is None or (points and points.newest_iteration >= iteration):
                continue  # not tracked, or a re-run of an iteration we have
            points.append(int(iteration), float(loss), float(seconds))
            self._versions[int(job_id)] = self._versions.get(int(job_id), 0) + 1

    def version(self, job_id: int) -> int:
        return self._versions.get(job_id, 0)

    def points(self, job_id: int) -> LossHistory:
        """The job's cached points: a zero-copy view that later rows do not change."""
        ring = self._points.get(job_id)
        return EMPTY if ring is None else ring.view()
