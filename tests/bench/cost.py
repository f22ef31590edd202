"""Scheduler cost: decision and refit time vs active jobs and slots.

    .venv/bin/python -m tests.bench.cost [--jobs 100 1000 10000] [--slots 10 100 1000] \
        [--warmup 20] [--rounds 5]

Each case builds a snapshot of N waiting-or-running jobs with 100-point loss
histories, then times, per policy:

* ``cold``: the first decision (a scheduler restart): ``slaq`` fits at most
  its refit budget of jobs and ranks the rest by attained service;
* ``catch-up``: the decisions, and their total time, until every job is fitted;
* ``steady``: a decision after the jobs granted last round reported a chunk
  (10 new points each) -- what the live scheduler pays per round (best of
  ``--rounds``, 5, after ``--warmup`` untimed rounds, 20, so that the jobs
  the refit budget left on older fits have piled up as they do live);
  as live, only those jobs' views are new objects;
  ``deferred`` is how many jobs the budget has left on an older fit;
* ``idle``: the same snapshot again (no new points; the deferred jobs are
  fitted now; best of the same rounds);
* ``refit/job``: catch-up time over the number of jobs (each catch-up call
  also ranks every job, so this is an upper bound on one refit);
* ``steady/las``: against ``las`` deciding on the very same snapshots,
  timed in the same rounds (best of each), so the ratio is side by side even
  on a busy machine;
* ``median ratio``: the median over the steady rounds of slaq's time over
  ``las``'s in the same round: on a loaded machine either best of ``--rounds``
  is luck, while the round-by-round ratio holds still.

Half the slots (at most half the jobs) are running; the other half are free.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any, NamedTuple

import numpy as np

from backend.scheduling.loss_history import LossHistory
from backend.scheduling.predictor import LossPredictor, PredictorConfig
from backend.scheduling.registry import make_policy
from backend.scheduling.types import Grant, JobView, Policy, Snapshot

HISTORY = 100
ROUNDS = 5
WARMUP = 20
SHAPES = 50


def curves(length: int) -> list[LossHistory]:
    """A few dozen noisy curves; jobs share them (a job's history is a zero-copy
    prefix, as the live cache's views are) so 10,000 jobs fit in memory."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(SHAPES):
        k = np.arange(1, length + 1)
        loss = 0.1 * (i % 4) + (1 + i % 3) / (0.02 * (1 + i % 7) * k + 1)
        loss = loss * (1 + 0.005 * rng.standard_normal(length))
        out.append(LossHistory(k, loss, np.full(length, 0.01)))
    return out


class Queue:
    """N jobs' state between rounds. As live, a job's view is rebuilt only when
    the job changed (a chunk ended), and the same object is handed over
    otherwise."""

    def __init__(self, n_jobs: int, slots: int, shapes: list[LossHistory]) -> None:
        self.slots, self.shapes = slots, shapes
        self.running = min(slots // 2, n_jobs // 2)
        self.done = [HISTORY] * n_jobs
        self.since = [99.0 - (i % 7) for i in range(n_jobs)]
        self.views = [self._view(i) for i in range(n_jobs)]

    def _view(self, i: int) -> JobView:
        return JobView(job_id=i, tenant_id=1 + i % 10, submitted_at=0.0,
                       iterations_done=self.done[i], max_iterations=10_000,
                       losses=self.shapes[i % SHAPES][: self.done[i]],
                       running=i < self.running, waiting_since=self.since[i],
                       attained_seconds=self.done[i] * 0.01)

    def report(self, grants: list[Grant], now: float) -> None:
        """The granted jobs report a 10-iteration chunk that ended at ``now``."""
        for g in grants:
            self.done[g.job_id] += 10
            self.since[g.job_id] = now
            self.views[g.job_id] = self._view(g.job_id)

    def snapshot(self, now: float) -> Snapshot:
        return Snapshot(now=now, free_slots=self.slots - self.running, total_slots=self.slots,
                        chunk_seconds=1.0, jobs=list(self.views))


class Timing(NamedTuple):
    cold: float
    catch_up_calls: int
    catch_up: float
    steady: float
    deferred: int
    idle: float
    las_steady: float
    median_ratio: float


def measure(policy_name: str, n_jobs: int, slots: int, shapes: list[LossHistory],
            rounds: int = ROUNDS, refit_budget: int | None = None, warmup: int = WARMUP
            ) -> Timing:
    """Seconds per decision; steady and idle are the best of ``rounds`` (the
    machine is shared, so single timings are noisy)."""
    options: dict[str, Any] = {}
    if refit_budget is not None and policy_name == "slaq":
        options["predictor"] = LossPredictor(PredictorConfig(refit_budget=refit_budget))
    policy: Policy = make_policy(policy_name, **options)
    predictor = getattr(policy, "predictor", None)
    queue = Queue(n_jobs, slots, shapes)
    snap = queue.snapshot(now=100.0)
    t0 = time.perf_counter()
    grants = policy.allocate(snap)
    cold = time.perf_counter() - t0
    calls, t0 = 0, time.perf_counter()
    while isinstance(predictor, LossPredictor) and predictor.deferred:
        policy.allocate(snap)
        calls += 1
    catch_up = time.perf_counter() - t0
    las = make_policy("las")
    steady, idle, las_steady, deferred = [], [], [], 0
    for r in range(warmup + rounds):
        # A tenth of a second a round: every job stays within the wait
        # bounds, so the guards do not reorder what is timed.
        now = 101.0 + 0.1 * r
        queue.report(grants, now=now)
        snap = queue.snapshot(now=now)
        t0 = time.perf_counter()
        las.allocate(snap)
        las_time = time.perf_counter() - t0
        t0 = time.perf_counter()
        grants = policy.allocate(snap)
        policy_time = time.perf_counter() - t0
        if r < warmup:
            continue
        las_steady.append(las_time)
        steady.append(policy_time)
        if isinstance(predictor, LossPredictor):
            deferred = max(deferred, predictor.deferred)
        t0 = time.perf_counter()
        policy.allocate(snap)
        idle.append(time.perf_counter() - t0)
    ratio = statistics.median(s / max(q, 1e-12) for s, q in zip(steady, las_steady, strict=True))
    return Timing(cold, calls, catch_up, min(steady), deferred, min(idle), min(las_steady), ratio)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 1000, 10_000])
    parser.add_argument("--slots", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--policies", nargs="+", default=["slaq", "slaq-classic", "las", "fair"])
    parser.add_argument("--refit-budget", type=int, nargs="+", default=[None],
                        help="slaq's refit budget per decision (default: the predictor's)")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help="steady rounds per case; steady and idle are the best of them")
    parser.add_argument("--warmup", type=int, default=WARMUP,
                        help="untimed rounds before the steady ones")
    args = parser.parse_args(argv)
    shapes = curves(HISTORY + 10 * (args.warmup + args.rounds + 1))
    print(f"{'policy':<13}{'budget':>7}{'jobs':>7}{'slots':>7}{'cold ms':>10}"
          f"{'catch-up':>14}{'steady ms':>11}{'deferred':>10}{'idle ms':>9}"
          f"{'refit/job ms':>14}{'steady/las':>12}{'median ratio':>14}")
    for n in args.jobs:
        for s in args.slots:
            for name in args.policies:
                budgets = args.refit_budget if name == "slaq" else [None]
                for budget in budgets:
                    t = measure(name, n, s, shapes, args.rounds, refit_budget=budget,
                                warmup=args.warmup)
                    per = 1000 * t.catch_up / n if t.catch_up_calls else math.nan
                    label = "-" if name != "slaq" else str(budget or PredictorConfig().refit_budget)
                    catch = f"{t.catch_up_calls} / {t.catch_up:.1f}s" if t.catch_up_calls else "-"
                    print(f"{name:<13}{label:>7}{n:>7}{s:>7}{1000 * t.cold:>10.1f}{catch:>14}"
                          f"{1000 * t.steady:>11.1f}{t.deferred:>10}{1000 * t.idle:>9.1f}"
                          f"{per:>14.3f}{t.steady / t.las_steady:>12.2f}{t.median_ratio:>14.2f}",
                          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
