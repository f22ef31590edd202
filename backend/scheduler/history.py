"""Incremental loss-history cache for building snapshots.

Each round reads only loss rows newer than the last one seen (by primary key),
so a round with thousands of runnable jobs costs one small query.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

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
        # Bumped whenever a job's points change, so cached views know to rebuild.
        self._versions: dict[int, int] = {}

    def refresh(self, session: Session, progress: dict[int, int]) -> None:
        """Bring the cache up to date for the jobs in ``progress`` (job id ->
        iterations done), forgetting every other job."""
        self.update(session, progress, [j for j in self._points if j not in progress])

    def update(self, session: Session, changed: dict[int, int], removed: Iterable[int]) -> None:
        """Forget ``removed``; read loss rows newer than the last seen (by id); and
        for the jobs in ``changed`` (job id -> iterations done) seen for the first
        time, or whose cache lags their recorded progress (rows committed out of
        id order), reload their own rows."""
        for job_id in removed:
            self._points.pop(job_id, None)
            self._versions.pop(job_id, None)
        self._pull_new_rows(session)
        unseen = [j for j, done in changed.items() if done == 0 and j not in self._points]
        with_rows = self._with_rows(session, unseen)
        for job_id in unseen:
            if job_id not in with_rows:
                # A job that never ran has no rows: no query per new job.
                self._points[job_id] = deque(maxlen=KEEP_POINTS)
        for job_id, done in changed.items():
            points = self._points.get(job_id)
            if points is None or (done > 0 and (not points or points[-1].iteration < done)):
                self._reload(session, job_id)

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
            .limit(KEEP_POINTS)
        ).all()
        self._points[job_id] = deque(
            (LossPoint(int(r[0]), float(r[1]), float(r[2])) for r in reversed(rows)),
            maxlen=KEEP_POINTS,
        )
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
            points = self._points.get(int(job_id))
            if points is None or (points and points[-1].iteration >= iteration):
                continue  # not tracked, or a re-run of an iteration we have
            points.append(LossPoint(int(iteration), float(loss), float(seconds)))
            self._versions[int(job_id)] = self._versions.get(int(job_id), 0) + 1

    def version(self, job_id: int) -> int:
        return self._versions.get(job_id, 0)

    def points(self, job_id: int) -> tuple[LossPoint, ...]:
        return tuple(self._points.get(job_id, ()))
