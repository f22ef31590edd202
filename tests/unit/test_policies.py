"""Invariants every registered policy must keep, on small literal snapshots.

The hard limits (free slots, one chunk per job, none for running jobs, tenant
slot quotas) are checked for every policy in the registry; the wait bounds
for every policy that declares them (``bounds``; fifo and fair have none:
fifo starves by design, fair is round-robin).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.scheduling.guards import WaitBounds
from backend.scheduling.policies.oracle import TrueCurve
from backend.scheduling.registry import (
    DEFAULT_POLICY,
    POLICIES,
    SIMULATION_ONLY,
    live_policy_names,
    make_policy,
    policy_runs,
)
from backend.scheduling.types import Grant, JobView, LossPoint, Policy, Snapshot, TenantView

ALL_POLICIES = sorted(POLICIES)
CURVE_LENGTH = 400


def curve(job_id: int) -> list[float]:
    """A deterministic, job-specific decaying curve (the oracle's truth)."""
    rate = 0.9 + 0.02 * (job_id % 5)
    floor = 0.1 * (job_id % 3)
    return [floor + (1 + job_id % 4) * rate**k for k in range(1, CURVE_LENGTH + 1)]


def history(job_id: int, done: int, spi: float = 0.01) -> tuple[LossPoint, ...]:
    losses = curve(job_id)
    return tuple(LossPoint(k + 1, losses[k], spi) for k in range(done))


def job(job_id: int, *, tenant: int = 1, done: int = 0, running: bool = False,
        waiting_since: float = 0.0, attained: float | None = None) -> JobView:
    return JobView(
        job_id=job_id, tenant_id=tenant, submitted_at=float(job_id) * 0.1,
        iterations_done=done, max_iterations=CURVE_LENGTH, losses=history(job_id, done),
        running=running, waiting_since=waiting_since,
        attained_seconds=attained if attained is not None else done * 0.01,
        chunks_run=math.ceil(done / 100),
    )


def build(name: str, snapshot: Snapshot) -> Policy:
    if name in SIMULATION_ONLY:
        truth = {j.job_id: TrueCurve(curve(j.job_id)[0] * 1.1, curve(j.job_id),
                                     [0.01] * CURVE_LENGTH) for j in snapshot.jobs}
        return make_policy(name, true_curves=truth)
    return make_policy(name)


def snap(jobs: list[JobView], *, free: int, total: int = 4, now: float = 10.0,
         tenants: dict[int, TenantView] | None = None) -> Snapshot:
    return Snapshot(now=now, free_slots=free, total_slots=total, chunk_seconds=1.0,
                    jobs=jobs, tenants=tenants or {})


def assert_hard_limits(snapshot: Snapshot, grants: list[Grant]) -> None:
    assert len(grants) <= max(snapshot.free_slots, 0)
    ids = [g.job_id for g in grants]
    assert len(ids) == len(set(ids)), "at most one chunk per job"
    by_id = {j.job_id: j for j in snapshot.jobs}
    used = snapshot.running_by_tenant()
    for g in grants:
        assert g.job_id in by_id
        assert not by_id[g.job_id].running, "no grant for a running job"
        assert 1 <= g.iterations <= by_id[g.job_id].remaining_iterations
        assert g.reason
        tenant = by_id[g.job_id].tenant_id
        used[tenant] = used.get(tenant, 0) + 1
        assert used[tenant] <= snapshot.tenant(tenant).max_slots, "tenant over quota"


def test_registry_names_and_default() -> None:
    assert {"fifo", "fair", "las", "slaq", "slaq-classic", "oracle"} <= set(POLICIES)
    assert "oracle" not in live_policy_names()
    assert DEFAULT_POLICY == "slaq"
    with pytest.raises(KeyError, match="unknown policy"):
        make_policy("nope")
    with pytest.raises(ValueError, match="simulation-only"):
        make_policy("oracle")


def test_policy_runs_label_a_guarded_policy_by_its_guard_unless_in_force() -> None:
    runs = policy_runs(["fair", "slaq", "oracle"], [0.25, 0.6], in_force=0.25)
    assert [(r.label, r.policy, r.completion_guard) for r in runs] == [
        ("fair", "fair", None), ("slaq", "slaq", 0.25), ("slaq (guard 0.6)", "slaq", 0.6),
        ("oracle", "oracle", 0.25), ("oracle (guard 0.6)", "oracle", 0.6)]
    # No guard asked for: each policy once, at the guard in force or its default.
    assert [tuple(r) for r in policy_runs(["las", "slaq"], in_force=0.4)] == [
        ("las", "las", None, None), ("slaq", "slaq", 0.4, None)]
    assert [r.label for r in policy_runs(["slaq"], [1.0])] == ["slaq (guard 1)"]


def test_policy_runs_run_slaq_once_per_guard_and_weight() -> None:
    runs = policy_runs(["slaq", "oracle"], [0.25, 0.6], in_force=0.25, weights=[0, 0.01],
                       weight_in_force=0.0)
    assert [(r.label, r.completion_guard, r.completion_weight) for r in runs] == [
        ("slaq", 0.25, 0), ("slaq (weight 0.01)", 0.25, 0.01),
        ("slaq (guard 0.6)", 0.6, 0), ("slaq (guard 0.6, weight 0.01)", 0.6, 0.01),
        # oracle has no completion term: once per guard.
        ("oracle", 0.25, None), ("oracle (guard 0.6)", 0.6, None)]
    # No weight asked for: slaq at the one in force, labelled by its name.
    assert [(r.label, r.completion_weight) for r in policy_runs(["slaq"], weight_in_force=0.05)
            ] == [("slaq", 0.05)]


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_no_free_slots_no_grants(name: str) -> None:
    s = snap([job(1), job(2, done=50)], free=0)
    assert build(name, s).allocate(s) == []


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_fills_free_slots_and_skips_running(name: str) -> None:
    jobs = [job(1, done=30), job(2, done=60), job(3), job(4, done=10, running=True),
            job(5, done=200)]
    s = snap(jobs, free=3, total=4)
    grants = build(name, s).allocate(s)
    assert_hard_limits(s, grants)
    assert len(grants) == 3, "work-conserving: every free slot used while jobs wait"
    assert 4 not in {g.job_id for g in grants}


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_tenant_quota_counts_running_chunks(name: str) -> None:
    tenants = {1: TenantView(1, max_slots=1), 2: TenantView(2, max_slots=2)}
    jobs = [job(1, tenant=1, running=True, done=20), job(2, tenant=1), job(3, tenant=1, done=5),
            job(4, tenant=2, done=40), job(5, tenant=2), job(6, tenant=2, done=90)]
    s = snap(jobs, free=3, tenants=tenants)
    grants = build(name, s).allocate(s)
    assert_hard_limits(s, grants)
    assert {g.job_id for g in grants} <= {4, 5, 6}
    assert len(grants) == 2


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_single_slot_single_grant(name: str) -> None:
    s = snap([job(i, done=i * 20) for i in range(1, 7)], free=1, total=1)
    grants = build(name, s).allocate(s)
    assert_hard_limits(s, grants)
    assert len(grants) == 1


BOUNDED = [n for n in ALL_POLICIES if hasattr(build(n, snap([], free=1)), "bounds")]


def test_bounded_policies_are_the_predictive_ones() -> None:
    assert {"slaq", "slaq-classic", "las", "oracle"} <= set(BOUNDED)


@pytest.mark.parametrize("name", BOUNDED)
def test_new_job_granted_within_warmup_bound(name: str) -> None:
    now = 100.0
    bound = WaitBounds().warmup_seconds(snap([], free=1))
    assert bound is not None
    # Fresh-history jobs with large gains compete with one new job that has
    # waited exactly the warm-up bound; the new job must get the only slot.
    jobs = [job(i, done=3, waiting_since=now - 1, attained=0.0) for i in range(1, 6)]
    jobs.append(job(9, waiting_since=now - bound))
    s = snap(jobs, free=1, total=4, now=now)
    grants = build(name, s).allocate(s)
    assert [g.job_id for g in grants] == [9]
    assert "warm-up" in grants[0].reason


@pytest.mark.parametrize("name", BOUNDED)
def test_no_job_waits_past_starvation_bound(name: str) -> None:
    now = 500.0
    bound = WaitBounds().starvation_seconds(snap([], free=1))
    assert bound is not None
    # Job 1 has converged (tiny predicted gain, most attained service) and has
    # waited past the bound; steep new and young jobs compete for one slot.
    jobs = [job(1, done=390, waiting_since=now - bound - 1),
            job(2, done=5, waiting_since=now - 1), job(3, waiting_since=now - 0.5)]
    s = snap(jobs, free=1, total=2, now=now)
    grants = build(name, s).allocate(s)
    assert [g.job_id for g in grants] == [1]
    assert "starvation" in grants[0].reason


jobs_strategy = st.lists(
    st.tuples(
        st.integers(1, 3),              # tenant
        st.integers(0, CURVE_LENGTH - 1),  # iterations done
        st.booleans(),                  # running
        st.floats(0, 200),              # seconds waited
    ),
    max_size=10,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=jobs_strategy, free=st.integers(0, 5), quotas=st.lists(st.integers(1, 4),
       min_size=3, max_size=3))
@pytest.mark.parametrize("name", ALL_POLICIES)
def test_property_hard_limits_and_bounds(
    name: str, spec: list[tuple[int, int, bool, float]], free: int, quotas: list[int]
) -> None:
    now = 1000.0
    jobs = [job(i, tenant=t, done=d, running=r, waiting_since=now - w)
            for i, (t, d, r, w) in enumerate(spec)]
    tenants = {t: TenantView(t, max_slots=q) for t, q in zip((1, 2, 3), quotas, strict=True)}
    s = snap(jobs, free=free, total=max(free, 1) + sum(j.running for j in jobs), now=now,
             tenants=tenants)
    policy = build(name, s)
    grants = policy.allocate(s)
    assert_hard_limits(s, grants)
    bounds = getattr(policy, "bounds", None)
    if bounds is None:
        return
    granted = {g.job_id for g in grants}
    used = s.running_by_tenant()
    for g in grants:
        t = next(j.tenant_id for j in jobs if j.job_id == g.job_id)
        used[t] = used.get(t, 0) + 1
    overdue = {j.job_id for j in s.waiting() if bounds.overdue_reason(s, j)}
    for j in s.waiting():
        if j.job_id in overdue and j.job_id not in granted:
            blocked = used.get(j.tenant_id, 0) >= s.tenant(j.tenant_id).max_slots
            # An overdue job may only wait if its tenant is at quota or every
            # free slot went to another overdue job.
            assert blocked or (len(grants) == free and granted <= overdue)


def test_explain_waiting_ranks_every_waiting_job() -> None:
    from backend.scheduling.explain import explain_waiting

    tenants = {1: TenantView(1, max_slots=1), 2: TenantView(2, max_slots=4)}
    jobs = [job(1, tenant=1, running=True, done=20), job(2, tenant=1, done=10),
            job(3, tenant=2, done=300), job(4, tenant=2, done=5)]
    s = snap(jobs, free=0, tenants=tenants)
    # No service floor: every job here is old enough to be "behind" it, which
    # would hide the ranking this test is about.
    reasons = explain_waiting(make_policy("slaq", floor=None), s)
    assert set(reasons) == {2, 3, 4}
    assert reasons[2].at_quota and "slots" in reasons[2].reason
    # Places in one ranking of all four active jobs (the running one too).
    positions = sorted(r.position for r in reasons.values())
    assert len(set(positions)) == 3 and positions[0] >= 1 and positions[-1] <= 4, positions
    assert all(r.ahead == r.position - 1 for r in reasons.values())
    assert reasons[4].position < reasons[3].position, "steep young job ahead of a flat tail"
    assert reasons[4].predicted_gain is not None
