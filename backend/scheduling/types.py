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

# LossPoint is defined with the arrays that hold it; most code imports it from here.
from backend.scheduling.loss_history import EMPTY, LossHistory
from backend.scheduling.loss_history import LossPoint as LossPoint

LIVE_HISTORY_POINTS = 400
"""A job's newest loss points the live scheduler keeps in memory, so all a
policy sees of its history live (with its initial loss): bounded memory with
10,000 jobs. The simulator shows the same with ``SimConfig.history_points``."""


@dataclass(frozen=True)
class Requirements:
    """What a job needs of the slot that runs it.

    ``gpu``, ``min_memory_mb`` and ``pool`` are hard: a pool lacking them never
    runs the job. ``prefer_gpu`` is soft: the job goes to a GPU pool when one
    has a free slot, and to any other eligible pool otherwise.
    """

    gpu: bool = False
    min_memory_mb: int = 0
    pool: str | None = None
    prefer_gpu: bool = False

    @property
    def wants_gpu(self) -> bool:
        return self.gpu or self.prefer_gpu


@dataclass(frozen=True)
class PoolView:
    """One pool as the scheduler sees it this round.

    ``slots`` are the pool's live worker slots and ``free`` those without a
    chunk. Resources are those of the pool's smallest worker, so a job that
    fits the pool fits whichever of its workers takes the chunk.
    ``reserved_for`` names the tenants (by id) that may use it; empty: all.
    """

    name: str
    slots: int = 0
    free: int = 0
    gpu: str | None = None
    gpu_memory_mb: int = 0
    memory_mb: int = 0
    cores: int = 0
    reserved_for: frozenset[int] = field(default_factory=frozenset)

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu)

    def describe(self) -> str:
        parts = [f"{self.cores} cores" if self.cores else "",
                 f"{self.memory_mb / 1024:.0f} GiB" if self.memory_mb else "",
                 f"GPU {self.gpu}" if self.gpu else "no GPU"]
        return f"{self.name} ({', '.join(p for p in parts if p)})"


@dataclass(frozen=True)
class JobView:
    """What a policy may know about one runnable (queued or running) job.

    ``losses`` is the job's loss history, oldest first; it may be a suffix of
    the full history for very long jobs, but always ends at the latest point.
    Any sequence of points may be passed; ``history`` holds the same points
    as arrays (the same object as ``losses`` when a :class:`LossHistory` was
    passed, as the live scheduler and the simulator do).
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
    requirements: Requirements = field(default_factory=Requirements)
    # The pool running the job's chunk in flight (``None`` when none is).
    pool: str | None = None
    # The experiment (sweep) the job is a configuration of, if any.
    experiment_id: int | None = None
    # Measured seconds a move to another slot costs it (build, restore, save); 0 unknown.
    switch_seconds: float = 0.0
    # Moves so far: starts on a slot after its first (each paid a switch).
    moves: int = 0
    history: LossHistory = field(default=EMPTY, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        history = LossHistory.of(self.losses)
        object.__setattr__(self, "history", history)
        object.__setattr__(self, "losses", history)

    @property
    def seconds_per_iteration(self) -> float | None:
        """Mean measured seconds per iteration over the recent history."""
        mean = self.history.mean_seconds(50)
        return None if mean is None else max(mean, 1e-6)

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
    # Slots the tenant may hold at once in a named pool (e.g. GPU slots);
    # pools not named are limited only by ``max_slots``.
    pool_slots: Mapping[str, int] = field(default_factory=dict)


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
    # The worker pools and their free slots; empty: one undifferentiated pool.
    pools: Sequence[PoolView] = ()
    # Jobs whose trainer is loaded on a slot that is free now: granting one of
    # them costs no switch. Empty where residency is not modelled.
    resident: frozenset[int] = frozenset()

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
    predicts one. ``yield_after``: a chunk lengthened while slots stayed idle
    ends after this many iterations once a job waits for a slot
    (:func:`backend.scheduling.residency.unhurried`); ``None``: it runs out.
    """

    job_id: int
    iterations: int
    reason: str
    predicted_gain: float | None = None
    # The pool placement put it on; policies leave it empty.
    pool: str = ""
    yield_after: int | None = None


class Policy(Protocol):
    """A scheduling policy: a pure function from a snapshot to grants.

    Implementations must return at most ``snapshot.free_slots`` grants, at
    most one per job, none for a running job, and never exceed a tenant's
    ``max_slots`` counting the tenant's chunks already in flight.
    """

    name: str

    def allocate(self, snapshot: Snapshot) -> list[Grant]: ...
