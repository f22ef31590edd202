"""The portal's own completed jobs as a replayable trace, read from a real
database: curves, arrivals, measured chunk costs, the jobs as they ran, what
is left out and why, and the bounds."""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import Session, select

from backend.core.db import engine_for, migrate
from backend.core.models import Decision, Experiment, Job, JobStatus, LossRecord, Tenant, User
from backend.scheduling.metrics import figures
from backend.scheduling.trace import Trace, TraceCurve, load_trace, save_trace
from backend.services.portal_trace import (
    UNMEASURED_OVERHEAD,
    WorkloadTooLarge,
    chunk_overhead,
    iteration_times,
    record_portal_workload,
)
from backend.simulation.cli import _duration

T0 = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
STEP = 0.03


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Portal:
    """Rows as the portal writes them: jobs, grants and committed loss points."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.tenants = []
        for name in ("a", "b"):
            tenant = Tenant(name=name)
            session.add(tenant)
            session.commit()
            self.tenants.append(tenant.id or 0)
        user = User(email="u@a.test", password_hash="x", tenant_id=self.tenants[0])
        session.add(user)
        session.commit()
        self.user = user.id or 0

    def job(self, created: float, status: JobStatus, *, tenant: int = 0,
            finished: float | None = None, sweep: bool = False) -> int:
        experiment = None
        if sweep:
            row = Experiment(tenant_id=self.tenants[tenant], user_id=self.user, name="sweep")
            self.session.add(row)
            self.session.commit()
            experiment = row.id
        job = Job(tenant_id=self.tenants[tenant], user_id=self.user, algorithm="mlp",
                  experiment_id=experiment,
                  dataset="digits", max_iterations=100, status=status, created_at=_at(created),
                  finished_at=None if finished is None else _at(finished),
                  params={"learning_rate": 0.1}, end_reason="converged")
        self.session.add(job)
        self.session.commit()
        return job.id or 0

    def chunk(self, job_id: int, iterations: range, *, granted: float | None,
              committed: float) -> None:
        if granted is not None:
            self.session.add(Decision(job_id=job_id, tenant_id=self.tenants[0], chunk_seq=0,
                                      iterations=len(iterations), policy="fair", reason="r",
                                      created_at=_at(granted)))
        for i in iterations:
            self.session.add(LossRecord(job_id=job_id, iteration=i, loss=2.0 / i,
                                        seconds=STEP, recorded_at=_at(committed)))
        self.session.commit()


def test_completed_jobs_become_curves_with_their_arrivals(db_url: str, tmp_path: Path) -> None:
    migrate(db_url)
    with Session(engine_for(db_url)) as session:
        portal = Portal(session)
        before = portal.job(-60, JobStatus.completed, finished=-50)
        portal.chunk(before, range(1, 11), granted=-59, committed=-58)
        a = portal.job(0, JobStatus.completed, finished=2.5)
        # 10 iterations of 0.03 s each chunk: 0.5 s and 0.45 s from grant to
        # commit, so 0.2 and 0.15 s beyond the compute.
        portal.chunk(a, range(1, 11), granted=1.0, committed=1.5)
        portal.chunk(a, range(11, 21), granted=2.0, committed=2.45)
        b = portal.job(5, JobStatus.completed, tenant=1, finished=7, sweep=True)
        portal.chunk(b, range(1, 6), granted=None, committed=6.5)
        portal.job(6, JobStatus.cancelled, finished=6.2)
        portal.job(6, JobStatus.queued)
        gap = portal.job(7, JobStatus.completed, finished=8)
        portal.chunk(gap, range(1, 3), granted=7.1, committed=7.5)
        portal.chunk(gap, range(4, 6), granted=7.6, committed=7.9)
        lone = portal.job(8, JobStatus.completed, finished=9)
        portal.chunk(lone, range(1, 2), granted=8.1, committed=8.5)
        broken = portal.job(9, JobStatus.completed, finished=10)
        portal.chunk(broken, range(1, 4), granted=9.1, committed=9.5)
        overflowed = session.exec(select(LossRecord).where(LossRecord.job_id == broken)).first()
        assert overflowed is not None
        overflowed.loss = float("inf")
        session.commit()

        workload = record_portal_workload(session, T0, _at(3600))

    trace = workload.trace
    assert [c.id for c in trace.curves] == [f"job-{a}", f"job-{b}"]
    curve_a, curve_b = trace.curves
    assert curve_a.losses == pytest.approx([2.0 / i for i in range(1, 21)])
    assert curve_a.seconds == pytest.approx([STEP] * 20)
    assert (curve_a.algorithm, curve_a.dataset, dict(curve_a.params)) == \
        ("mlp", "digits", {"learning_rate": 0.1})
    assert curve_a.chunk_overhead_seconds == pytest.approx((0.2 + 0.15) / 2)
    assert curve_b.chunk_overhead_seconds == UNMEASURED_OVERHEAD  # no grant to measure from
    assert [(x.time, x.curve_id) for x in trace.arrivals] == [(0.0, curve_a.id),
                                                             (5.0, curve_b.id)]
    assert trace.arrivals[1].tenant_id != trace.arrivals[0].tenant_id
    # A sweep's configuration keeps its experiment: the policy warms it up at its own share.
    assert [x.experiment_id is None for x in trace.arrivals] == [True, False]
    assert workload.left_out == {"not completed (cancelled)": 1, "not completed (queued)": 1,
                                 "loss history incomplete": 1, "fewer than two loss points": 1,
                                 "non-finite losses": 1}

    # As it ran: each point dated back from its commit by the compute after it.
    ran = workload.as_run.jobs[0]
    assert ran.iteration_times[9] == pytest.approx(1.5)
    assert ran.iteration_times[0] == pytest.approx(1.5 - 9 * STEP)
    assert ran.iteration_times[19] == pytest.approx(2.45)
    assert ran.finish == pytest.approx(2.5)
    assert figures(workload.as_run).mean_completion == pytest.approx((2.5 + 2.0) / 2)

    save_trace(trace, tmp_path / "t.json")
    again = load_trace(tmp_path / "t.json")
    assert again.arrivals == trace.arrivals
    assert again.curves[0].chunk_overhead_seconds == pytest.approx(0.175)


def test_a_window_beyond_the_bounds_is_refused(db_url: str) -> None:
    migrate(db_url)
    with Session(engine_for(db_url)) as session:
        portal = Portal(session)
        for start in (0, 10):
            job = portal.job(start, JobStatus.completed, finished=start + 5)
            session.get_one(Job, job).iterations_done = 30
            session.commit()
        with pytest.raises(WorkloadTooLarge, match="2 completed jobs arrived in that window; "
                                                   "a replay takes at most 1"):
            record_portal_workload(session, T0, _at(60), max_jobs=1)
        with pytest.raises(WorkloadTooLarge, match="ran 60 iterations; a replay reads at most 50"):
            record_portal_workload(session, T0, _at(60), max_points=50)
        # A window that ends before the second job arrived holds only the first.
        assert record_portal_workload(session, T0, _at(10), max_jobs=1).left_out == {
            "fewer than two loss points": 1}


def test_a_chunk_is_its_points_from_its_grant_to_the_next() -> None:
    # Two flushes of one chunk (0.5 and 0.9 s after its grant), then a chunk
    # whose grant came after a wait: each costs its last commit less its grant
    # less its compute.
    points = [(1.5, 0.1), (1.5, 0.1), (1.9, 0.2), (5.0, 0.3)]
    assert chunk_overhead([1.0, 4.0], points) == pytest.approx(((0.9 - 0.4) + (1.0 - 0.3)) / 2)
    assert chunk_overhead([], points) is None
    assert chunk_overhead([6.0], points) is None  # granted after every point
    assert iteration_times(points) == pytest.approx([1.4, 1.5, 1.9, 5.0])


def test_recorded_arrivals_must_name_the_traces_curves() -> None:
    curve = TraceCurve(id="c", losses=(2.0, 1.0), seconds=(0.1, 0.1))
    good = Trace(curves=(curve,)).to_json()
    with pytest.raises(ValueError, match="arrivals name curves the trace lacks: nope"):
        Trace.from_json({**good, "arrivals": [{"curve_id": "nope", "time": 0.0}]})
    with pytest.raises(ValueError, match="arrival times must be finite seconds from 0"):
        Trace.from_json({**good, "arrivals": [{"curve_id": "c", "time": -1.0}]})


@pytest.mark.parametrize(("text", "seconds"), [("90m", 5400), ("24h", 86400), ("7d", 604800),
                                               ("2", 7200), ("30s", 30)])
def test_durations_read_as_people_write_them(text: str, seconds: float) -> None:
    assert math.isclose(_duration(text), seconds)


@pytest.mark.parametrize("text", ["", "h", "soon", "-1h", "0d", "infh"])
def test_a_duration_that_is_not_one_says_so(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="duration"):
        _duration(text)
