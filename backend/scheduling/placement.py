"""Placement: which pool of worker slots runs a granted chunk.

The policy decides *which jobs* deserve the free slots (a ranking); placement
decides *where* each of them can run. Worker slots belong to pools (``cpu``,
``gpu``, ``tenant-acme``...), each with the resources its workers advertise,
and a pool may be reserved for named tenants. A job declares requirements
(a GPU, a minimum memory, a named pool) and, softly, a preference for GPUs
(the torch trainers). Keeping placement apart from the policy lets every
policy run unchanged on a heterogeneous cluster, live and in the simulator.

With no pools in the snapshot the cluster is one undifferentiated pool and
placement is the identity: every grant is placed on pool ``""`` (the only one).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence

from backend.scheduling.types import (
    Grant,
    JobView,
    PoolView,
    Requirements,
    Snapshot,
)
from backend.scheduling.waiting import PoolWait
from backend.scheduling.waiting_words import pool_reason

__all__ = ["PoolView", "Requirements", "place", "pool_waits", "refusal", "waiting_for_pool"]


def requirements_from(data: Mapping[str, object]) -> Requirements:
    """A job's stored requirements (validated at submit) as :class:`Requirements`."""
    memory = data.get("min_memory_mb")
    pool = data.get("pool")
    return Requirements(gpu=bool(data.get("gpu", False)),
                        min_memory_mb=int(memory) if isinstance(memory, int | float) else 0,
                        pool=str(pool) if pool else None,
                        prefer_gpu=bool(data.get("prefer_gpu", False)))


def ineligibility(pool: PoolView, needs: Requirements, tenant_id: int) -> str | None:
    """Why ``pool`` can never run such a job for ``tenant_id``; ``None`` if it can."""
    if needs.pool is not None and pool.name != needs.pool:
        return f"the job asks for pool {needs.pool}"
    if pool.reserved_for and tenant_id not in pool.reserved_for:
        return f"pool {pool.name} is reserved for other teams"
    if needs.gpu and not pool.has_gpu:
        return f"pool {pool.name} has no GPU"
    if needs.min_memory_mb and pool.memory_mb and pool.memory_mb < needs.min_memory_mb:
        return (f"pool {pool.name} has {pool.memory_mb} MiB of memory, the job needs "
                f"{needs.min_memory_mb}")
    return None


def eligible_pools(pools: Iterable[PoolView], needs: Requirements,
                   tenant_id: int) -> list[PoolView]:
    return [p for p in pools if ineligibility(p, needs, tenant_id) is None]


def refusal(pools: Sequence[PoolView], needs: Requirements, tenant_id: int) -> str | None:
    """A sentence saying why no known pool can ever run the job, or ``None``.

    Used at submit: a job that could only wait forever is refused instead.
    """
    if eligible_pools(pools, needs, tenant_id):
        return None
    if needs.pool is not None and all(p.name != needs.pool for p in pools):
        known = ", ".join(sorted(p.name for p in pools)) or "none"
        return f"there is no worker pool named {needs.pool!r} (pools: {known})"
    open_to_tenant = [p for p in pools if not p.reserved_for or tenant_id in p.reserved_for]
    what = []
    if needs.gpu:
        what.append("a GPU")
    if needs.min_memory_mb:
        what.append(f"{needs.min_memory_mb} MiB of memory")
    if needs.pool is not None:
        what.append(f"pool {needs.pool}")
    described = "; ".join(p.describe() for p in open_to_tenant) or "none"
    return (f"no worker pool your team may use offers {' and '.join(what) or 'a slot'}: "
            f"the pools open to your team are {described}")


def _pool_order(pool: PoolView, free: int, needs: Requirements,
                tenant_id: int) -> tuple[int, int, int, str]:
    # GPU jobs to GPU pools and other jobs elsewhere first; a team's own
    # reserved pool before shared ones, so shared slots stay for others; then
    # the emptiest pool (``free`` slots left this round), to spread load across hosts.
    mismatch = int(needs.wants_gpu != pool.has_gpu)
    shared = int(tenant_id not in pool.reserved_for)
    return mismatch, shared, -free, pool.name


