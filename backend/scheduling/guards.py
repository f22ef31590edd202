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


def split_overdue(
    snapshot: Snapshot, bounds: WaitBounds | None, jobs: list[JobView]
) -> tuple[list[Ranked], list[JobView]]:
    """Overdue jobs (longest-waiting first, with their reason) and the rest.

    Compares each job's ``waiting_since`` with two precomputed cut-off times,
    so checking 10,000 jobs costs a few milliseconds; reasons are formatted
    only for the (few) overdue jobs.
    """
    if bounds is None:
        return [], jobs
    warmup = bounds.warmup_seconds(snapshot)
    starvation = bounds.starvation_seconds(snapshot)
    new_cut = -math.inf if warmup is None else snapshot.now - warmup
    any_cut = -math.inf if starvation is None else snapshot.now - starvation
    overdue: list[JobView] = []
    rest: list[JobView] = []
    for job in jobs:
        since = job.waiting_since
        if since <= any_cut or (since <= new_cut and not job.losses):
            overdue.append(job)
        else:
            rest.append(job)
    overdue.sort(key=lambda job: (job.waiting_since, job.job_id))
    return [(job, bounds.overdue_reason(snapshot, job) or "overdue", None)
            for job in overdue], rest
