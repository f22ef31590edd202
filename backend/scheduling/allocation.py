"""Shared slot-filling rules every policy obeys, and the check that they did.

Policies differ only in the order in which they want jobs served; this module
turns such an order into grants while honouring the hard limits: free slots,
one chunk per job, and each tenant's concurrent-slot quota.
:func:`split_grants` checks any policy's grants against those same limits; the
simulator and the live scheduler both call it, so a policy that breaks a limit
fails a simulation loudly and, live, loses only its offending grants.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from backend.scheduling.types import Grant, JobView, Snapshot

MIN_CHUNK_ITERATIONS = 1


def chunk_iterations(snapshot: Snapshot, job: JobView) -> int:
    """Iterations that fill about ``snapshot.chunk_seconds`` for ``job``.

    A job with no timing of its own is sized from similar jobs' speed
    (``estimated_seconds_per_iteration``); only with neither does it get the
    snapshot's default chunk length, so its first chunk both makes progress and
    measures its speed.
    """
    spi = job.seconds_per_iteration or job.estimated_seconds_per_iteration
    wanted = (snapshot.default_chunk_iterations if spi is None
              else int(snapshot.chunk_seconds / spi))
    return max(MIN_CHUNK_ITERATIONS, min(wanted, job.remaining_iterations))


def fill_slots(
    snapshot: Snapshot,
    ordered: Iterable[tuple[JobView, str, float | None]],
) -> list[Grant]:
    """Grant chunks to ``ordered`` (job, reason, predicted gain) in order.

    Skips running or finished jobs, jobs already granted, and jobs whose
    tenant is at its slot quota; stops when the free slots are used up.
    """
    grants: list[Grant] = []
    if snapshot.free_slots <= 0:
        return grants
    in_flight = snapshot.running_by_tenant()
    granted: set[int] = set()
    for job, reason, gain in ordered:
        if len(grants) >= snapshot.free_slots:
            break
        if job.running or job.job_id in granted or job.remaining_iterations <= 0:
            continue
        used = in_flight.get(job.tenant_id, 0)
        if used >= snapshot.tenant(job.tenant_id).max_slots:
            continue
        in_flight[job.tenant_id] = used + 1
        granted.add(job.job_id)
        grants.append(
            Grant(
                job_id=job.job_id,
                iterations=chunk_iterations(snapshot, job),
                reason=reason,
                predicted_gain=gain,
            )
        )
    return grants


Rejected = tuple[Grant, str]
"""A grant that breaks a hard limit, with the reason it was refused."""


def split_grants(snapshot: Snapshot, grants: Sequence[Grant]) -> tuple[list[Grant], list[Rejected]]:
    """Grants within the hard limits (in the policy's order), and the rest with reasons.

    The limits are the ones :class:`~backend.scheduling.types.Policy` promises:
    at most ``snapshot.free_slots`` grants, at least one iteration each, one per
    job, none for an unknown or running job, and no tenant over its
    ``max_slots`` counting its chunks already in flight. Grants are judged in
    order; a refused grant takes no slot and no quota, so one bad grant does
    not cost a later valid one its place.

    Example: 1 free slot and grants for waiting jobs 4 and 5 -> ``([grant 4],
    [(grant 5, "grant 2 of 2 exceeds the 1 free slots")])``.
    """
    by_id = {job.job_id: job for job in snapshot.jobs}
    in_flight = snapshot.running_by_tenant()
    granted: set[int] = set()
    ok: list[Grant] = []
    rejected: list[Rejected] = []
    for number, grant in enumerate(grants, start=1):
        job = by_id.get(grant.job_id)
        if len(ok) >= snapshot.free_slots:
            reason = f"grant {number} of {len(grants)} exceeds the {snapshot.free_slots} free slots"
        elif job is None:
            reason = f"invalid grant {grant}: job {grant.job_id} is not runnable"
        else:
            violation = _violation(snapshot, grant, job, granted, in_flight)
            if violation is None:
                in_flight[job.tenant_id] = in_flight.get(job.tenant_id, 0) + 1
                granted.add(grant.job_id)
                ok.append(grant)
                continue
            reason = violation
        rejected.append((grant, reason))
    return ok, rejected


def _violation(snapshot: Snapshot, grant: Grant, job: JobView, granted: set[int],
               in_flight: dict[int, int]) -> str | None:
    if job.running:
        return f"invalid grant {grant}: job {job.job_id} already has a chunk in flight"
    if job.job_id in granted:
        return f"invalid grant {grant}: a second grant for job {job.job_id}"
    if grant.iterations < 1:
        return f"invalid grant {grant}: fewer than one iteration"
    quota = snapshot.tenant(job.tenant_id).max_slots
    if in_flight.get(job.tenant_id, 0) >= quota:
        return f"tenant {job.tenant_id} over its slot quota ({quota})"
    return None
