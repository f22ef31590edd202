"""Applies experiments' early-stopping rules in the live scheduler.

Each round (at most every ``interval`` seconds) it looks only at experiments
with a rule and at least one job the rule may still stop; for those it reads
the jobs' objective series incrementally (only points newer than the last
seen), predicts each running job's final objective with the same curve
predictor the scheduler ranks by, and asks :mod:`backend.scheduling.early_stopping`
which to stop. A stopped job is paused (so it keeps its checkpoint, frees its
slot once its chunk in flight ends, and resumes by hand with the normal
resume route), flagged ``stopped_early`` with the reason as its
``end_reason``, and the stop is written to the decision log.

Each job's place in its experiment is kept as :attr:`ExperimentStopper.standings`
for :func:`backend.scheduling.experiment_focus.focus`: the slots the policy
gives a predictive experiment go to its leading configurations.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import redis
from sqlalchemy import insert, select, update
from sqlmodel import Session, col

from backend.core.models import (
    Decision,
    Experiment,
    Job,
    JobStatus,
    LossRecord,
    MetricRecord,
    utcnow,
)
from backend.core.notify import publish_job_event
from backend.core.redis_keys import RedisKeys
from backend.scheduling.early_stopping import RuleConfig, Stop, Trial, decide, predict_final
from backend.scheduling.experiment_focus import Standing, standings
from backend.scheduling.predictor import LossPredictor

log = logging.getLogger(__name__)

ACTIVE = (JobStatus.queued, JobStatus.running)
STOP_POLICY_PREFIX = "early stopping: "


def rule_config(spec: dict[str, Any]) -> RuleConfig | None:
    """The experiment's rule from its stored spec; ``None`` when it has none."""
    early = spec.get("early_stopping") or {}
    rule = str(early.get("rule") or "none")
    if rule == "none":
        return None
    objective = spec.get("objective") or {}
    metric = str(objective.get("metric") or "loss")
    mode = objective.get("mode")
    maximise = mode == "max" if mode in ("min", "max") else "accuracy" in metric
    return RuleConfig(rule=rule, top_k=int(early.get("top_k", 3)),
                      min_iterations=int(early.get("min_iterations", 100)),
                      reduction=int(early.get("reduction", 3)), metric=metric,
                      maximise=maximise)