def place(snapshot: Snapshot, grants: Sequence[Grant]) -> list[tuple[Grant, str]]:
    """Match ranked ``grants`` to free slots of eligible pools, in rank order.

    A grant no eligible pool has a free slot for (or whose tenant is at its
    quota in every such pool) is left out: its job keeps waiting. A job that
    does not want a GPU takes a GPU pool's slot only when no waiting job that
    wants a GPU could use it: each GPU pool keeps as many of its free slots as
    there are waiting GPU-wanting jobs (ranked or not) that may start there
    now, counting each tenant's per-pool and overall quota. So CPU work fills
    idle GPUs without keeping GPU jobs from them.

    Example: pools ``cpu`` (0 free) and ``gpu`` (3 free), one waiting job that
    wants a GPU, grants for CPU jobs 1, 2, 3 -> jobs 1 and 2 go to ``gpu``;
    job 3 waits, as the third GPU slot is kept for the GPU job.
    """
    if not snapshot.pools:
        return [(grant, "") for grant in grants]
    free = {p.name: p.free for p in snapshot.pools}
    jobs, in_flight, in_total = _tally(snapshot)
    # Counted only when a job that does not want a GPU could take a free GPU
    # slot (a pass over every waiting job); GPU jobs placed before that are
    # taken off the count then.
    gpu_waiting: dict[tuple[int, str], int] | None = None
    placed_gpu: list[JobView] = []

    def held(pool: str) -> int:
        nonlocal gpu_waiting
        if gpu_waiting is None:
            gpu_waiting = _gpu_waiting(snapshot)
            for done in placed_gpu:
                _no_longer_waiting(snapshot, gpu_waiting, done)
        return _held_for_gpu(snapshot, pool, gpu_waiting, in_flight, in_total)

    placed: list[tuple[Grant, str]] = []
    for grant in grants:
        job = jobs.get(grant.job_id)
        if job is None or job.running:
            continue
        needs = job.requirements
        candidates = [
            p for p in eligible_pools(snapshot.pools, needs, job.tenant_id)
            if free[p.name] > 0 and _under_quota(snapshot, in_flight, job.tenant_id, p.name)
            and (needs.wants_gpu or not p.has_gpu or free[p.name] > held(p.name))]
        if not candidates:
            continue
        best = min(candidates, key=lambda p: _pool_order(p, free[p.name], needs, job.tenant_id))
        free[best.name] -= 1
        key = (job.tenant_id, best.name)
        in_flight[key] = in_flight.get(key, 0) + 1
        in_total[job.tenant_id] = in_total.get(job.tenant_id, 0) + 1
        if needs.wants_gpu:
            # Placed (on a GPU or, falling back, elsewhere): it waits no more.
            if gpu_waiting is None:
                placed_gpu.append(job)
            else:
                _no_longer_waiting(snapshot, gpu_waiting, job)
        placed.append((grant, best.name))
    return placed


def _no_longer_waiting(snapshot: Snapshot, gpu_waiting: dict[tuple[int, str], int],
                       job: JobView) -> None:
    for pool in snapshot.pools:
        counted = (job.tenant_id, pool.name)
        if counted in gpu_waiting and pool.has_gpu and ineligibility(
                pool, job.requirements, job.tenant_id) is None:
            gpu_waiting[counted] -= 1


def _tally(snapshot: Snapshot) -> tuple[dict[int, JobView], dict[tuple[int, str], int],
                                        dict[int, int]]:
    """The jobs by id and chunks in flight per (tenant, pool) and per tenant;
    every round over thousands of jobs, so the running ones are picked by a
    comprehension first."""
    jobs = {job.job_id: job for job in snapshot.jobs}
    in_flight: dict[tuple[int, str], int] = {}
    in_total: dict[int, int] = {}
    for job in [j for j in snapshot.jobs if j.running]:
        key = (job.tenant_id, job.pool or "")
        in_flight[key] = in_flight.get(key, 0) + 1
        in_total[job.tenant_id] = in_total.get(job.tenant_id, 0) + 1
    return jobs, in_flight, in_total


def _gpu_waiting(snapshot: Snapshot) -> dict[tuple[int, str], int]:
    """Waiting jobs that want a GPU, per (tenant, GPU pool they may run on);
    eligibility is judged once per (tenant, requirements), not per job."""
    gpu_waiting: dict[tuple[int, str], int] = {}
    gpu_pools = [p for p in snapshot.pools if p.has_gpu]
    if not gpu_pools:
        return gpu_waiting
    # (tenant, requirements' fields) -> how many wait; then eligibility per kind.
    kinds: dict[tuple[int, bool, int, str | None], int] = {}
    for job in snapshot.jobs:
        needs = job.requirements
        if (needs.gpu or needs.prefer_gpu) and not job.running \
                and job.iterations_done < job.max_iterations:
            kind = (job.tenant_id, needs.gpu, needs.min_memory_mb, needs.pool)
            kinds[kind] = kinds.get(kind, 0) + 1
    for (tenant_id, gpu, memory, pool_name), count in kinds.items():
        needs = Requirements(gpu=gpu, min_memory_mb=memory, pool=pool_name, prefer_gpu=not gpu)
        for pool in gpu_pools:
            if ineligibility(pool, needs, tenant_id) is None:
                key = (tenant_id, pool.name)
                gpu_waiting[key] = gpu_waiting.get(key, 0) + count
    return gpu_waiting


