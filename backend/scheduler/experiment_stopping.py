"""Applies experiments' early-stopping rules in the live scheduler.

Every round it lists the experiment jobs the rules may still stop (queued or
running, never stopped) with their progress, and judges again each experiment
whose list changed since it last judged it: a chunk committed, a job ended or
arrived. So the rule runs on every commit of an experiment job, before the
policy can grant that job its next chunk; and since grants end at the rule's
rungs (:mod:`backend.scheduling.rungs`, through :meth:`ExperimentStopper.rule_for`),
a hopeless job is stopped at its rung rather than after another grant.

For an experiment it judges, it reads the jobs' objective series
incrementally (only points newer than the last seen), predicts each running
job's final objective with the same curve predictor the scheduler ranks by
(refitting only series with new points), and asks
:mod:`backend.scheduling.early_stopping` which to stop. A stopped job is
paused (so it keeps its checkpoint, frees its slot once its chunk in flight
ends, and resumes by hand with the normal resume route), flagged
``stopped_early`` with the reason as its ``end_reason``, and the stop is
written to the decision log. Why each other job runs on is published for the
experiment's page (``RedisKeys.experiment_verdicts``).

Each job's place in its experiment is kept as :attr:`ExperimentStopper.standings`
for :func:`backend.scheduling.experiment_focus.focus`: the slots the policy
gives a predictive experiment go to its leading configurations.
"""

from __future__ import annotations

import logging
import math

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
from backend.scheduling.early_stopping import (
    FLOOR_WINDOW,
    RuleConfig,
    Stop,
    Trial,
    floors_by_training_loss,
    judge,
    predict_final,
    rule_config,
    training_floor,
)
from backend.scheduling.experiment_focus import Standing, standings
from backend.scheduling.predictor import LossPredictor

log = logging.getLogger(__name__)

ACTIVE = (JobStatus.queued, JobStatus.running)
STOP_POLICY_PREFIX = "early stopping: "


VERDICTS_TTL_SECONDS = 3600
"""An experiment's published verdicts lapse this long after its last judgement."""


