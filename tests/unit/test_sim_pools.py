"""The simulator with worker pools, job requirements and charged decision time."""

from __future__ import annotations

import pytest

from backend.scheduling.metrics import figures
from backend.scheduling.simulator import (
    SimConfig,
    SimJob,
    SimPool,
    SimResult,
    build_policy,
    simulate,
)
from backend.scheduling.trace import Trace, TraceCurve
from backend.scheduling.types import Requirements, TenantView
from backend.scheduling.workload import Arrival

SPI = 0.01
GPU_JOB = 0
PREFERS_GPU_JOB = 1


def trace() -> Trace:
    def curve(cid: str, n: int, rate: float) -> TraceCurve:
        return TraceCurve(id=cid, losses=tuple(0.1 + rate**k for k in range(1, n + 1)),
                          seconds=(SPI,) * n, chunk_overhead_seconds=0.02, max_iterations=n)
    return Trace((curve("long", 300, 0.99), curve("short", 80, 0.95)))


def arrivals(n: int = 8) -> list[Arrival]:
    return [Arrival(i, 0.1 * i, "long" if i % 2 == 0 else "short", tenant_id=1 + i % 2)
            for i in range(n)]


POOLS = (SimPool("cpu", slots=2), SimPool("gpu", slots=1, gpu=True, speedup=2.0))
NEEDS = {GPU_JOB: Requirements(gpu=True), PREFERS_GPU_JOB: Requirements(prefer_gpu=True)}


def run(policy: str = "fair", *, slots: int = 3, pools: tuple[SimPool, ...] = POOLS,
        decision_seconds: float | None = None, charge_decisions: bool = False) -> SimResult:
    work = arrivals()
    config = SimConfig(slots=slots, chunk_seconds=0.5, pools=pools,
                       decision_seconds=decision_seconds, charge_decisions=charge_decisions)
    result = simulate(build_policy(policy, trace(), work), trace(), work, config,
                      requirements=NEEDS)
    assert all(job.finish is not None for job in result.jobs)
    return result


def chunk_starts(job: SimJob) -> list[float]:
    """When each chunk began: its first iteration's end less half the overhead
    and that iteration's seconds (chunks are told apart by the overhead
    between them)."""
    times = job.iteration_times
    firsts = [0] + [i for i in range(1, len(times))
                    if times[i] - times[i - 1] > 1.5 * job.history[i].seconds]
    return [times[i] - 0.01 - job.history[i].seconds for i in firsts]


@pytest.mark.parametrize("policy", ["fair", "las", "slaq"])
def test_a_gpu_job_runs_only_on_the_gpu_pool(policy: str) -> None:
    result = run(policy)
    gpu_job = result.jobs[GPU_JOB]
    assert gpu_job.chunk_pools and set(gpu_job.chunk_pools) == {"gpu"}
    used = {pool for job in result.jobs for pool in job.chunk_pools}
    assert used == {"cpu", "gpu"}, "the other jobs ran too, on both pools"
    assert result.rejected == 0
    assert result.grants == sum(len(job.chunk_pools) for job in result.jobs)
    assert result.pool_busy["gpu"] > 0 and result.pool_busy["cpu"] > 0
    assert all(0 < u <= 1 for u in result.utilisation().values())


def test_a_gpu_job_runs_faster_on_a_gpu_pool_and_reports_those_seconds() -> None:
    job = run().jobs[GPU_JOB]
    assert len(job.history) and job.history.seconds == pytest.approx(SPI / 2)
    # Within a chunk, iterations end SPI / 2 apart.
    gaps = [b - a for a, b in zip(job.iteration_times[:5], job.iteration_times[1:6],
                                  strict=True)]
    assert gaps == pytest.approx([SPI / 2] * 5)


def test_jobs_without_a_gpu_preference_run_at_recorded_speed_on_the_gpu_pool() -> None:
    others = [job for job in run().jobs if job.job_id not in NEEDS]
    assert others
    for job in others:
        assert len(job.history) and (job.history.seconds == SPI).all()


