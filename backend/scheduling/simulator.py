"""Discrete-event simulator: the real policies on a simulated clock.

Jobs replay recorded curves (:mod:`backend.scheduling.trace`). The simulator
plays the live scheduler's part with in-memory state: at every arrival and
chunk completion it builds a :class:`~backend.scheduling.types.Snapshot`,
calls ``policy.allocate`` (the very code the live scheduler calls), checks
the grants against the hard limits with the live scheduler's own check
(:func:`~backend.scheduling.allocation.split_grants`), and runs them: a chunk
of ``n`` iterations takes the curve's recorded seconds for those iterations
plus the curve's measured chunk overhead (half before the first iteration: dispatch
and checkpoint load; half after the last: checkpoint save and report). Loss
points become visible to the policy when the chunk ends. A job finishes
when its curve ends (it converged in the recorded run), or earlier when an
optional ``stopper`` (an experiment's early-stopping rule) stops it: a
stopped job that is running ends with its chunk in flight, like a live job
paused mid-chunk.
"""

from __future__ import annotations

import heapq
import time as wallclock
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backend.scheduling.allocation import split_grants
from backend.scheduling.policies.oracle import TrueCurve
from backend.scheduling.registry import SIMULATION_ONLY, make_policy
from backend.scheduling.trace import Trace, TraceCurve
from backend.scheduling.types import Grant, JobView, LossPoint, Policy, Snapshot, TenantView
from backend.scheduling.workload import Arrival


@dataclass(frozen=True)
class SimConfig:
    """The simulated cluster: slots, chunk length, tenant quotas."""

    slots: int
    chunk_seconds: float = 1.0
    default_chunk_iterations: int = 10
    tenants: Mapping[int, TenantView] = field(default_factory=dict)


@dataclass
class SimJob:
    """One simulated job's state and, once done, its outcome."""

    job_id: int
    curve: TraceCurve
    tenant_id: int
    arrival: float
    points: list[LossPoint] = field(default_factory=list)
    iteration_times: list[float] = field(default_factory=list)
    done: int = 0
    running: bool = False
    waiting_since: float = 0.0
    attained: float = 0.0
    chunks: int = 0
    pending: int = 0
    finish: float | None = None
    stopped: bool = False

    def view(self) -> JobView:
        # The growing points list is passed, not copied: policies treat it as
        # read-only, and copying every history every round would dominate.
        return JobView(
            job_id=self.job_id, tenant_id=self.tenant_id, submitted_at=self.arrival,
            iterations_done=self.done, max_iterations=max(self.curve.max_iterations,
                                                           self.curve.iterations),
            losses=self.points, running=self.running, attained_seconds=self.attained,
            waiting_since=self.waiting_since, chunks_run=self.chunks,
        )


@dataclass
class SimResult:
    policy: str
    jobs: list[SimJob]
    decisions: int
    decision_seconds: float
    grants: int


def true_curves(trace: Trace, arrivals: Sequence[Arrival]) -> dict[int, TrueCurve]:
    """What the oracle may know: every job's recorded future."""
    out = {}
    for a in arrivals:
        c = trace.curve(a.curve_id)
        out[a.index] = TrueCurve(initial_loss=c.initial_loss, losses=c.losses, seconds=c.seconds)
    return out


def build_policy(name: str, trace: Trace, arrivals: Sequence[Arrival], **options: Any) -> Policy:
    """A registry policy; simulation-only ones are handed the true curves."""
    if name in SIMULATION_ONLY:
        options = {**options, "true_curves": true_curves(trace, arrivals)}
    return make_policy(name, **options)


_ARRIVE, _COMPLETE = 1, 0  # completions first at equal times: their slots are free


Stopper = Callable[[float, Mapping[int, SimJob], Sequence[SimJob]], Iterable[int]]
"""``stopper(now, active jobs, jobs whose chunk just ended)``: ids to stop now."""


def simulate(
    policy: Policy, trace: Trace, arrivals: Sequence[Arrival], config: SimConfig,
    stopper: Stopper | None = None,
) -> SimResult:
    """Run ``arrivals`` to completion under ``policy``; deterministic for given inputs."""
    jobs = [SimJob(a.index, trace.curve(a.curve_id), a.tenant_id, a.time, waiting_since=a.time)
            for a in arrivals]
    if [j.job_id for j in jobs] != list(range(len(jobs))):
        raise ValueError("arrival indices must be 0..n-1 in order")
    events: list[tuple[float, int, int, int]] = []
    for job in jobs:
        heapq.heappush(events, (job.arrival, _ARRIVE, job.job_id, job.job_id))
    active: dict[int, SimJob] = {}
    free = config.slots
    decisions, grants_total, spent = 0, 0, 0.0
    seq = len(jobs)
    while events:
        now = events[0][0]
        ended: list[SimJob] = []
        while events and events[0][0] == now:
            _, kind, _, job_id = heapq.heappop(events)
            job = jobs[job_id]
            if kind == _ARRIVE:
                active[job_id] = job
            else:
                free += 1
                _complete(job, now)
                ended.append(job)
                if job.finish is None and job.stopped:
                    job.finish = now
                if job.finish is not None:
                    del active[job_id]
        if stopper is not None and ended:
            for job_id in list(stopper(now, active, ended)):
                job = active[job_id]
                job.stopped = True
                if not job.running:
                    job.finish = now
                    del active[job_id]
        if free <= 0 or not any(not j.running for j in active.values()):
            continue
        snapshot = Snapshot(
            now=now, free_slots=free, total_slots=config.slots,
            chunk_seconds=config.chunk_seconds, jobs=[j.view() for j in active.values()],
            tenants=config.tenants, default_chunk_iterations=config.default_chunk_iterations,
        )
        started = wallclock.perf_counter()
        grants = policy.allocate(snapshot)
        spent += wallclock.perf_counter() - started
        decisions += 1
        accepted, rejected = split_grants(snapshot, grants)
        if rejected:
            # Live, such grants are dropped with a warning; a simulation that
            # quietly did the same would report figures for a different policy.
            raise AssertionError(f"{policy.name} broke the hard limits: "
                                 + "; ".join(reason for _, reason in rejected))
        for grant in accepted:
            job = active[grant.job_id]
            end = _start(job, grant, now)
            free -= 1
            grants_total += 1
            seq += 1
            heapq.heappush(events, (end, _COMPLETE, seq, job.job_id))
        if not events and active:
            raise RuntimeError(f"{policy.name}: jobs wait but nothing runs at t={now:.1f}")
    return SimResult(policy.name, jobs, decisions, spent, grants_total)


def _start(job: SimJob, grant: Grant, now: float) -> float:
    """Begin a chunk; returns its end time. Iteration times are known up front."""
    curve = job.curve
    count = min(grant.iterations, curve.iterations - job.done)
    secs = np.asarray(curve.seconds[job.done: job.done + count])
    overhead = curve.chunk_overhead_seconds
    first = now + overhead / 2
    job.iteration_times.extend((first + np.cumsum(secs)).tolist())
    job.running = True
    job.pending = count
    duration = overhead + float(secs.sum())
    job.attained += duration
    return now + duration


def _complete(job: SimJob, now: float) -> None:
    """A chunk ended: its loss points become visible; the job may be finished."""
    count = job.pending
    curve = job.curve
    for i in range(job.done, job.done + count):
        job.points.append(LossPoint(i + 1, curve.losses[i], curve.seconds[i]))
    job.done += count
    job.running = False
    job.chunks += 1
    job.waiting_since = now
    if job.done >= curve.iterations:
        job.finish = now

