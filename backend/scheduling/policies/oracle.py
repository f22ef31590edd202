"""Simulation-only greedy oracle: SLAQ's rule with the true future curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from backend.scheduling.allocation import chunk_iterations, fill_slots
from backend.scheduling.guards import Ranked, WaitBounds, split_overdue
from backend.scheduling.types import Grant, Snapshot


@dataclass(frozen=True)
class TrueCurve:
    """A job's real future: ``losses[i]`` and ``seconds[i]`` are the loss after,
    and the time taken by, iteration ``i + 1``; the job converges after the last."""

    initial_loss: float
    losses: Sequence[float]
    seconds: Sequence[float]

    @property
    def final_loss(self) -> float:
        return self.losses[-1]


@dataclass
class OraclePolicy:
    """Greedy oracle: the largest *true* normalised loss drop per slot-second.

    The simulator, which knows every job's recorded curve, builds it with
    ``true_curves`` (job id -> :class:`TrueCurve`); the live scheduler cannot,
    so the registry marks ``oracle`` simulation-only. Gains are normalised by
    ``initial_loss - final_loss``, exactly the quality measure the benchmarks
    report, and the same wait bounds as ``slaq`` apply, so the gap between the
    two is the cost of not knowing the future.

    Worked example: one free slot, ``chunk_seconds=1``. Job 1 (done 10 of
    its 100 iterations, 0.01 s each, loss 1.0 -> 0.0 overall) will fall from
    0.6 to 0.3 in its next 90 iterations: gain 0.3 per 0.9 s. Job 2 will fall
    0.05 of its total drop in its next chunk. Grant: job 1, 100 iterations
    (the job ends after 90), reason "oracle: true gain 0.3 ...".
    """

    true_curves: Mapping[int, TrueCurve]
    name: str = "oracle"
    bounds: WaitBounds | None = field(default_factory=WaitBounds)

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        if snapshot.free_slots <= 0:
            return []
        overdue, rest = split_overdue(snapshot, self.bounds, snapshot.waiting())
        scored = []
        for job in rest:
            curve = self.true_curves[job.job_id]
            done = min(job.iterations_done, len(curve.losses))
            end = min(done + chunk_iterations(snapshot, job), len(curve.losses))
            before = curve.initial_loss if done == 0 else curve.losses[done - 1]
            scale = max(curve.initial_loss - curve.final_loss, 1e-12)
            gain = (before - curve.losses[end - 1]) / scale if end > done else 0.0
            seconds = max(sum(curve.seconds[done:end]), 1e-9)
            scored.append((gain / seconds, job.waiting_since, job.job_id, job, gain))
        scored.sort(key=lambda item: (-item[0], item[1], item[2]))
        ranked: list[Ranked] = [
            (job, f"oracle: true gain {gain:.3g} of its total drop ({score:.3g}/s, rank {i})",
             gain)
            for i, (score, _, _, job, gain) in enumerate(scored, start=1)
        ]
        return fill_slots(snapshot, overdue + ranked)
