"""Slot assignment on literal snapshots: a resident job goes back to its slot,
and others take empty slots before evicting a waiting job's trainer."""

from __future__ import annotations

from backend.scheduling.residency import SlotView, amortised, assign_slots
from backend.scheduling.types import Grant, JobView, LossPoint


def grant(job_id: int, pool: str = "cpu") -> Grant:
    return Grant(job_id=job_id, iterations=10, reason="test", pool=pool)


def slot(slot_id: str, resident: int | None = None, pool: str = "cpu",
         queue: str | None = None) -> SlotView:
    return SlotView(slot_id, pool, f"q.{slot_id}" if queue is None else queue, resident)


def names(assigned: list[tuple[Grant, SlotView | None]]) -> dict[int, str | None]:
    return {g.job_id: None if s is None else s.slot_id for g, s in assigned}


def test_a_job_goes_back_to_the_free_slot_holding_its_trainer() -> None:
    free = [slot("a", resident=1), slot("b", resident=9)]
    # Job 2 is ranked first, yet job 1 keeps slot a; job 2 takes b (job 9 leaves it).
    assert names(assign_slots([grant(2), grant(1)], free, {1: "a", 9: "b"})) == \
        {2: "b", 1: "a"}


def test_empty_slots_are_taken_before_a_waiting_jobs_trainer_is_evicted() -> None:
    free = [slot("a", resident=7), slot("b"), slot("c", resident=8)]
    assigned = names(assign_slots([grant(3)], free, {7: "a", 8: "c"}))
    assert assigned == {3: "b"}


def test_a_slot_whose_job_runs_elsewhere_is_taken_before_one_whose_job_waits() -> None:
    # Job 5's trainer is on cpu slot c, but it was placed on the gpu pool this
    # round; job 4 then takes c (its job moves anyway) and spares b, whose
    # job 6 waits for its next turn.
    free = [slot("b", resident=6), slot("c", resident=5), slot("g", pool="gpu")]
    assigned = names(assign_slots([grant(5, pool="gpu"), grant(4)], free, {5: "c", 6: "b"}))
    assert assigned == {5: "g", 4: "c"}


def test_a_grant_stays_in_its_pool_and_falls_back_to_the_pool_queue() -> None:
    free = [slot("g", pool="gpu"), slot("a", resident=1)]
    assigned = names(assign_slots([grant(1, pool="gpu"), grant(2, pool="cpu")], free,
                                  {1: "a"}))
    # Job 1's trainer is on a cpu slot, but it was placed on gpu: it moves.
    assert assigned == {1: "g", 2: "a"}
    assert names(assign_slots([grant(3, pool="gpu")], [slot("a")], {})) == {3: None}


def test_slots_without_their_own_queue_are_never_named() -> None:
    free = [slot("old", queue=""), slot("new")]
    assert names(assign_slots([grant(1), grant(2)], free, {1: "old"})) == {1: "new", 2: None}


def job(job_id: int, switch_seconds: float, spi: float = 0.01, done: int = 100,
        total: int = 100_000, attained: float = 0.0, moves: int = 0) -> JobView:
    losses = [LossPoint(i, 1.0 / i, spi) for i in range(1, done + 1)]
    return JobView(job_id=job_id, tenant_id=1, submitted_at=0.0, iterations_done=done,
                   max_iterations=total, losses=losses, switch_seconds=switch_seconds,
                   attained_seconds=attained, moves=moves)


def test_a_moving_job_gets_a_chunk_that_amortises_its_switch() -> None:
    moving = amortised(grant(1), job(1, switch_seconds=1.5), slot("b"), {1: "a"})
    # 1.5 s of switch is 5% of 30 s: 28.5 s of training at 0.01 s an iteration.
    assert moving.iterations == 2850


def test_the_switch_budget_spans_the_jobs_life() -> None:
    # 40 s of training and no move yet: a 1.5 s move is 3.6% of its time, no stretching.
    seasoned = amortised(grant(1), job(1, switch_seconds=1.5, attained=40.0), slot("b"), {1: "a"})
    assert seasoned.iterations == 10
    # Moved 3 times already in those 40 s: the 4th move needs (4 * 1.5 * 19 - 40) s
    # = 74 s of training, 7,400 iterations, to keep its moves within 5%.
    thrashed = amortised(grant(1), job(1, switch_seconds=1.5, attained=40.0, moves=3),
                         slot("b"), {1: "a"})
    assert thrashed.iterations == 7400


def test_a_resident_job_keeps_its_short_chunk() -> None:
    assert amortised(grant(1), job(1, switch_seconds=1.5), slot("a"), {1: "a"}).iterations == 10


def test_an_unmeasured_or_nearly_done_job_is_not_stretched_past_its_end() -> None:
    assert amortised(grant(1), job(1, switch_seconds=0.0), slot("b"), {}).iterations == 10
    short = amortised(grant(1), job(1, switch_seconds=1.5, total=400), None, {})
    assert short.iterations == 300