def _held_for_gpu(snapshot: Snapshot, pool: str, gpu_waiting: Mapping[tuple[int, str], int],
                  in_flight: Mapping[tuple[int, str], int], in_total: Mapping[int, int]) -> int:
    """Free slots of GPU pool ``pool`` kept for waiting GPU-wanting jobs: those
    that could start there now (their tenant below its quota in the pool and
    overall)."""
    held = 0
    for (tenant_id, name), count in gpu_waiting.items():
        if name != pool or count <= 0:
            continue
        limits = snapshot.tenant(tenant_id)
        room = min(limits.pool_slots.get(pool, snapshot.total_slots)
                   - in_flight.get((tenant_id, pool), 0),
                   limits.max_slots - in_total.get(tenant_id, 0))
        held += max(0, min(count, room))
    return held


def _under_quota(snapshot: Snapshot, in_flight: Mapping[tuple[int, str], int], tenant_id: int,
                 pool: str) -> bool:
    # A pool without a per-pool quota is bounded only by max_slots, which the
    # limits check (allocation.split_grants) enforces across all pools.
    limit = snapshot.tenant(tenant_id).pool_slots.get(pool)
    return limit is None or in_flight.get((tenant_id, pool), 0) < limit


def running_by_tenant_pool(jobs: Iterable[JobView]) -> dict[tuple[int, str], int]:
    counts: dict[tuple[int, str], int] = {}
    for job in jobs:
        if job.running:
            key = (job.tenant_id, job.pool or "")
            counts[key] = counts.get(key, 0) + 1
    return counts


def waiting_for_pool(snapshot: Snapshot, job: JobView) -> str | None:
    """Why ``job`` waits for a pool ("waiting for a GPU slot: 0 of 1 free"),
    or ``None`` when the pools are not what holds it back: the words of
    :func:`pool_waits`' facts.

    A job that does not want a GPU cannot count the free slots of a GPU pool
    that :func:`place` keeps for waiting GPU jobs: the message says so.
    """
    found = pool_waits(snapshot, [job]).get(job.job_id)
    return None if found is None else pool_reason(found)


def pool_waits(snapshot: Snapshot, jobs: Iterable[JobView]) -> dict[int, PoolWait]:
    """What holds each of ``jobs`` back in the pools, for the jobs the pools
    (not the ranking) hold back; counts what is in flight once."""
    if not snapshot.pools:
        return {}
    in_flight = running_by_tenant_pool(snapshot.jobs)

    @functools.cache
    def gpu_counts() -> tuple[dict[tuple[int, str], int], dict[int, int]]:
        # Waiting GPU jobs and chunks per tenant: counted once, and only when
        # some job could be kept off a GPU pool's free slots.
        return _gpu_waiting(snapshot), snapshot.running_by_tenant()

    found = {}
    for job in jobs:
        why = _pool_wait(snapshot, job, in_flight, gpu_counts)
        if why is not None:
            found[job.job_id] = why
    return found


def _pool_wait(
        snapshot: Snapshot, job: JobView, in_flight: Mapping[tuple[int, str], int],
        gpu_counts: Callable[[], tuple[dict[tuple[int, str], int], dict[int, int]]],
) -> PoolWait | None:
    pools = eligible_pools(snapshot.pools, job.requirements, job.tenant_id)
    quota: Mapping[str, int] = snapshot.tenant(job.tenant_id).pool_slots
    usable = [p for p in pools if _under_quota(snapshot, in_flight, job.tenant_id, p.name)]
    live = [p for p in snapshot.pools if p.slots > 0]
    if live and len(usable) == len(live) and all(p.free == 0 for p in live):
        # Every live pool would do and every one is busy: the job waits for
        # the ranking, as on a cluster without pools, not for a pool.
        return None
    if not pools:
        return PoolWait("no_pool")
    if not usable:
        return PoolWait("pool_quota",
                        limits=tuple((p.name, quota[p.name]) for p in pools if p.name in quota))
    kept: list[PoolView] = []
    if not job.requirements.wants_gpu and any(p.has_gpu and p.free > 0 for p in usable):
        gpu_waiting, in_total = gpu_counts()
        kept = [p for p in usable if p.has_gpu and p.free > 0
                and p.free <= _held_for_gpu(snapshot, p.name, gpu_waiting, in_flight, in_total)]
    if any(p.free > 0 and p not in kept for p in usable):
        return None
    full = [p for p in usable if p not in kept]
    return PoolWait("busy", full=tuple(p.name for p in full), free=sum(p.free for p in full),
                    slots=sum(p.slots for p in full), kept=tuple(p.name for p in kept),
                    kept_free=sum(p.free for p in kept), gpu=bool(job.requirements.gpu))
