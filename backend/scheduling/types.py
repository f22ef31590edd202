"""Immutable inputs and outputs of a scheduling policy.

A policy sees only a :class:`Snapshot` and returns :class:`Grant` objects. The
live scheduler builds snapshots from the database and Redis; the simulator
builds them from a simulated clock and recorded loss curves. Nothing in this
package imports FastAPI, SQL, Redis or Celery.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class LossPoint:
    """One reported training step: iteration number (1-based), loss, and the
    seconds that iteration took."""

    iteration: int
    loss: float
    seconds: float


@dataclass(frozen=True)
class JobView:
    """What a policy may know about one runnable (queued or running) job.

    ``losses`` is the job's loss history, oldest first; it may be a suffix of
    the full history for very long jobs, but always ends at the latest point.
    ``running`` is true while a chunk of this job is in flight: a policy must
    not grant it another one.
    """

    job_id: int
    tenant_id: int
    submitted_at: float
    iterations_done: int
    max_iterations: int
    losses: Sequence[LossPoint] = ()
    running: bool = False
    attained_seconds: float = 0.0
    waiting_since: float = 0.0
    chunks_run: int = 0
    initial_loss: float | None = None
    # Seconds per iteration of similar jobs (same algorithm and dataset), for
    # sizing a first chunk by time before the job has measured its own speed.
    estimated_seconds_per_iteration: float | None = None

    @property
    def seconds_per_iteration(self) -> float | None:
        """Mean measured seconds per iteration over the recent history."""
        recent = self.losses[-50:]
        if not recent:
            return None
        total = sum(p.seconds for p in recent)
        return max(total / len(recent), 1e-6)

    @property
    def remaining_iterations(self) -> int:
        return max(self.max_iterations - self.iterations_done, 0)


@dataclass(frozen=True)
class TenantView:
    """A tenant's scheduling limits: ``max_slots`` chunks in flight at once and
    a share weight (relative entitlement under fair-style policies)."""

    tenant_id: int
    max_slots: int
    share_weight: float = 1.0


@dataclass(frozen=True)
class Snapshot:
    """Everything a policy may look at for one decision round."""

    now: float
    free_slots: int
    total_slots: int
    chunk_seconds: float
    jobs: Sequence[JobView]
    tenants: Mapping[int, TenantView] = field(default_factory=dict)
    default_chunk_iterations: int = 10

    def tenant(self, tenant_id: int) -> TenantView:
        """The tenant's limits; an unknown tenant is capped at every slot."""
        found = self.tenants.get(tenant_id)
        if found is None:
            return TenantView(tenant_id=tenant_id, max_slots=self.total_slots)
        return found

    def running_by_tenant(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for job in self.jobs:
            if job.running:
                counts[job.tenant_id] = counts.get(job.tenant_id, 0) + 1
        return counts

    def waiting(self) -> list[JobView]:
        return [job for job in self.jobs if not job.running and job.remaining_iterations > 0]


@dataclass(frozen=True)
class Grant:
    """Permission for one chunk: run ``iterations`` iterations of ``job_id``.

    ``reason`` is a sentence a user can read ("largest predicted gain ...");
    ``predicted_gain`` is the normalised loss drop the policy expects, if it
    predicts one.
    """

    job_id: int
    iterations: int
    reason: str
    predicted_gain: float | None = None


class Policy(Protocol):
    """A scheduling policy: a pure function from a snapshot to grants.

    Implementations must return at most ``snapshot.free_slots`` grants, at
    most one per job, none for a running job, and never exceed a tenant's
    ``max_slots`` counting the tenant's chunks already in flight.
    """

    name: str

    def allocate(self, snapshot: Snapshot) -> list[Grant]: ...
