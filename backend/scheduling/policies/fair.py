"""Weighted fair sharing: tenants by share weight, then round-robin of jobs."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from backend.scheduling.allocation import fill_slots
from backend.scheduling.types import Grant, JobView, Snapshot

REASON = "fair share: longest-waiting job of the least-served tenant"


class FairPolicy:
    """Give each slot to the tenant furthest below its weighted share, and
    within a tenant to the job that has waited longest (round-robin).

    Example: two free slots, tenant A (weight 1) with jobs 1 and 2 waiting
    since t=3 and t=1, tenant B (weight 1) with job 3 waiting since t=2,
    nothing running -> grants for job 2 (A's longest waiter) and job 3 (B is
    now furthest below its share); job 1 waits for the next round.
    """

    name = "fair"

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        return fill_slots(snapshot, self._order(snapshot))

    def _order(self, snapshot: Snapshot) -> Iterator[tuple[JobView, str, float | None]]:
        # Lazy: fill_slots stops pulling once the free slots are used, so a
        # round costs one sort of the waiting jobs plus O(slots log tenants).
        queues: dict[int, deque[JobView]] = {}
        for job in sorted(snapshot.waiting(), key=lambda j: (j.waiting_since, j.job_id)):
            queues.setdefault(job.tenant_id, deque()).append(job)
        running = snapshot.running_by_tenant()
        heap = [(running.get(t, 0) / snapshot.tenant(t).share_weight, t) for t in queues]
        heapq.heapify(heap)
        while heap:
            load, tenant_id = heapq.heappop(heap)
            queue = queues[tenant_id]
            yield queue.popleft(), REASON, None
            if queue:
                heapq.heappush(heap, (load + 1.0 / snapshot.tenant(tenant_id).share_weight,
                                      tenant_id))
