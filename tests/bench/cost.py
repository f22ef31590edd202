"""Scheduler cost: decision and refit time vs active jobs and slots.

    .venv/bin/python -m tests.bench.cost [--jobs 100 1000 10000] [--slots 10 100 1000]

Each case builds a snapshot of N waiting-or-running jobs with 100-point loss
histories, then times, per policy:

* ``cold``: the first decision, which fits every job (a scheduler restart);
* ``steady``: a decision after the jobs granted last round reported a chunk
  (10 new points each) -- what the live scheduler pays per round (best of 3);
* ``idle``: the same snapshot again (no new points: memoised fits only; best of 3);
* ``refit/job``: cold time per fitted job.

Half the slots (at most half the jobs) are running; the other half are free.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from backend.scheduling.registry import make_policy
from backend.scheduling.types import JobView, LossPoint, Policy, Snapshot

HISTORY = 100
ROUNDS = 3
SHAPES = 50


def curves(length: int) -> list[tuple[LossPoint, ...]]:
    """A few dozen noisy curves; jobs share them so 10,000 jobs fit in memory."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(SHAPES):
        k = np.arange(1, length + 1)
        loss = 0.1 * (i % 4) + (1 + i % 3) / (0.02 * (1 + i % 7) * k + 1)
        loss = loss * (1 + 0.005 * rng.standard_normal(length))
        out.append(tuple(LossPoint(int(j), float(v), 0.01) for j, v in zip(k, loss, strict=True)))
    return out


def snapshot(n_jobs: int, slots: int, done: list[int], shapes: list[tuple[LossPoint, ...]],
             now: float) -> Snapshot:
    running = min(slots // 2, n_jobs // 2)
    jobs = [
        JobView(job_id=i, tenant_id=1 + i % 10, submitted_at=0.0, iterations_done=done[i],
                max_iterations=10_000, losses=shapes[i % SHAPES][: done[i]],
                running=i < running, waiting_since=now - 1.0 - (i % 7),
                attained_seconds=done[i] * 0.01)
        for i in range(n_jobs)
    ]
    return Snapshot(now=now, free_slots=slots - running, total_slots=slots, chunk_seconds=1.0,
                    jobs=jobs)


def measure(policy_name: str, n_jobs: int, slots: int, shapes: list[tuple[LossPoint, ...]],
            rounds: int = 3) -> tuple[float, float, float]:
    """(cold, steady, idle) seconds; steady and idle are the best of ``rounds``
    (the machine is shared, so single timings are noisy)."""
    policy: Policy = make_policy(policy_name)
    done = [HISTORY] * n_jobs
    snap = snapshot(n_jobs, slots, done, shapes, now=100.0)
    t0 = time.perf_counter()
    grants = policy.allocate(snap)
    cold = time.perf_counter() - t0
    steady, idle = [], []
    for r in range(rounds):
        for g in grants:  # the granted jobs report a 10-iteration chunk
            done[g.job_id] += 10
        snap = snapshot(n_jobs, slots, done, shapes, now=101.0 + r)
        t0 = time.perf_counter()
        grants = policy.allocate(snap)
        steady.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        policy.allocate(snap)
        idle.append(time.perf_counter() - t0)
    return cold, min(steady), min(idle)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 1000, 10_000])
    parser.add_argument("--slots", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--policies", nargs="+", default=["slaq", "slaq-classic", "las", "fair"])
    args = parser.parse_args(argv)
    shapes = curves(HISTORY + 10 * (ROUNDS + 1))
    print(f"{'policy':<13}{'jobs':>7}{'slots':>7}{'cold ms':>10}{'steady ms':>11}{'idle ms':>9}"
          f"{'refit/job ms':>14}")
    for name in args.policies:
        for n in args.jobs:
            for s in args.slots:
                cold, steady, idle = measure(name, n, s, shapes)
                per = 1000 * cold / n if name == "slaq" else math.nan
                print(f"{name:<13}{n:>7}{s:>7}{1000 * cold:>10.1f}{1000 * steady:>11.1f}"
                      f"{1000 * idle:>9.1f}{per:>14.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
