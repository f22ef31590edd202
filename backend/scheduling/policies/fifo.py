"""First in, first out: the oldest submitted job runs until it finishes."""

from __future__ import annotations

from backend.scheduling.allocation import fill_slots
from backend.scheduling.types import Grant, Snapshot


class FifoPolicy:
    """Serve jobs strictly by submission time (then id).

    Example: two free slots, jobs 1 (submitted t=0), 2 (t=5) and 3 (t=9),
    none running -> grants for jobs 1 and 2; job 3 waits even if 1 has
    almost converged.
    """

    name = "fifo"

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        ordered = sorted(snapshot.waiting(), key=lambda j: (j.submitted_at, j.job_id))
        return fill_slots(
            snapshot,
            ((job, f"first in, first out: position {pos + 1} by submission time", None)
             for pos, job in enumerate(ordered)),
        )
