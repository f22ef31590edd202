"""Least attained service (Tiresias-style): the job that has had the least compute goes next."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain

from backend.scheduling.allocation import fill_slots
from backend.scheduling.guards import Ranked, WaitBounds, split_waiting
from backend.scheduling.residency import switch_charge
from backend.scheduling.types import Grant, JobView, Snapshot


@dataclass
class LasPolicy:
    """Serve waiting jobs in increasing order of attained service (slot-seconds
    received so far), ties by longest wait; overdue jobs (wait bounds) first.

    Uses no loss information, yet "serve fresh jobs, starve flat tails" gets
    much of SLAQ's gain, which makes it the baseline SLAQ must beat. A job
    whose trainer is not loaded on a free slot is ranked as if it had also
    had its switch cost (:func:`backend.scheduling.residency.switch_charge`).

    Example: one free slot; job 1 has attained 30 s, job 2 4 s, job 3 (new)
    0 s and has waited 2 s (warm-up bound 5 s) -> one grant, for job 3,
    reason "least attained service: 0.0 s so far (rank 1)"; job 2 is next.
    """

    name: str = "las"
    bounds: WaitBounds | None = field(default_factory=WaitBounds)

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        if snapshot.free_slots <= 0:
            return []
        overdue, _, rest = split_waiting(snapshot, self.bounds)
        # A job that must move is charged the seconds its switch wastes, as if
        # it had had them: a slot changes hands when the service gap is worth it.
        rest.sort(key=lambda job: (job.attained_seconds + switch_charge(snapshot, job),
                                   job.waiting_since, job.job_id))
        return fill_slots(snapshot, chain(overdue, _explained(rest)))


def _explained(ordered: list[JobView]) -> Iterator[Ranked]:
    # Lazily formatted: fill_slots stops after the free slots are filled.
    for i, job in enumerate(ordered, start=1):
        yield job, f"least attained service: {job.attained_seconds:.1f} s so far (rank {i})", None