def test_charged_decision_time_delays_every_grant_and_lengthens_the_run() -> None:
    free = run()
    charged = run(decision_seconds=0.05)
    assert charged.charged_seconds == pytest.approx(0.05 * charged.decisions)
    assert free.charged_seconds == 0.0
    assert figures(charged).makespan > figures(free).makespan
    for job in charged.jobs:
        assert job.iteration_times[0] >= job.arrival + 0.05, "its first grant waited"


def test_slots_freed_during_a_decision_wait_for_it() -> None:
    # A decision far longer than any chunk: chunks start only when a decision
    # ends, and the next decision begins no earlier, so distinct start times
    # are at least the charged second apart.
    result = run(decision_seconds=1.0)
    starts = sorted({round(t, 6) for job in result.jobs for t in chunk_starts(job)})
    assert 0 < len(starts) <= result.decisions
    assert all(b - a >= 1.0 - 1e-6 for a, b in zip(starts, starts[1:], strict=False))


def test_wall_clock_decision_time_is_charged() -> None:
    result = run(charge_decisions=True)
    assert result.charged_seconds == pytest.approx(result.decision_seconds)
    assert result.charged_seconds > 0
    assert len(result.decision_times) == result.decisions


def test_a_reserved_pool_runs_only_its_tenants_jobs() -> None:
    pools = (SimPool("cpu", slots=1), SimPool("gpu", slots=1, gpu=True),
             SimPool("team-2", slots=2, reserved_for=frozenset({2})))
    result = run(slots=4, pools=pools)
    for job in result.jobs:
        if job.tenant_id != 2:
            assert "team-2" not in job.chunk_pools
    assert any("team-2" in job.chunk_pools for job in result.jobs)


def test_a_per_pool_quota_caps_a_tenants_slots_in_that_pool() -> None:
    # Tenant 1 may hold no GPU slot: its GPU-preferring jobs run on cpu.
    tenants = {1: TenantView(1, max_slots=3, pool_slots={"gpu": 0})}
    work = arrivals()
    needs = {i: Requirements(prefer_gpu=True) for i in range(len(work))}
    result = simulate(build_policy("las", trace(), work), trace(), work,
                      SimConfig(slots=3, chunk_seconds=0.5, pools=POOLS, tenants=tenants),
                      requirements=needs)
    for job in result.jobs:
        if job.tenant_id == 1:
            assert set(job.chunk_pools) == {"cpu"}
    assert any("gpu" in job.chunk_pools for job in result.jobs)


def test_a_job_no_pool_can_ever_run_is_refused() -> None:
    work = arrivals(2)
    with pytest.raises(ValueError, match="job 0 can never run: no worker pool"):
        simulate(build_policy("fair", trace(), work), trace(), work,
                 SimConfig(slots=2, pools=(SimPool("cpu", slots=2),)),
                 requirements={0: Requirements(gpu=True)})


def test_pools_must_add_up_to_the_slots() -> None:
    work = arrivals(2)
    with pytest.raises(ValueError, match="add up"):
        simulate(build_policy("fair", trace(), work), trace(), work,
                 SimConfig(slots=5, pools=POOLS))


def test_without_pools_the_new_options_change_nothing() -> None:
    work = arrivals()
    plain = simulate(build_policy("slaq", trace(), work), trace(), work,
                     SimConfig(slots=3, chunk_seconds=0.5))
    again = simulate(build_policy("slaq", trace(), work), trace(), work,
                     SimConfig(slots=3, chunk_seconds=0.5), requirements={})
    assert figures(plain) == figures(again)
    assert plain.charged_seconds == 0.0 and plain.rejected == 0 and plain.pool_busy == {}
    assert {pool for job in plain.jobs for pool in job.chunk_pools} == {""}
