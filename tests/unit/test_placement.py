"""Placement: which pool runs each ranked grant (backend/scheduling/placement.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.scheduling.placement import (
    ineligibility,
    place,
    refusal,
    requirements_from,
    waiting_for_pool,
)
from backend.scheduling.types import (
    Grant,
    JobView,
    PoolView,
    Requirements,
    Snapshot,
    TenantView,
)

ACME = 7  # the tenant the reserved pool belongs to


def cpu(free: int = 2, slots: int = 2, name: str = "cpu") -> PoolView:
    return PoolView(name, slots=slots, free=free, cores=8, memory_mb=16384)


def gpu(free: int = 1, slots: int = 1, name: str = "gpu") -> PoolView:
    return PoolView(name, slots=slots, free=free, gpu="A100", gpu_memory_mb=40960,
                    memory_mb=65536, cores=16)


def acme(free: int = 1, slots: int = 1) -> PoolView:
    return PoolView("acme", slots=slots, free=free, cores=4, memory_mb=32768,
                    reserved_for=frozenset({ACME}))


def job(job_id: int, tenant: int = 1, *, needs: Requirements | None = None,
        on: str | None = None) -> JobView:
    """A waiting job, or one running on pool ``on``."""
    return JobView(job_id=job_id, tenant_id=tenant, submitted_at=0.0, iterations_done=0,
                   max_iterations=100, running=on is not None, pool=on,
                   requirements=needs or Requirements())


GPU = Requirements(gpu=True)
PREFERS_GPU = Requirements(prefer_gpu=True)


def snap(jobs: Sequence[JobView], pools: Sequence[PoolView],
         tenants: Mapping[int, TenantView] | None = None) -> Snapshot:
    return Snapshot(now=0.0, free_slots=sum(p.free for p in pools),
                    total_slots=sum(p.slots for p in pools), chunk_seconds=1.0, jobs=list(jobs),
                    tenants=dict(tenants or {}), pools=list(pools))


def grants(*job_ids: int) -> list[Grant]:
    return [Grant(job_id=i, iterations=10, reason=f"rank {n}")
            for n, i in enumerate(job_ids, start=1)]


def placed(snapshot: Snapshot, ranked: Sequence[Grant]) -> list[tuple[int, str]]:
    return [(grant.job_id, pool) for grant, pool in place(snapshot, ranked)]


# -- place ---------------------------------------------------------------------------------


def test_without_pools_every_grant_is_placed_on_the_one_pool() -> None:
    s = Snapshot(now=0.0, free_slots=2, total_slots=2, chunk_seconds=1.0,
                 jobs=[job(1), job(2, needs=GPU)])
    ranked = grants(2, 1)
    assert place(s, ranked) == [(ranked[0], ""), (ranked[1], "")]


def test_gpu_job_waits_for_the_gpu_pool_while_cpu_jobs_run_on_cpu() -> None:
    s = snap([job(1, needs=GPU), job(2), job(3), job(9, needs=GPU, on="gpu")],
             [cpu(free=2), gpu(free=0)])
    # The GPU job is ranked first, yet only the CPU jobs can start.
    assert placed(s, grants(1, 2, 3)) == [(2, "cpu"), (3, "cpu")]


def test_gpu_job_runs_on_the_gpu_pool_when_it_has_a_slot() -> None:
    s = snap([job(1, needs=GPU), job(2)], [cpu(free=2), gpu(free=1)])
    assert placed(s, grants(1, 2)) == [(1, "gpu"), (2, "cpu")]


def test_a_gpu_job_never_runs_on_a_cpu_pool() -> None:
    s = snap([job(1, needs=GPU)], [cpu(free=5, slots=5)])
    assert placed(s, grants(1)) == []


def test_placement_keeps_the_ranking_order_and_places_each_grant_once() -> None:
    s = snap([job(i) for i in range(1, 6)], [cpu(free=3, slots=3), gpu(free=0)])
    assert placed(s, grants(5, 3, 1, 2, 4)) == [(5, "cpu"), (3, "cpu"), (1, "cpu")]


def test_grants_for_unknown_or_running_jobs_are_skipped() -> None:
    s = snap([job(1), job(2, on="cpu")], [cpu(free=1)])
    assert placed(s, grants(42, 2, 1)) == [(1, "cpu")]


def test_a_reserved_pool_never_runs_another_tenants_job() -> None:
    s = snap([job(1, tenant=1), job(2, tenant=2), job(3, tenant=ACME)],
             [cpu(free=0), acme(free=3, slots=3)])
    assert placed(s, grants(1, 2, 3)) == [(3, "acme")]


def test_the_owner_uses_its_reserved_pool_before_shared_ones() -> None:
    s = snap([job(1, tenant=ACME), job(2, tenant=ACME), job(3, tenant=1)],
             [cpu(free=3, slots=3), acme(free=1)])
    # The reserved pool is emptier, but the owner takes it first so that
    # shared slots stay for other teams; when it is full the owner overflows.
    assert placed(s, grants(1, 2, 3)) == [(1, "acme"), (2, "cpu"), (3, "cpu")]


def test_a_job_asking_for_a_named_pool_runs_only_there() -> None:
    s = snap([job(1, needs=Requirements(pool="cpu-b")), job(2, needs=Requirements(pool="cpu"))],
             [cpu(free=2), cpu(free=0, name="cpu-b")])
    assert placed(s, grants(1, 2)) == [(2, "cpu")]


def test_memory_requirement_skips_smaller_pools() -> None:
    big = Requirements(min_memory_mb=32768)
    s = snap([job(1, needs=big), job(2, tenant=ACME, needs=big)],
             [cpu(free=2), acme(free=1), gpu(free=1)])
    # 16 GiB cpu is too small; the GPU pool (64 GiB) and acme's pool (32 GiB) fit.
    assert placed(s, grants(1, 2)) == [(1, "gpu"), (2, "acme")]


def test_load_spreads_to_the_emptiest_of_equal_pools() -> None:
    s = snap([job(i) for i in range(1, 5)], [cpu(free=1, slots=3, name="a"),
                                             cpu(free=3, slots=3, name="b")])
    assert placed(s, grants(1, 2, 3, 4)) == [(1, "b"), (2, "b"), (3, "a"), (4, "b")]


# -- per-pool quotas --------------------------------------------------------------------------


def test_per_pool_tenant_quota_counts_chunks_in_flight() -> None:
    tenants = {1: TenantView(1, max_slots=10, pool_slots={"gpu": 1}),
               2: TenantView(2, max_slots=10)}
    s = snap([job(1, tenant=1, needs=GPU, on="gpu"), job(2, tenant=1, needs=GPU),
              job(3, tenant=2, needs=GPU)], [cpu(), gpu(free=2, slots=3)], tenants)
    assert placed(s, grants(2, 3)) == [(3, "gpu")]


def test_per_pool_tenant_quota_counts_grants_placed_in_the_same_round() -> None:
    tenants = {1: TenantView(1, max_slots=10, pool_slots={"gpu": 1})}
    s = snap([job(1, needs=GPU), job(2, needs=GPU)], [cpu(), gpu(free=2, slots=2)], tenants)
    assert placed(s, grants(1, 2)) == [(1, "gpu")]


def test_per_pool_quota_leaves_other_pools_open() -> None:
    tenants = {1: TenantView(1, max_slots=10, pool_slots={"gpu": 0})}
    s = snap([job(1, needs=PREFERS_GPU), job(2)], [cpu(free=2), gpu(free=1)], tenants)
    # No GPU slot for this team: the GPU-preferring job falls back to cpu.
    assert placed(s, grants(1, 2)) == [(1, "cpu"), (2, "cpu")]


# -- CPU jobs on GPU pools ------------------------------------------------------------------


def test_cpu_jobs_prefer_cpu_pools_to_an_idle_gpu_pool() -> None:
    s = snap([job(1), job(2)], [cpu(free=2), gpu(free=1)])
    assert placed(s, grants(1, 2)) == [(1, "cpu"), (2, "cpu")]


def test_cpu_jobs_fill_an_idle_gpu_pool_when_no_gpu_job_waits() -> None:
    s = snap([job(1), job(2), job(3)], [cpu(free=1), gpu(free=1)])
    assert placed(s, grants(1, 2, 3)) == [(1, "cpu"), (2, "gpu")]


def test_cpu_jobs_leave_the_gpu_slot_to_a_waiting_gpu_job_even_if_it_is_not_ranked() -> None:
    s = snap([job(1), job(2), job(9, needs=GPU)], [cpu(free=1), gpu(free=1)])
    # Job 9 is not in this round's grants, but it may be in the next one.
    assert placed(s, grants(1, 2)) == [(1, "cpu")]


def test_a_gpu_job_ranked_below_cpu_jobs_still_gets_the_gpu_slot() -> None:
    s = snap([job(1), job(2), job(3, needs=PREFERS_GPU)], [cpu(free=0), gpu(free=1)])
    assert placed(s, grants(1, 2, 3)) == [(3, "gpu")]


def test_gpu_slots_beyond_the_waiting_gpu_jobs_go_to_cpu_jobs() -> None:
    # Three free GPU slots and one GPU job waiting: two slots are not needed by it.
    s = snap([job(1), job(2), job(3), job(9, needs=GPU)], [cpu(free=0), gpu(free=3, slots=3)])
    assert placed(s, grants(1, 2, 3)) == [(1, "gpu"), (2, "gpu")]
    assert placed(s, grants(1, 9, 2, 3)) == [(1, "gpu"), (9, "gpu"), (2, "gpu")]


def test_a_gpu_job_placed_this_round_no_longer_holds_a_slot() -> None:
    s = snap([job(9, needs=GPU), job(1)], [cpu(free=0), gpu(free=2, slots=2)])
    assert placed(s, grants(9, 1)) == [(9, "gpu"), (1, "gpu")]


def test_a_gpu_job_at_its_quota_does_not_hold_the_gpu_pool() -> None:
    tenants = {2: TenantView(2, max_slots=10, pool_slots={"gpu": 1})}
    s = snap([job(1), job(5, tenant=2, needs=GPU, on="gpu"), job(6, tenant=2, needs=GPU)],
             [cpu(free=0), gpu(free=1, slots=2)], tenants)
    # Job 6 cannot start on the GPU this round: the free GPU slot is not kept for it.
    assert placed(s, grants(1)) == [(1, "gpu")]


def test_a_gpu_job_at_its_teams_slot_limit_does_not_hold_the_gpu_pool() -> None:
    tenants = {2: TenantView(2, max_slots=1)}
    s = snap([job(1), job(5, tenant=2, on="cpu"), job(6, tenant=2, needs=GPU)],
             [cpu(free=0, slots=1), gpu(free=1)], tenants)
    assert placed(s, grants(1)) == [(1, "gpu")]


def test_a_gpu_job_of_another_team_does_not_hold_a_reserved_gpu_pool() -> None:
    private = PoolView("gpu-acme", slots=1, free=1, gpu="A100", reserved_for=frozenset({ACME}))
    s = snap([job(1, tenant=ACME), job(9, tenant=1, needs=GPU)], [cpu(free=0), private])
    assert placed(s, grants(1)) == [(1, "gpu-acme")]


# -- soft GPU preference --------------------------------------------------------------------


def test_prefer_gpu_runs_on_the_gpu_pool_when_it_has_a_slot() -> None:
    s = snap([job(1, needs=PREFERS_GPU)], [cpu(free=2), gpu(free=1)])
    assert placed(s, grants(1)) == [(1, "gpu")]


def test_prefer_gpu_falls_back_to_cpu_when_the_gpu_pool_is_full() -> None:
    s = snap([job(1, needs=PREFERS_GPU), job(2, needs=PREFERS_GPU)],
             [cpu(free=2), gpu(free=1)])
    assert placed(s, grants(1, 2)) == [(1, "gpu"), (2, "cpu")]


# -- invariants over random clusters ---------------------------------------------------------

POOL_NAMES = ("cpu", "gpu", "acme", "big")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Snapshot, list[Grant]]:
    pools = []
    for name in POOL_NAMES:
        slots = draw(st.integers(0, 3))
        pools.append(PoolView(
            name, slots=slots, free=draw(st.integers(0, slots)),
            gpu="A100" if name in ("gpu", "big") else None,
            memory_mb=draw(st.sampled_from([0, 8192, 65536])),
            reserved_for=frozenset({ACME}) if name in ("acme", "big") else frozenset()))
    jobs = []
    for i in range(draw(st.integers(0, 10))):
        needs = Requirements(gpu=draw(st.booleans()), prefer_gpu=draw(st.booleans()),
                             min_memory_mb=draw(st.sampled_from([0, 16384])),
                             pool=draw(st.sampled_from([None, None, *POOL_NAMES])))
        running = draw(st.booleans())
        jobs.append(job(i, tenant=draw(st.sampled_from([1, 2, ACME])), needs=needs,
                        on=draw(st.sampled_from(POOL_NAMES)) if running else None))
    tenants = {t: TenantView(t, max_slots=draw(st.integers(0, 6)),
                             pool_slots=draw(st.dictionaries(st.sampled_from(POOL_NAMES),
                                                             st.integers(0, 2), max_size=2)))
               for t in (1, 2, ACME)}
    ids = [j.job_id for j in jobs] + [99]
    ranked = grants(*draw(st.lists(st.sampled_from(ids), unique=True)))
    return snap(jobs, pools, tenants), ranked


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_placement_never_breaks_a_pool_limit(case: tuple[Snapshot, list[Grant]]) -> None:
    s, ranked = case
    result = place(s, ranked)
    jobs = {j.job_id: j for j in s.jobs}
    pools = {p.name: p for p in s.pools}
    order = [g.job_id for g in ranked]
    got = [g.job_id for g, _ in result]
    assert got == [i for i in order if i in got], "rank order kept"
    assert len(set(got)) == len(got)
    used: dict[str, int] = {}
    per_tenant_pool: dict[tuple[int, str], int] = {}
    for j in s.jobs:
        if j.running and j.pool:
            key = (j.tenant_id, j.pool)
            per_tenant_pool[key] = per_tenant_pool.get(key, 0) + 1
    for grant, pool_name in result:
        j = jobs[grant.job_id]
        pool = pools[pool_name]
        assert not j.running
        assert ineligibility(pool, j.requirements, j.tenant_id) is None
        if pool.reserved_for:
            assert j.tenant_id in pool.reserved_for
        if j.requirements.gpu:
            assert pool.has_gpu
        used[pool_name] = used.get(pool_name, 0) + 1
        key = (j.tenant_id, pool_name)
        per_tenant_pool[key] = per_tenant_pool.get(key, 0) + 1
        limit = s.tenant(j.tenant_id).pool_slots.get(pool_name)
        if limit is not None:
            assert per_tenant_pool[key] <= limit
    for name, count in used.items():
        assert count <= pools[name].free


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_a_cpu_job_takes_a_gpu_slot_only_when_no_waiting_gpu_job_could(
        case: tuple[Snapshot, list[Grant]]) -> None:
    s, ranked = case
    result = place(s, ranked)
    jobs = {j.job_id: j for j in s.jobs}
    for n, (grant, pool_name) in enumerate(result):
        pool = next(p for p in s.pools if p.name == pool_name)
        if not pool.has_gpu or jobs[grant.job_id].requirements.wants_gpu:
            continue
        # Every GPU-wanting waiting job that could have used this pool is
        # either placed in this round or blocked by its quota / a full pool.
        placed_ids = {g.job_id for g, _ in result}
        taken_here = sum(1 for _, name in result[: n + 1] if name == pool_name)
        rivals = [j for j in s.jobs if not j.running and j.requirements.wants_gpu
                  and j.job_id not in placed_ids
                  and ineligibility(pool, j.requirements, j.tenant_id) is None
                  and _room(s, result, j.tenant_id, pool_name) > 0]
        assert taken_here + len(rivals) <= pool.free or not rivals


def _room(s: Snapshot, result: list[tuple[Grant, str]], tenant_id: int, pool: str) -> int:
    jobs = {j.job_id: j for j in s.jobs}
    in_pool = sum(1 for j in s.jobs if j.running and j.tenant_id == tenant_id and j.pool == pool)
    in_pool += sum(1 for g, name in result if name == pool and jobs[g.job_id].tenant_id
                   == tenant_id)
    total = sum(1 for j in s.jobs if j.running and j.tenant_id == tenant_id)
    total += sum(1 for g, _ in result if jobs[g.job_id].tenant_id == tenant_id)
    limits = s.tenant(tenant_id)
    return min(limits.pool_slots.get(pool, s.total_slots) - in_pool, limits.max_slots - total)


# -- refusal ----------------------------------------------------------------------------------

POOLS = [cpu(), gpu(), acme()]


def test_refusal_is_none_when_some_pool_can_run_the_job() -> None:
    assert refusal(POOLS, Requirements(), 1) is None
    assert refusal(POOLS, GPU, 1) is None
    assert refusal(POOLS, Requirements(pool="acme"), ACME) is None
    assert refusal([cpu()], PREFERS_GPU, 1) is None, "a preference is never a reason to refuse"


def test_refusal_names_an_unknown_pool_and_the_known_ones() -> None:
    assert refusal(POOLS, Requirements(pool="tpu"), 1) == (
        "there is no worker pool named 'tpu' (pools: acme, cpu, gpu)")


def test_refusal_of_a_gpu_job_where_no_pool_has_a_gpu() -> None:
    why = refusal([cpu(), acme()], GPU, 1)
    assert why == ("no worker pool your team may use offers a GPU: the pools open to your team "
                   "are cpu (8 cores, 16 GiB, no GPU)")


def test_refusal_of_a_gpu_job_whose_only_gpu_pool_is_reserved_for_another_team() -> None:
    private = PoolView("gpu-acme", slots=1, gpu="A100", reserved_for=frozenset({ACME}))
    why = refusal([cpu(), private], GPU, 1)
    assert why is not None and "a GPU" in why and "gpu-acme" not in why
    assert refusal([cpu(), private], GPU, ACME) is None


def test_refusal_of_a_job_needing_more_memory_than_any_pool_has() -> None:
    why = refusal(POOLS, Requirements(min_memory_mb=1_000_000), 1)
    assert why == ("no worker pool your team may use offers 1000000 MiB of memory: the pools "
                   "open to your team are cpu (8 cores, 16 GiB, no GPU); "
                   "gpu (16 cores, 64 GiB, GPU A100)")


def test_refusal_of_a_named_pool_reserved_for_another_team() -> None:
    why = refusal(POOLS, Requirements(pool="acme"), 1)
    assert why is not None and why.startswith("no worker pool your team may use offers pool acme")


def test_refusal_when_every_pool_is_reserved_for_others() -> None:
    why = refusal([acme()], Requirements(), 1)
    assert why == ("no worker pool your team may use offers a slot: "
                   "the pools open to your team are none")


# -- waiting_for_pool -------------------------------------------------------------------------


def test_waiting_for_a_gpu_slot_says_how_many_are_free() -> None:
    waiting = job(1, needs=GPU)
    s = snap([waiting, job(2, needs=GPU, on="gpu")], [cpu(), gpu(free=0)])
    assert waiting_for_pool(s, waiting) == "waiting for a GPU slot: 0 of 1 free"


def test_no_pool_reason_when_the_pools_have_room_or_there_are_none() -> None:
    waiting = job(1, needs=GPU)
    assert waiting_for_pool(snap([waiting], [cpu(), gpu(free=1)]), waiting) is None
    plain = Snapshot(now=0.0, free_slots=0, total_slots=1, chunk_seconds=1.0, jobs=[waiting])
    assert waiting_for_pool(plain, waiting) is None


def test_waiting_for_a_cpu_slot_names_the_pool() -> None:
    waiting = job(1)
    s = snap([waiting, job(2, on="cpu"), job(3, on="cpu")], [cpu(free=0), gpu(free=0)])
    # Any pool would do and all are busy: the ranking, not a pool, holds it.
    assert waiting_for_pool(s, waiting) is None
    only_cpu = job(4, needs=Requirements(pool="cpu"))
    assert waiting_for_pool(snap([only_cpu], [cpu(free=0), gpu()]), only_cpu) == (
        "waiting for a slot in pool cpu: 0 of 2 free")


def test_waiting_cpu_job_is_told_the_free_gpu_slots_are_kept() -> None:
    waiting = job(1)
    s = snap([waiting, job(9, needs=GPU)], [cpu(free=0), gpu(free=1)])
    assert waiting_for_pool(s, waiting) == (
        "waiting for a slot in pool cpu: 0 of 2 free "
        "(the 1 free slot of pool gpu is kept for jobs that want a GPU)")
    big = job(2, needs=Requirements(min_memory_mb=32768))
    s = snap([big, job(9, needs=GPU)], [cpu(free=0), gpu(free=1)])
    assert waiting_for_pool(s, big) == (
        "waiting for a slot: the 1 free slot of pool gpu is kept for jobs that want a GPU")
    # Once the GPU job no longer waits, the free GPU slot is the CPU job's.
    s = snap([waiting], [cpu(free=0), gpu(free=1)])
    assert waiting_for_pool(s, waiting) is None


def test_waiting_for_a_pool_that_has_no_live_worker() -> None:
    waiting = job(1, needs=GPU)
    s = snap([waiting], [cpu(), PoolView("gpu", gpu="A100")])
    assert waiting_for_pool(s, waiting) == "waiting for a GPU slot: 0 of 0 free"
    assert waiting_for_pool(snap([waiting], [cpu()]), waiting) == (
        "no live worker pool can run this job: waiting for one to join")


def test_waiting_at_the_teams_pool_quota() -> None:
    tenants = {1: TenantView(1, max_slots=10, pool_slots={"gpu": 1})}
    waiting = job(1, needs=GPU)
    s = snap([waiting, job(2, needs=GPU, on="gpu")], [cpu(), gpu(free=1, slots=2)], tenants)
    assert waiting_for_pool(s, waiting) == (
        "your team is using all of its slots in the pools this job can use (1 in pool gpu)")


# -- stored requirements ----------------------------------------------------------------------


@pytest.mark.parametrize(("stored", "expected"), [
    ({}, Requirements()),
    ({"gpu": True, "min_memory_mb": 2048, "pool": "gpu", "prefer_gpu": False},
     Requirements(gpu=True, min_memory_mb=2048, pool="gpu")),
    ({"gpu": None, "min_memory_mb": None, "pool": None, "prefer_gpu": True},
     Requirements(prefer_gpu=True)),
    ({"min_memory_mb": 512.0, "pool": ""}, Requirements(min_memory_mb=512)),
])
def test_requirements_from_stored_json(stored: dict[str, object],
                                       expected: Requirements) -> None:
    assert requirements_from(stored) == expected
