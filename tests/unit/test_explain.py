"""The queue explanation ranks every waiting job the way the policy would."""

from __future__ import annotations

from dataclasses import replace

from backend.scheduling.explain import explain_waiting
from backend.scheduling.registry import make_policy
from backend.scheduling.types import JobView, LossPoint, Snapshot, TenantView
from backend.scheduling.waiting import WaitingEntry
from backend.services.job_explanation import explain_job


def _job(job_id: int, tenant: int, waiting_since: float, running: bool = False,
         losses: tuple[LossPoint, ...] = ()) -> JobView:
    return JobView(job_id=job_id, tenant_id=tenant, submitted_at=0.0, iterations_done=0,
                   max_iterations=100, running=running, waiting_since=waiting_since,
                   losses=losses)


def test_fifo_order_and_quota_reason() -> None:
    snapshot = Snapshot(now=10.0, free_slots=1, total_slots=2, chunk_seconds=1.0,
                        jobs=[_job(1, 1, 5.0), _job(2, 1, 1.0), _job(3, 2, 0.5, running=True),
                              _job(4, 2, 3.0)],
                        tenants={1: TenantView(1, 4), 2: TenantView(2, 1)})
    entries = explain_waiting(make_policy("fifo"), snapshot)
    assert set(entries) == {1, 2, 4}, "running jobs are not waiting"
    assert sorted(entries, key=lambda j: entries[j].position) == [1, 2, 4]
    assert entries[4].at_quota and "all 1 of its slots" in entries[4].reason
    assert not entries[1].at_quota and entries[1].reason.startswith("about to run")


def test_slaq_ranks_the_steeper_curve_first() -> None:
    steep = tuple(LossPoint(k, 1.0 / k, 0.01) for k in range(1, 41))
    flat = tuple(LossPoint(k, 0.1 + 0.9 * 0.5 ** k, 0.01) for k in range(1, 41))
    snapshot = Snapshot(now=1.0, free_slots=0, total_slots=1, chunk_seconds=1.0,
                        jobs=[_job(1, 1, 0.0, losses=flat), _job(2, 1, 0.5, losses=steep)],
                        tenants={1: TenantView(1, 4)})
    entries = explain_waiting(make_policy("slaq"), snapshot)
    assert entries[2].position == 1 and entries[1].position == 2
    assert "waiting for a free slot" in entries[2].reason
    gain_steep, gain_flat = entries[2].predicted_gain, entries[1].predicted_gain
    assert gain_steep is not None and gain_flat is not None
    assert gain_steep > gain_flat


def test_position_and_jobs_going_first_come_from_one_ranking() -> None:
    # Issue 38: with jobs running, the first waiting job read "2 jobs ... go
    # first. Queue position 1." and the last "4 jobs ... go first. Queue
    # position 3.": the position counted waiting jobs of one ranking, "go
    # first" every job of another. Under LAS both running jobs (1 s and 2 s
    # attained) come before the waiting ones (10, 20, 30 s) when their chunks end.
    def job(job_id: int, attained: float, running: bool) -> JobView:
        return replace(_job(job_id, 1, 9.0, running=running), attained_seconds=attained)

    snapshot = Snapshot(now=10.0, free_slots=0, total_slots=2, chunk_seconds=1.0,
                        jobs=[job(1, 1.0, True), job(2, 2.0, True), job(3, 10.0, False),
                              job(4, 20.0, False), job(5, 30.0, False)],
                        tenants={1: TenantView(1, 4)})
    entries = explain_waiting(make_policy("las"), snapshot)

    def summary(job_id: int) -> str:
        why = entries[job_id]
        return explain_job(status="queued", end_reason=None, error=None, last_reason=None,
                           waiting=WaitingEntry(job_id, kind=why.kind, position=why.position,
                                                ahead=why.ahead,
                                                running_ahead=why.running_ahead,
                                                policy="las")).summary

    assert summary(3) == ("Waiting for its turn: 2 jobs that have trained less so far go "
                          "first (2 running now). Queue position 3.")
    assert summary(5) == ("Waiting for its turn: 4 jobs that have trained less so far go "
                          "first (2 running now). Queue position 5.")
    for why in entries.values():
        assert why.ahead == why.position - 1, why
        assert f"rank {why.position})" in why.policy_reason, "the policy's own rank agrees"
