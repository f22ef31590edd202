"""Chunk length while slots stay idle, on literal snapshots through the round's
``decide``: with every waiting job granted and a slot left over, nobody waits
for a decision, so chunks are longer; with any competition they stay short."""

from __future__ import annotations

import pytest

from backend.scheduling.registry import make_policy
from backend.scheduling.residency import IDLE_CHUNK_FACTOR, SlotView
from backend.scheduling.round import decide
from backend.scheduling.types import JobView, LossPoint, Snapshot

SPI = 1 / 128  # seconds an iteration (exact in binary): a 1 s chunk is 128 iterations


def job(job_id: int, *, done: int = 50, spi: float | None = SPI,
        total: int = 100_000) -> JobView:
    losses = [] if spi is None else [LossPoint(i, 1.0 / i, spi) for i in range(1, done + 1)]
    return JobView(job_id=job_id, tenant_id=1, submitted_at=0.0,
                   iterations_done=done if spi is not None else 0, max_iterations=total,
                   losses=losses)


def granted(jobs: list[JobView], free: int, **options: float) -> dict[int, int]:
    snapshot = Snapshot(now=10.0, free_slots=free, total_slots=free, chunk_seconds=1.0,
                        jobs=jobs)
    slots = [SlotView(f"s{i}", "cpu", f"q.s{i}") for i in range(free)]
    decided = decide(make_policy("las"), snapshot, free=slots, default_pool="cpu",
                     **options)  # type: ignore[arg-type]
    return {g.job_id: g.iterations for g, _ in decided.grants}


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