class ExperimentStopper:
    def __init__(self, client: redis.Redis, keys: RedisKeys, *, interval: float = 1.0) -> None:
        self.redis = client
        self.keys = keys
        self.interval = interval
        self.predictor = LossPredictor()
        self._ran_at = -math.inf
        # job id -> its objective series so far (read incrementally).
        self._series: dict[int, list[tuple[int, float]]] = {}
        self._metric: dict[int, str] = {}
        self.standings: dict[int, Standing] = {}
        """Each waiting or running job of a predictive experiment, by its
        latest objective, as of the last run."""

    def run(self, session: Session) -> list[int]:
        """Apply every rule once; the ids of the jobs stopped."""
        now = time.monotonic()
        if now - self._ran_at < self.interval:
            return []
        self._ran_at = now
        experiment_ids = [int(r[0]) for r in session.execute(
            select(col(Job.experiment_id)).distinct()
            .where(col(Job.experiment_id).is_not(None), col(Job.status).in_(ACTIVE),
                   col(Job.stopped_early).is_(False))).all()]
        if not experiment_ids:
            if self._series:
                self._series.clear()
                self._metric.clear()
            self.standings = {}
            return []
        fresh: dict[int, Standing] = {}
        stopped: list[int] = []
        seen_jobs: set[int] = set()
        for experiment_id, spec in session.execute(
                select(col(Experiment.id), col(Experiment.spec))
                .where(col(Experiment.id).in_(experiment_ids))).all():
            config = rule_config(spec or {})
            if config is None:
                continue
            try:
                stopped += self._apply(session, int(experiment_id), config, seen_jobs, fresh)
            except Exception:  # noqa: BLE001 - one bad experiment must not stop scheduling
                session.rollback()
                log.exception("early stopping of experiment %s failed", experiment_id)
        for job_id in [j for j in self._series if j not in seen_jobs]:
            self._series.pop(job_id, None)
            self._metric.pop(job_id, None)
        self.standings = {j: s for j, s in fresh.items() if j not in stopped}
        return stopped

    def _apply(self, session: Session, experiment_id: int, config: RuleConfig,
               seen_jobs: set[int], fresh: dict[int, Standing]) -> list[int]:
        rows = session.execute(
            select(col(Job.id), col(Job.status), col(Job.iterations_done),
                   col(Job.max_iterations), col(Job.stopped_early))
            .where(col(Job.experiment_id) == experiment_id)).all()
        trials = []
        for job_id, status, done, most, early in rows:
            job_id = int(job_id)
            seen_jobs.add(job_id)
            points = self._read_series(session, job_id, config.metric)
            stoppable = status in ACTIVE and not early
            final = None
            if stoppable and points:
                final = predict_final(self.predictor, job_id=job_id, points=points,
                                      max_iterations=int(most), maximise=config.maximise)
            trials.append(Trial(job_id=job_id, iterations_done=int(done),
                                max_iterations=int(most), points=tuple(points),
                                final=final, stoppable=stoppable))
        fresh.update(standings(experiment_id, config, trials))
        return [stop.job_id for stop in decide(trials, config)
                if self._stop(session, stop, config)]

    def _read_series(self, session: Session, job_id: int, metric: str) -> list[tuple[int, float]]:
        if self._metric.get(job_id) != metric:
            self._series[job_id] = []
            self._metric[job_id] = metric
        series = self._series[job_id]
        after = series[-1][0] if series else 0
        if metric == "loss":
            query = (select(col(LossRecord.iteration), col(LossRecord.loss))
                     .where(col(LossRecord.job_id) == job_id, col(LossRecord.iteration) > after)
                     .order_by(col(LossRecord.iteration)))
        else:
            split = "eval" if metric.startswith("val_") else "train"
            query = (select(col(MetricRecord.iteration), col(MetricRecord.value))
                     .where(col(MetricRecord.job_id) == job_id, col(MetricRecord.split) == split,
                            col(MetricRecord.name) == metric,
                            col(MetricRecord.iteration) > after)
                     .order_by(col(MetricRecord.iteration)))
        series.extend((int(i), float(v)) for i, v in session.execute(query).all()
                      if math.isfinite(float(v)))
        return series

    def _stop(self, session: Session, stop: Stop, config: RuleConfig) -> bool:
        result = session.execute(
            update(Job).where(col(Job.id) == stop.job_id, col(Job.status).in_(ACTIVE),
                              col(Job.stopped_early).is_(False))
            .values(status=JobStatus.paused, stopped_early=True, end_reason=stop.reason,
                    last_reason=stop.reason))
        if result.rowcount != 1:  # type: ignore[attr-defined]
            session.rollback()
            return False  # paused, cancelled or finished meanwhile
        tenant_id, seq, done = session.execute(
            select(col(Job.tenant_id), col(Job.chunk_seq), col(Job.iterations_done))
            .where(col(Job.id) == stop.job_id)).one()
        session.execute(insert(Decision).values(
            job_id=stop.job_id, tenant_id=tenant_id, chunk_seq=seq, iterations=0,
            policy=f"{STOP_POLICY_PREFIX}{config.rule}", reason=stop.reason,
            predicted_gain=None, created_at=utcnow()))
        session.commit()
        log.info("job %s stopped early at iteration %s: %s", stop.job_id, done, stop.reason)
        publish_job_event(self.redis, self.keys, job_id=stop.job_id, tenant_id=int(tenant_id),
                          status=JobStatus.paused, reason=stop.reason)
        return True
