"""Chunk length while slots stay idle, on literal snapshots through the round's
``decide``: with every waiting job granted and a slot left over, nobody waits
for a decision, so chunks are longer; with any competition they stay short."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.scheduling.registry import make_policy
from backend.scheduling.residency import IDLE_CHUNK_FACTOR, SlotView, slots_wanted
from backend.scheduling.round import decide
from backend.scheduling.types import Grant, JobView, LossPoint, Snapshot, TenantView

SPI = 1 / 128  # seconds an iteration (exact in binary): a 1 s chunk is 128 iterations


def job(job_id: int, *, done: int = 50, spi: float | None = SPI,
        total: int = 100_000, tenant: int = 1, running: bool = False) -> JobView:
    losses = [] if spi is None else [LossPoint(i, 1.0 / i, spi) for i in range(1, done + 1)]
    return JobView(job_id=job_id, tenant_id=tenant, submitted_at=0.0,
                   iterations_done=done if spi is not None else 0, max_iterations=total,
                   losses=losses, running=running)


def grants(jobs: list[JobView], free: int, **options: float) -> dict[int, Grant]:
    snapshot = Snapshot(now=10.0, free_slots=free, total_slots=free, chunk_seconds=1.0,
                        jobs=jobs)
    slots = [SlotView(f"s{i}", "cpu", f"q.s{i}") for i in range(free)]
    decided = decide(make_policy("las"), snapshot, free=slots, default_pool="cpu",
                     **options)  # type: ignore[arg-type]
    return {g.job_id: g for g, _ in decided.grants}


def granted(jobs: list[JobView], free: int, **options: float) -> dict[int, int]:
    return {job_id: g.iterations for job_id, g in grants(jobs, free, **options).items()}


@pytest.mark.parametrize("policy_free", [2, 3])
def test_a_job_alone_with_slots_left_idle_gets_a_long_chunk(policy_free: int) -> None:
    assert granted([job(1)], policy_free) == {1: int(IDLE_CHUNK_FACTOR * 128)}


def test_as_many_waiting_jobs_as_free_slots_keep_short_chunks() -> None:
    # No slot is left over: the next arrival would wait for one of these chunks.
    assert granted([job(1), job(2)], 2) == {1: 128, 2: 128}


def test_a_job_of_unknown_speed_keeps_its_measuring_chunk() -> None:
    (iterations,) = granted([job(1, spi=None)], 2).values()
    assert iterations < int(IDLE_CHUNK_FACTOR * 128)


def test_the_long_chunk_ends_with_the_job() -> None:
    assert granted([job(1, total=200)], 2) == {1: 150}


def test_a_factor_of_one_turns_it_off() -> None:
    assert granted([job(1)], 2, idle_factor=1.0) == {1: 128}


def test_the_long_chunk_yields_where_the_chunk_it_was_lengthened_from_ends() -> None:
    (grant,) = grants([job(1)], 2).values()
    assert (grant.iterations, grant.yield_after) == (int(IDLE_CHUNK_FACTOR * 128), 128)
    # The decision log says why a grant is several chunks long.
    assert grant.reason.endswith(f"; {int(IDLE_CHUNK_FACTOR * 128)} iterations while slots "
                                 "idle, ending after 128 once a job waits for a slot")


def test_a_plain_chunk_has_no_yield_point() -> None:
    assert [g.yield_after for g in grants([job(1), job(2)], 2).values()] == [None, None]
    (short,) = grants([job(1, total=120)], 2).values()  # its end comes first
    assert (short.iterations, short.yield_after) == (70, None)


def test_a_cut_below_the_yield_point_leaves_no_yield_point() -> None:
    at_rung = grants([job(1)], 2, cut=lambda g, _, __: replace(g, iterations=100))  # type: ignore[arg-type]
    assert [(g.iterations, g.yield_after) for g in at_rung.values()] == [(100, None)]
    assert "while slots idle" not in at_rung[1].reason


def wanted(jobs: list[JobView], free: int, yielding: set[int], quota: int = 4) -> bool:
    tenants = {t: TenantView(t, quota) for t in (1, 2)}
    return slots_wanted(Snapshot(now=0.0, free_slots=free, total_slots=4, chunk_seconds=1.0,
                                 jobs=jobs, tenants=tenants), yielding)


def test_slots_are_wanted_when_a_job_waits_and_none_is_free() -> None:
    busy = [job(i, running=True) for i in range(1, 5)]
    assert wanted([*busy, job(5, tenant=2)], 0, {1})
    assert not wanted(busy, 0, {1})  # nobody waits
    assert not wanted([*busy[:3], job(5, tenant=2)], 1, {1})  # a slot is free for it
    assert not wanted([*busy, job(5, done=100_000, tenant=2)], 0, {1})  # it has no work left


def test_a_job_at_its_tenants_quota_wants_only_its_own_tenants_chunk_to_yield() -> None:
    # Tenant 1 holds its one slot with a lengthened chunk; its second job waits
    # though slots are free: only that chunk ending lets it run.
    mine = [job(1, running=True), job(2)]
    assert wanted(mine, 3, {1}, quota=1)
    assert not wanted(mine, 3, {2}, quota=1)
    # Another tenant's job at its quota gains nothing from tenant 1's chunk.
    theirs = [job(1, running=True), job(3, tenant=2, running=True), job(4, tenant=2)]
    assert not wanted(theirs, 0, {1}, quota=1)
