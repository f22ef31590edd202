"""The switch cost in the ranking, on literal snapshots: a job that would
have to move is charged what the move wastes, so it loses a close race to a
job that steps on where it is resident, and only a close one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.scheduling.registry import make_policy
from backend.scheduling.residency import switch_discounts
from backend.scheduling.types import JobView, LossPoint, Snapshot


def job(job_id: int, *, attained: float, switch: float = 0.0, rate: float = 0.97,
        done: int = 200, moves: int = 0) -> JobView:
    losses = tuple(LossPoint(k, 2.0 * rate ** k, 0.01) for k in range(1, done + 1))
    return JobView(job_id=job_id, tenant_id=1, submitted_at=0.0, iterations_done=done,
                   max_iterations=5000, losses=losses, attained_seconds=attained,
                   chunks_run=done // 100, switch_seconds=switch, waiting_since=99.5,
                   moves=moves)


def snapshot(jobs: list[JobView], resident: set[int]) -> Snapshot:
    return Snapshot(now=100.0, free_slots=1, total_slots=2, chunk_seconds=1.0, jobs=jobs,
                    resident=frozenset(resident))


def first(name: str, snap: Snapshot) -> int:
    return make_policy(name).allocate(snap)[0].job_id


def test_las_keeps_the_resident_job_when_the_other_is_ahead_by_less_than_a_switch() -> None:
    # Job 2 has had 0.5 s less service, but moving it wastes 2 s; job 1 steps on.
    jobs = [job(1, attained=10.0, switch=2.0), job(2, attained=9.5, switch=2.0)]
    assert first("las", snapshot(jobs, resident={1})) == 1
    # Nothing is resident on the free slot: both would move, plain LAS order.
    assert first("las", snapshot(jobs, resident=set())) == 2


def test_las_moves_a_job_whose_service_gap_outweighs_the_switch() -> None:
    jobs = [job(1, attained=10.0, switch=2.0), job(2, attained=7.0, switch=2.0)]
    assert first("las", snapshot(jobs, resident={1})) == 2


def test_an_unmeasured_switch_changes_nothing() -> None:
    jobs = [job(1, attained=10.0), job(2, attained=9.5)]
    for name in ("las", "slaq"):
        assert first(name, snapshot(jobs, resident={1})) == \
            first(name, snapshot(jobs, resident=set()))


def test_slaq_prefers_the_resident_one_of_two_equal_jobs() -> None:
    # Identical curves and service: only the move tells them apart.
    one, two = job(1, attained=3.0, switch=5.0), job(2, attained=3.0, switch=5.0)
    assert first("slaq", snapshot([one, two], resident={2})) == 2
    assert first("slaq", snapshot([one, two], resident={1})) == 1


def test_slaq_moves_a_job_whose_gain_outweighs_the_switch() -> None:
    # Job 2 is young and steep, job 1 nearly flat; the flat one is resident.
    flat = job(1, attained=3.0, switch=5.0, rate=0.999)
    steep = replace(job(2, attained=3.0, switch=5.0, rate=0.9, done=20), chunks_run=1)
    assert first("slaq", snapshot([flat, steep], resident={1})) == 2



def test_the_discount_is_the_share_of_the_moving_chunk_that_trains() -> None:
    # Job 1 steps on: 1. Job 2, 60 s of service, first move at 0.4 s: no
    # stretching needed, a 1 s chunk of which 1 / 1.4 trains. Job 3, moved 20
    # times: its chunk is stretched to 19 * 21 * 0.4 - 60 = 99.6 s.
    jobs = [job(1, attained=60.0, switch=0.4), job(2, attained=60.0, switch=0.4),
            job(3, attained=60.0, switch=0.4, moves=20)]
    got = switch_discounts(snapshot(jobs, resident={1}), jobs)
    assert got.tolist() == pytest.approx([1.0, 1 / 1.4, 99.6 / 100.0])
