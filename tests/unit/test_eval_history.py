"""The scheduler's history of a job scheduled on ``val_loss``: its evaluation
series (sparse, every ``eval_every`` iterations) with the job's measured
training speed, read incrementally from a real database; the predictor fits
such sparse series; reasons name the metric."""

from __future__ import annotations

import math

from sqlmodel import Session

from backend.core.db import engine_for, migrate
from backend.core.models import Job, LossRecord, MetricRecord, Tenant, User
from backend.scheduler.history import HistoryCache
from backend.scheduling.explain import MetricNamedPolicy, name_metric
from backend.scheduling.predictor import LossPredictor
from backend.scheduling.registry import make_policy
from backend.scheduling.types import JobView, LossPoint, Snapshot

EVERY = 10


def _jobs(session: Session) -> tuple[int, int]:
    tenant = Tenant(name="t")
    session.add(tenant)
    session.commit()
    user = User(email="a@t.test", password_hash="x", tenant_id=tenant.id or 0)
    session.add(user)
    session.commit()
    made = []
    for metric in ("val_loss", "loss"):
        job = Job(tenant_id=tenant.id or 0, user_id=user.id or 0, name=metric, algorithm="a",
                  dataset="d", max_iterations=1000, quality_metric=metric, eval_every=EVERY)
        session.add(job)
        session.commit()
        made.append(job.id or 0)
    return made[0], made[1]


def _chunk(session: Session, job_id: int, first: int, last: int, seconds: float) -> None:
    """What a chunk commits: a loss row per iteration, a val_loss row per evaluation."""
    for i in range(first, last + 1):
        session.add(LossRecord(job_id=job_id, iteration=i, loss=2.0 / i, seconds=seconds))
        if i % EVERY == 0:
            session.add(MetricRecord(job_id=job_id, split="eval", name="val_loss",
                                     iteration=i, value=1.0 + 1.0 / i))
            session.add(MetricRecord(job_id=job_id, split="eval", name="val_accuracy",
                                     iteration=i, value=0.5))
    session.commit()


def test_history_of_a_val_loss_job_is_its_evaluations(db_url: str) -> None:
    migrate(db_url)
    cache = HistoryCache()
    with Session(engine_for(db_url)) as session:
        on_val, on_loss = _jobs(session)
        metrics = {on_val: ("val_loss", EVERY)}
        cache.update(session, {on_val: 0, on_loss: 0}, [], metrics)
        assert cache.points(on_val) == ()
        for first, last in ((1, 25), (26, 60)):
            _chunk(session, on_val, first, last, seconds=0.02)
            _chunk(session, on_loss, first, last, seconds=0.01)
            cache.update(session, {on_val: last, on_loss: last}, [], metrics)

        points = cache.points(on_val)
        assert [p.iteration for p in points] == list(range(EVERY, 61, EVERY))
        assert [p.loss for p in points] == [1.0 + 1.0 / i for i in range(EVERY, 61, EVERY)]
        # Each carries the measured seconds per training iteration, not zero.
        assert all(math.isclose(p.seconds, 0.02) for p in points)
        # The job on the training loss is untouched: every iteration, its losses.
        assert [p.iteration for p in cache.points(on_loss)] == list(range(1, 61))

        # A fresh cache (scheduler restart) reloads the same series at once.
        fresh = HistoryCache()
        fresh.update(session, {on_val: 60}, [], metrics)
        assert [(p.iteration, p.loss) for p in fresh.points(on_val)] == \
            [(p.iteration, p.loss) for p in points]
        assert all(math.isclose(p.seconds, 0.02) for p in fresh.points(on_val))


def test_a_lagging_evaluation_series_is_reloaded(db_url: str) -> None:
    migrate(db_url)
    with Session(engine_for(db_url)) as session:
        on_val, _ = _jobs(session)
        metrics = {on_val: ("val_loss", EVERY)}
        _chunk(session, on_val, 1, 20, seconds=0.02)
        cache = HistoryCache()
        cache.update(session, {on_val: 20}, [], metrics)
        assert [p.iteration for p in cache.points(on_val)] == [10, 20]
        # Rows this cache's incremental read skips (committed "out of id
        # order"): the job's progress says an evaluation at 40 exists.
        cache._last_metric_id += 10_000  # noqa: SLF001 - simulates the skipped ids
        _chunk(session, on_val, 21, 40, seconds=0.02)
        cache.update(session, {on_val: 40}, [], metrics)
        assert [p.iteration for p in cache.points(on_val)] == [10, 20, 30, 40]


def test_the_predictor_fits_sparse_evaluations() -> None:
    # val_loss every 50 iterations: 0.3 + 0.7 exp(-k / 400), eight evaluations.
    points = tuple(LossPoint(k, 0.3 + 0.7 * math.exp(-k / 400), 0.01)
                   for k in range(50, 401, 50))
    job = JobView(job_id=1, tenant_id=1, submitted_at=0.0, iterations_done=400,
                  max_iterations=2000, losses=points)
    fit = LossPredictor().fit(job)
    assert fit.known and fit.family not in ("flat", "unknown")
    truth = 0.7 * (math.exp(-400 / 400) - math.exp(-600 / 400))
    assert 0.5 * truth < fit.drop(200) < 1.5 * truth
    mean, low, high = fit.predict(200)
    assert low <= mean <= high and math.isfinite(mean)


def test_reasons_name_the_metric_only_for_policies_that_rank_on_it() -> None:
    assert name_metric("rank 1", "loss") == "rank 1"
    assert name_metric("rank 1", "val_loss") == "on val_loss: rank 1"
    assert name_metric("on val_loss: rank 1", "val_loss") == "on val_loss: rank 1"
    views = [JobView(job_id=j, tenant_id=1, submitted_at=float(j), iterations_done=0,
                     max_iterations=100, waiting_since=float(j)) for j in (1, 2)]
    snapshot = Snapshot(now=10.0, free_slots=2, total_slots=2, chunk_seconds=1.0, jobs=views)
    metric = {1: "val_loss", 2: "loss"}.__getitem__
    slaq = MetricNamedPolicy(make_policy("slaq"), metric).allocate(snapshot)
    reasons = {g.job_id: g.reason for g in slaq}
    assert reasons[1].startswith("on val_loss: ") and "val_loss" not in reasons[2]
    fair = MetricNamedPolicy(make_policy("fair"), metric).allocate(snapshot)
    assert fair and not any("val_loss" in g.reason for g in fair)
