"""The original SLAQ rules: geometric prediction, fair share for jobs without history."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from backend.scheduling.allocation import chunk_iterations, fill_slots
from backend.scheduling.guards import Ranked, WaitBounds, split_waiting
from backend.scheduling.types import Grant, JobView, Snapshot


@dataclass
class SlaqClassicPolicy:
    """SLAQ as its original code did it, kept as a baseline.

    * A job with at most one loss report gets a fair share: such jobs are
      served first, up to ``total_slots * (their number / all active jobs)``
      slots (rounded up, counting their chunks already running).
    * Every other job's next chunk of ``n`` iterations is predicted
      geometrically from its last two reports, ``L_{k+n} = L_k (L_k/L_{k-1})^n``
      (no gain if the last step went up), normalised by the largest drop
      between two consecutive reports, per second of the chunk.
    * Wait bounds apply as in every predictive policy here.

    Worked example: one free slot, ``chunk_seconds=1``. Job 1's last reports
    are 0.50 then 0.45 (ratio 0.9), its largest step drop 0.2, 0.01 s per
    iteration, so ``n=100`` and the predicted drop is 0.45 (1 - 0.9^100) =
    0.45, normalised 2.25, per second 2.25. Job 2's last reports are 0.30
    then 0.31 (a rise): gain 0. Two active jobs, none new: job 1 is granted
    100 iterations with reason "geometric prediction: 2.25 of its largest
    step drop ...".
    """

    name: str = "slaq-classic"
    bounds: WaitBounds | None = field(default_factory=WaitBounds)
    _step: dict[int, tuple[int, float]] = field(default_factory=dict)

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        if snapshot.free_slots <= 0:
            return []
        overdue, _, rest = split_waiting(snapshot, self.bounds)
        if not overdue and not rest:
            return []
        new = sorted((j for j in rest if len(j.losses) <= 1),
                     key=lambda j: (j.waiting_since, j.job_id))
        active_new = len(new) + sum(1 for j in snapshot.jobs if j.running and len(j.losses) <= 1)
        share = math.ceil(snapshot.total_slots * active_new / max(len(snapshot.jobs), 1))
        running_new = sum(1 for j in snapshot.jobs if j.running and len(j.losses) <= 1)
        fair = [(j, "fair share for a job with at most one loss report", None)
                for j in new[: max(share - running_new, 0)]]
        fair_ids = {j.job_id for j, _, _ in fair}
        scored: list[tuple[float, JobView, float]] = []
        for job in rest:
            if job.job_id in fair_ids:
                continue
            gain = self._gain(snapshot, job)
            n = chunk_iterations(snapshot, job)
            seconds = n * (job.seconds_per_iteration or snapshot.chunk_seconds / n)
            scored.append((gain / max(seconds, 1e-9), job, gain))
        scored.sort(key=lambda item: (-item[0], item[1].waiting_since, item[1].job_id))
        ranked: list[Ranked] = [
            (job, f"geometric prediction: {gain:.3g} of its largest step drop "
                  f"({score:.3g} per slot-second, rank {i})", gain)
            for i, (score, job, gain) in enumerate(scored, start=1)
        ]
        return fill_slots(snapshot, overdue + fair + ranked)

    def _gain(self, snapshot: Snapshot, job: JobView) -> float:
        losses = job.losses
        if len(losses) < 2:
            return 0.0
        previous, last = losses[-2].loss, losses[-1].loss
        largest = self._largest_step(job)
        if previous <= 0 or last >= previous or largest <= 0:
            return 0.0
        ratio = last / previous
        n = chunk_iterations(snapshot, job)
        return last * (1.0 - ratio**n) / largest

    def _largest_step(self, job: JobView) -> float:
        """Largest drop between consecutive reports, updated from new points only."""
        seen_k, largest = self._step.get(job.job_id, (0, 0.0))
        losses = job.losses
        i = len(losses) - 1
        while i >= 1 and losses[i].iteration > seen_k:
            largest = max(largest, losses[i - 1].loss - losses[i].loss)
            i -= 1
        self._step[job.job_id] = (losses[-1].iteration, largest)
        return largest
