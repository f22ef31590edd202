"""Shared slot-filling rules every policy obeys.

Policies differ only in the order in which they want jobs served; this module
turns such an order into grants while honouring the hard limits: free slots,
one chunk per job, and each tenant's concurrent-slot quota.
"""

from __future__ import annotations

from collections.abc import Iterable

from backend.scheduling.types import Grant, JobView, Snapshot

MIN_CHUNK_ITERATIONS = 1


def chunk_iterations(snapshot: Snapshot, job: JobView) -> int:
    """Iterations that fill about ``snapshot.chunk_seconds`` for ``job``.

    A job with no timing yet gets the snapshot's default chunk length, so its
    first chunk both makes progress and measures its speed.
    """
    spi = job.seconds_per_iteration
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
