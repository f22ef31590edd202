"""Incremental loss-history cache for building snapshots.

Each round reads only loss rows newer than the last one seen (by primary key),
so a round with thousands of runnable jobs costs one small query.
"""

from __future__ import annotations

from collections import deque

from sqlalchemy import select
from sqlmodel import Session, col

from backend.core.models import LossRecord
from backend.scheduling.types import LossPoint

# Points kept per job: enough for every predictor window, bounded memory.
KEEP_POINTS = 400


class HistoryCache:
    def __init__(self) -> None:
        self._last_id = 0
        self._points: dict[int, deque[LossPoint]] = {}
        self._first: dict[int, float] = {}

    def refresh(self, session: Session, progress: dict[int, int]) -> None:
        """Bring the cache up to date for the jobs in ``progress`` (job id ->
        iterations done). New rows are read by id; a job seen for the first
        time, or whose cache still lags its recorded progress (rows committed
        out of id order), is reloaded from its own rows."""
        for job_id in list(self._points):
            if job_id not in progress:
                del self._points[job_id]
        self._pull_new_rows(session)
        for job_id, done in progress.items():
            points = self._points.get(job_id)
            if points is None or (done > 0 and (not points or points[-1].iteration < done)):
                self._reload(session, job_id)

    def _reload(self, session: Session, job_id: int) -> None:
        rows = session.execute(
            select(col(LossRecord.iteration), col(LossRecord.loss), col(LossRecord.seconds))
            .where(col(LossRecord.job_id) == job_id)
            .order_by(col(LossRecord.iteration).desc())
            .limit(KEEP_POINTS)
        ).all()
        self._points[job_id] = deque(
            (LossPoint(int(r[0]), float(r[1]), float(r[2])) for r in reversed(rows)),
            maxlen=KEEP_POINTS,
        )

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
            points = self._points.get(int(job_id))
            if points is None or (points and points[-1].iteration >= iteration):
                continue  # not tracked, or a re-run of an iteration we have
            points.append(LossPoint(int(iteration), float(loss), float(seconds)))

    def points(self, job_id: int) -> tuple[LossPoint, ...]:
        return tuple(self._points.get(job_id, ()))