class ExperimentStopper:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self.redis = client
        self.keys = keys
        self.predictor = LossPredictor()
        # job id -> its objective series so far (read incrementally), and the
        # progress it was read at: a job that has not moved is not read again.
        self._series: dict[int, list[tuple[int, float]]] = {}
        self._metric: dict[int, str] = {}
        self._read_at: dict[int, int] = {}
        self._jobs_of: dict[int, set[int]] = {}
        # Experiment id -> its rule (None: it has none); specs never change.
        self._rules: dict[int, RuleConfig | None] = {}
        # Experiment id -> its stoppable jobs and their progress when last judged.
        self._judged: dict[int, frozenset[tuple[int, int]]] = {}
        self._standings: dict[int, dict[int, Standing]] = {}
        self.standings: dict[int, Standing] = {}
        """Each waiting or running job of a predictive experiment, by its
        latest objective, as of its experiment's last judgement."""

    def rule_for(self, session: Session, experiment_id: int | None) -> RuleConfig | None:
        """The early-stopping rule of ``experiment_id`` (None for no experiment
        or no rule): what the scheduler cuts the experiment's grants to."""
        if experiment_id is None:
            return None
        if experiment_id not in self._rules:
            spec = session.execute(select(col(Experiment.spec))
                                   .where(col(Experiment.id) == experiment_id)).scalar()
            self._rules[experiment_id] = rule_config(spec or {})
        return self._rules[experiment_id]

    def run(self, session: Session) -> list[int]:
        """Judge every experiment whose stoppable jobs committed, ended or
        arrived since it was last judged; the ids of the jobs stopped."""
        progress: dict[int, set[tuple[int, int]]] = {}
        for experiment_id, job_id, done in session.execute(
                select(col(Job.experiment_id), col(Job.id), col(Job.iterations_done))
                .where(col(Job.experiment_id).is_not(None), col(Job.status).in_(ACTIVE),
                       col(Job.stopped_early).is_(False))).all():
            progress.setdefault(int(experiment_id), set()).add((int(job_id), int(done)))
        changed = [e for e, jobs in progress.items() if self._judged.get(e) != jobs]
        self._judged = {e: frozenset(jobs) for e, jobs in progress.items()}
        for gone in [e for e in self._standings if e not in progress]:
            del self._standings[gone]
        for gone in [e for e in self._rules if e not in progress]:
            del self._rules[gone]
        stopped: list[int] = []
        for experiment_id in changed:
            config = self.rule_for(session, experiment_id)
            if config is None:
                continue
            try:
                stopped += self._apply(session, experiment_id, config)
            except Exception:  # noqa: BLE001 - one bad experiment must not stop scheduling
                session.rollback()
                log.exception("early stopping of experiment %s failed", experiment_id)
        for gone in [e for e in self._jobs_of if e not in progress]:
            for job_id in self._jobs_of.pop(gone):
                self._series.pop(job_id, None)
                self._metric.pop(job_id, None)
                self._read_at.pop(job_id, None)
        self.standings = {j: s for by_job in self._standings.values()
                          for j, s in by_job.items() if j not in stopped}
        return stopped

    def _apply(self, session: Session, experiment_id: int, config: RuleConfig) -> list[int]:
        rows = session.execute(
            select(col(Job.id), col(Job.status), col(Job.iterations_done),
                   col(Job.max_iterations), col(Job.stopped_early))
            .where(col(Job.experiment_id) == experiment_id)).all()
        trials = []
        self._jobs_of[experiment_id] = {int(row[0]) for row in rows}
        for job_id, status, done, most, early in rows:
            job_id = int(job_id)
            points = self._read_series(session, job_id, config.metric, int(done))
            stoppable = status in ACTIVE and not early
            final = floor = None
            if stoppable and points:
                final = predict_final(self.predictor, job_id=job_id, points=points,
                                      max_iterations=int(most), maximise=config.maximise)
                if floors_by_training_loss(config):
                    floor = training_floor(points, self._recent_losses(session, job_id, int(done)),
                                           maximise=config.maximise)
            trials.append(Trial(job_id=job_id, iterations_done=int(done),
                                max_iterations=int(most), points=tuple(points),
                                final=final, stoppable=stoppable, floor=floor))
        self._standings[experiment_id] = standings(experiment_id, config, trials)
        verdict = judge(trials, config)
        self._publish(experiment_id, verdict.kept)
        return [stop.job_id for stop in verdict.stops if self._stop(session, stop, config)]

    def _publish(self, experiment_id: int, kept: dict[int, str]) -> None:
        key = self.keys.experiment_verdicts(experiment_id)
        try:
            pipe = self.redis.pipeline()
            pipe.delete(key)
            if kept:
                pipe.hset(key, mapping={str(j): why for j, why in kept.items()})
                pipe.expire(key, VERDICTS_TTL_SECONDS)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not publish the verdicts of experiment %s: %s", experiment_id, exc)

    def _recent_losses(self, session: Session, job_id: int, done: int) -> list[tuple[int, float]]:
        """The job's training losses of its last ``FLOOR_WINDOW`` iterations,
        for :func:`training_floor` (a held-out loss judged by its training loss)."""
        rows = session.execute(
            select(col(LossRecord.iteration), col(LossRecord.loss))
            .where(col(LossRecord.job_id) == job_id,
                   col(LossRecord.iteration) > done - FLOOR_WINDOW)
            .order_by(col(LossRecord.iteration))).all()
        return [(int(i), float(v)) for i, v in rows if math.isfinite(float(v))]

    def _read_series(self, session: Session, job_id: int, metric: str,
                     done: int) -> list[tuple[int, float]]:
        if self._metric.get(job_id) != metric:
            self._series[job_id] = []
            self._metric[job_id] = metric
            self._read_at.pop(job_id, None)
        series = self._series[job_id]
        if self._read_at.get(job_id) == done:
            return series  # no chunk committed since: no new points
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
        self._read_at[job_id] = done
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
