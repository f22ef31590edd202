"""Waiting-time bounds shared by the predictive policies.

A greedy policy would leave a job whose predicted gain is small waiting for
ever, and a job that never runs reports nothing new, so its prediction never
corrects. :class:`WaitBounds` puts two limits on that:

* **warm-up bound**: a new job (no loss history) that has waited
  ``warmup_chunks`` chunk lengths is served before anything ranked;
* **starvation bound**: any job that has waited ``starvation_chunks`` chunk
  lengths since its last chunk ended (or since submission) is served before
  anything ranked.

Bounds are counted in chunk lengths (``snapshot.chunk_seconds``), so they
mean the same at any chunk size: at the live default of 1 s chunks they are
5 s and 60 s.

Overdue jobs go first, longest-waiting first, subject to the same slot and
quota limits as every grant (:func:`backend.scheduling.allocation.fill_slots`).
Under sustained overload several jobs can be overdue at once; each then waits
at most the bound plus the time the overdue jobs ahead of it take.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from backend.scheduling.types import JobView, Snapshot

DEFAULT_COMPLETION_GUARD = 0.4
"""The service floor's ``fraction`` unless an operator sets another
(``COMPLETION_GUARD``, the admin page): the tuning rule of
docs/scheduling.md, "The frontier against las, and the default guard".
The simulators read it from here; the portal's setting
(``backend.core.settings``, which may not import this layer) repeats it,
held equal by a unit test."""

Ranked = tuple[JobView, str, float | None]
"""A job in a policy's preferred order, with the reason and predicted gain for its grant."""


@dataclass(frozen=True)
class WaitBounds:
    """Chunk lengths a job may wait before it is served ahead of ranked jobs;
    ``None`` disables a bound."""

    starvation_chunks: float | None = 60.0
    warmup_chunks: float | None = 5.0

    def warmup_seconds(self, snapshot: Snapshot) -> float | None:
        return None if self.warmup_chunks is None else self.warmup_chunks * snapshot.chunk_seconds

    def starvation_seconds(self, snapshot: Snapshot) -> float | None:
        if self.starvation_chunks is None:
            return None
        return self.starvation_chunks * snapshot.chunk_seconds

    def overdue_reason(self, snapshot: Snapshot, job: JobView) -> str | None:
        """Why ``job`` must be served now, or ``None`` if it may keep waiting."""
        waited = snapshot.now - job.waiting_since
        warmup = self.warmup_seconds(snapshot)
        if warmup is not None and not job.losses and waited >= warmup:
            return f"warm-up bound: new job has waited {waited:.1f}s (limit {warmup:g}s)"
        starvation = self.starvation_seconds(snapshot)
        if starvation is not None and waited >= starvation:
            return f"starvation bound: waited {waited:.1f}s (limit {starvation:g}s)"
        return None


@dataclass(frozen=True)
class ServiceFloor:
    """Completion-time guard: an adaptive starvation bound.

    A greedy quality policy starves jobs whose curve looks flat, but every
    job must still run to its end, so the starved ones finish late and mean
    completion time grows. Round-robin over ``N`` runnable jobs on ``S``
    slots gives each job a chunk every ``N / S`` chunk lengths; the floor
    guarantees ``fraction`` of that rate: a job with history that has waited
    ``max(1, N / S) / fraction`` chunk lengths since its last chunk is served
    after the overdue jobs and before anything ranked, longest-waiting first.
    It is counted in waiting time on the policy's own clock, so it means the
    same live (where ``attained_seconds`` counts compute only) and simulated
    (where it includes chunk overhead). ``fraction = 0`` turns it off.

    Example: 2 slots, 6 runnable jobs, 0.3 s chunks, ``fraction=0.25``: a job
    is served by the floor once it has waited 3 / 0.25 = 12 chunk lengths
    (3.6 s); with 2 runnable jobs the bound is 4 chunk lengths.
    """

    fraction: float = DEFAULT_COMPLETION_GUARD

    def wait_seconds(self, snapshot: Snapshot) -> float | None:
        if self.fraction <= 0:
            return None
        turns = max(1.0, len(snapshot.jobs) / max(snapshot.total_slots, 1))
        return turns / self.fraction * snapshot.chunk_seconds


def split_waiting(snapshot: Snapshot, bounds: WaitBounds | None, floor: ServiceFloor | None = None
                  ) -> tuple[list[Ranked], list[Ranked], list[JobView]]:
    """The waiting jobs (not running, iterations left) in one pass: those past
    a wait bound, those behind the service floor (each longest-waiting first,
    with their reason) and the rest, in snapshot order.

    Compares each job's ``waiting_since`` with precomputed cut-off times, so
    sorting 10,000 jobs costs a few milliseconds; reasons are formatted only
    for the (few) guarded jobs.
    """
    now = snapshot.now
    warmup = None if bounds is None else bounds.warmup_seconds(snapshot)
    starvation = None if bounds is None else bounds.starvation_seconds(snapshot)
    floor_wait = None if floor is None else floor.wait_seconds(snapshot)
    new_cut = -math.inf if warmup is None else now - warmup
    any_cut = -math.inf if starvation is None else now - starvation
    floor_cut = -math.inf if floor_wait is None else now - floor_wait
    latest = max(new_cut, any_cut, floor_cut)  # a job waiting since later is in no guard
    overdue: list[JobView] = []
    behind: list[JobView] = []
    rest: list[JobView] = []
    for job in snapshot.jobs:
        if job.running or job.max_iterations <= job.iterations_done:
            continue
        since = job.waiting_since
        if since > latest:
            rest.append(job)
        elif since <= any_cut or (since <= new_cut and not job.history.size):
            overdue.append(job)
        elif since <= floor_cut and job.history.size:
            behind.append(job)
        else:
            rest.append(job)

    def longest_waiting(job: JobView) -> tuple[float, int]:
        return job.waiting_since, job.job_id

    overdue.sort(key=longest_waiting)
    behind.sort(key=longest_waiting)
    fraction = 0.0 if floor is None else floor.fraction
    return ([(job, (bounds.overdue_reason(snapshot, job) if bounds else None) or "overdue", None)
             for job in overdue],
            [(job, f"service floor: waited {now - job.waiting_since:.1f}s, {fraction:g} of a "
                   f"round-robin turn allows {floor_wait:.1f}s", None) for job in behind],
            rest)
