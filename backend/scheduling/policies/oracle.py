"""Simulation-only oracle: SLAQ's lookahead index on the true future curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from backend.scheduling.allocation import chunk_iterations, fill_slots
from backend.scheduling.guards import Ranked, ServiceFloor, WaitBounds, split_waiting
from backend.scheduling.types import Grant, JobView, Snapshot


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
    """Lookahead oracle: the :class:`~backend.scheduling.policies.slaq.SlaqPolicy`
    lookahead index computed on the *true* curves.

    The simulator, which knows every job's recorded curve, builds it with
    ``true_curves`` (job id -> :class:`TrueCurve`); the live scheduler cannot,
    so the registry marks ``oracle`` simulation-only. A job's index is the
    best true normalised drop per slot-second over every whole number of
    chunks ahead, up to the job's end (a greedy one-chunk oracle would wait
    out plateaus and learning-rate steps, which makes it a weak limit). Losses
    are normalised exactly as the benchmarks measure quality: ``(L -
    L_final) / (L_0 - L_final)`` clipped to [0, 1]. The same wait bounds and
    service floor as ``slaq`` apply, so the gap between the two is the cost
    of not knowing the future.

    Worked example: one free slot, ``chunk_seconds=1``, 100-iteration chunks
    at 0.01 s an iteration. Job 1 has been flat at normalised 1.0 for 100
    iterations and will fall to 0.0 over its next 200 (a plateau ending):
    one chunk ahead it gains 0.3, two chunks ahead 1.0 in 2 s, index 0.5/s.
    Job 2 will gain 0.4 in its next chunk and little after: index 0.4/s.
    Grant: job 1, reason "oracle: true gain 1 over 2 chunks ...". The
    one-chunk oracle would have picked job 2.
    """

    true_curves: Mapping[int, TrueCurve]
    name: str = "oracle"
    bounds: WaitBounds | None = field(default_factory=WaitBounds)
    floor: ServiceFloor | None = field(default_factory=ServiceFloor)
    _curves: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        if snapshot.free_slots <= 0:
            return []
        overdue, behind, rest = split_waiting(snapshot, self.bounds, self.floor)
        scored = []
        for job in rest:
            rate, gain, chunks, _ = self._lookahead(snapshot, job)
            scored.append((rate, job.waiting_since, job.job_id, job, gain, chunks))
        scored.sort(key=lambda item: (-item[0], item[1], item[2]))
        ranked: list[Ranked] = [
            (job, f"oracle: true gain {gain:.3g} of its total drop over {h} chunk(s) "
                  f"({score:.3g}/s, rank {i})", gain)
            for i, (score, _, _, job, gain, h) in enumerate(scored, start=1)
        ]
        return fill_slots(snapshot, overdue + behind + ranked)

    def _lookahead(self, snapshot: Snapshot, job: JobView) -> tuple[float, float, int, float]:
        """The job's best true drop per second over its next 1, 2, ... chunks:
        (rate, the drop, those chunks, the true seconds left to its end); rate,
        drop and chunks are 0 at its end."""
        norm, cum = self._curve(job.job_id)
        last = len(norm) - 1
        done = min(job.iterations_done, last)
        remaining = float(cum[last] - cum[done])
        n = chunk_iterations(snapshot, job)
        ends = np.minimum(np.arange(done + n, last + n, n), last)
        if ends.size == 0:
            return 0.0, 0.0, 0, remaining
        rates = (norm[done] - norm[ends]) / np.maximum(cum[ends] - cum[done], 1e-9)
        best = int(np.argmax(rates))
        return float(rates[best]), float(norm[done] - norm[ends[best]]), best + 1, remaining

    def _curve(self, job_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Normalised loss after 0..N iterations (index 0 = start) and cumulative seconds."""
        cached = self._curves.get(job_id)
        if cached is None:
            curve = self.true_curves[job_id]
            losses = np.concatenate([[curve.initial_loss], np.asarray(curve.losses, float)])
            span = curve.initial_loss - curve.final_loss
            norm = (np.clip((losses - curve.final_loss) / span, 0.0, 1.0) if span > 0
                    else np.zeros_like(losses))
            cum = np.concatenate([[0.0], np.cumsum(np.asarray(curve.seconds, float))])
            cached = self._curves[job_id] = (norm, cum)
        return cached


@dataclass
class TwoAxisOraclePolicy(OraclePolicy):
    """Simulation-only reference for *both* axes: quality and completion time.

    :class:`OraclePolicy` ranks on the true normalised drop per slot-second
    only, so it holds flat tails back and finishes jobs late. This one adds,
    to that same rate, ``weight`` x the job's completion rate ``1 /
    remaining`` (``remaining`` = the true compute seconds to the job's end),
    and breaks ties by remaining work, shortest first:

        score = best true drop per second + weight / remaining seconds

    Both terms are per second: the first is normalised loss per slot-second,
    the second "jobs finished per slot-second" if the job ran to its end, so
    ``weight`` is what finishing a job is worth in normalised loss. ``weight
    = 0`` is :class:`OraclePolicy` (ties aside); a large weight is
    shortest-remaining-processing-time first, which minimises mean
    completion when sizes are known. The bench sweeps ``weight`` to draw the
    frontier between the two. Same wait bounds and service floor as ``slaq``.

    Example: one free slot, chunk 1 s, 100-iteration chunks at 0.01 s. Job 1
    will fall by 0.5 of its drop in its next chunk and has 10 s left (rate
    0.5/s, completion rate 0.1/s); job 2 is flat (rate 0) with 1 s left
    (completion rate 1/s). At ``weight=0`` job 1 goes (0.5 > 0); at
    ``weight=1`` job 2 goes (0 + 1 > 0.5 + 0.1).
    """

    name: str = "oracle-mix"
    weight: float = 1.0

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        if snapshot.free_slots <= 0:
            return []
        overdue, behind, rest = split_waiting(snapshot, self.bounds, self.floor)
        scored = []
        for job in rest:
            rate, _, _, remaining = self._lookahead(snapshot, job)
            rate, remaining = max(rate, 0.0), max(remaining, 1e-9)
            score = rate + self.weight / remaining
            scored.append((score, remaining, job.waiting_since, job.job_id, job, rate))
        scored.sort(key=lambda item: (-item[0], item[1], item[2], item[3]))
        ranked: list[Ranked] = [
            (job, f"oracle-mix: true rate {rate:.3g}/s + {self.weight:g} / "
                  f"{remaining:.3g}s left = {score:.3g}/s (rank {i})", rate)
            for i, (score, remaining, _, _, job, rate) in enumerate(scored, start=1)
        ]
        return fill_slots(snapshot, overdue + behind + ranked)
