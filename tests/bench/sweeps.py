"""Sweeps in the simulator: how soon an experiment finds its best configuration.

    .venv/bin/python -m tests.bench.sweeps [--sweeps sweep-numpy sweep-torch]
        [--seeds 0 1 2] [--slots 4] [--load 0.8] [--objective auto|loss]
        [--json-out sweeps.json]

Each sweep trace (``slaq record-trace --preset sweep-numpy`` / ``sweep-torch``:
30 configurations run to their own stop rules) is replayed as one
experiment, all configurations submitted at time 0 by one tenant, next to
background jobs of the standard trace (Poisson arrivals from another tenant
at ``--load`` of the cluster). Per policy and rule:

* ``t_1%``: seconds until the experiment's best-so-far objective is within
  1% of the best final objective of the whole sweep. The objective is
  ``val_loss`` where the trace recorded it (the torch sweep: held-out rows,
  every 50 iterations, as a live job evaluates by default), otherwise, or
  with ``--objective loss``, the training loss as a trailing mean over 20
  iterations (minibatch losses are noisy enough that a raw minimum would be
  luck). The stopping rules and the experiment focus judge the same
  objective; the scheduling policies rank on the training loss.
* ``slot_s``: slot-seconds the experiment's jobs used.
* ``best_stopped``: runs (over seeds) in which the configuration with the
  best final objective was stopped; must be 0.
* ``stops``: configurations stopped early, mean over seeds.
* ``bg_loss`` / ``bg_done``: the background jobs' time-averaged normalised
  loss and mean completion seconds.

The rules are the live ones (:mod:`backend.scheduling.early_stopping`,
default settings: top 3, at least 100 iterations, ASHA reduction 3), applied
through :class:`backend.simulation.sweep_stopping.SweepStopper`. Nothing here
was tuned on these traces; the ``--seeds`` change the background workload
and the order in which configurations are queued.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from backend.scheduling.early_stopping import RuleConfig
from backend.scheduling.experiment_focus import Focused
from backend.scheduling.metrics import figures
from backend.scheduling.simulator import SimConfig, SimJob, SimResult, build_policy, simulate
from backend.scheduling.trace import Trace, TraceCurve, load_trace
from backend.scheduling.workload import Arrival, generate_workload
from backend.simulation.cli import STANDARD_TRACE, SWEEP_TRACES
from backend.simulation.sweep_stopping import SweepStopper

SMOOTH = 20
WITHIN = 0.01
ROWS: tuple[tuple[str, str, str], ...] = (
    # (row label, scheduling policy, early-stopping rule)
    ("fair", "fair", "none"),
    ("las", "las", "none"),
    ("slaq", "slaq", "none"),
    ("asha", "fair", "asha"),
    ("slaq+asha", "slaq", "asha"),
    ("slaq+predictive", "slaq", "predictive"),
)
KEYS = ("t_1%", "slot_s", "stops", "best_stopped", "bg_loss", "bg_done")


def smoothed(losses: Sequence[float]) -> np.ndarray:
    """Trailing mean over ``SMOOTH`` iterations (fewer at the start)."""
    values = np.asarray(losses, dtype=float)
    sums = np.cumsum(np.concatenate([[0.0], values]))
    ends = np.arange(1, values.size + 1)
    starts = np.maximum(ends - SMOOTH, 0)
    out: np.ndarray = (sums[ends] - sums[starts]) / (ends - starts)
    return out


def objective_of(sweep: Trace, choice: str) -> str:
    """``val_loss`` if every configuration recorded it (unless ``choice`` is
    ``loss``), else the training loss."""
    if choice == "auto" and all("val_loss" in c.evaluations for c in sweep.curves):
        return "val_loss"
    return "loss"


def series(curve: TraceCurve, objective: str) -> tuple[np.ndarray, np.ndarray]:
    """The objective along the whole curve: iterations (from 1) and values."""
    if objective == "loss":
        values = smoothed(curve.losses)
        return np.arange(1, values.size + 1), values
    points = np.asarray(curve.evaluations[objective], dtype=float)
    return points[:, 0].astype(int), points[:, 1]


def best_final(sweep: Trace, objective: str) -> tuple[str, float]:
    """The configuration with the best final objective, and that objective."""
    finals = {c.id: float(series(c, objective)[1][-1]) for c in sweep.curves}
    best = min(finals, key=lambda i: finals[i])
    return best, finals[best]


def time_to_target(jobs: Sequence[SimJob], target: float, start: float,
                   objective: str) -> float:
    """Seconds from ``start`` until any job's objective is within WITHIN of target."""
    bound = target + WITHIN * abs(target)
    reached = []
    for job in jobs:
        iterations, values = series(job.curve, objective)
        seen = iterations <= len(job.iteration_times)
        hits = np.flatnonzero(seen & (values <= bound))
        if hits.size:
            reached.append(job.iteration_times[int(iterations[hits[0]]) - 1] - start)
    return min(reached) if reached else float("inf")


@dataclass(frozen=True)
class Case:
    sweep: str
    seed: int
    slots: int
    load: float
    objective: str = "loss"


def workload(case: Case, sweep: Trace, background: Trace) -> tuple[Trace, list[Arrival], int]:
    """The sweep's configurations (tenant 1, time 0, order shuffled by seed),
    then background arrivals (tenant 2); and how many configurations."""
    order = np.random.default_rng(case.seed).permutation(len(sweep.curves))
    arrivals = [Arrival(index=i, time=0.0, curve_id=sweep.curves[int(k)].id, tenant_id=1,
                        experiment_id=1)
                for i, k in enumerate(order)]
    extra = generate_workload(background, slots=case.slots, load=case.load,
                              jobs=len(background.curves), seed=case.seed)
    n = len(arrivals)
    arrivals += [Arrival(index=n + a.index, time=a.time, curve_id=a.curve_id, tenant_id=2)
                 for a in extra]
    ids = [c.id for c in sweep.curves] + [c.id for c in background.curves]
    if len(set(ids)) != len(ids):
        raise ValueError("sweep and background traces share curve ids")
    merged = Trace(curves=tuple(sweep.curves) + tuple(background.curves))
    return merged, arrivals, n


def run(case: Case, label: str, policy_name: str, rule: str) -> dict[str, float]:
    sweep = load_trace(SWEEP_TRACES[case.sweep])
    background = load_trace(STANDARD_TRACE)
    trace, arrivals, n = workload(case, sweep, background)
    config = RuleConfig(rule=rule, metric=case.objective)
    stopper = None if rule == "none" else SweepStopper(config, range(n))
    policy = build_policy(policy_name, trace, arrivals)
    if stopper is not None:
        policy = Focused(policy, stopper.standings)  # it acts for predictive rules only
    result = simulate(policy, trace, arrivals, SimConfig(slots=case.slots), stopper=stopper,
                      rungs=None if stopper is None else stopper.at_rung)
    experiment, others = result.jobs[:n], result.jobs[n:]
    best_id, target = best_final(sweep, case.objective)
    bg = figures(SimResult(label, others, 0, 0.0, 0))
    return {
        "t_1%": time_to_target(experiment, target, 0.0, case.objective),
        "slot_s": float(sum(j.attained for j in experiment)),
        "stops": float(sum(j.stopped for j in experiment)),
        "best_stopped": float(any(j.stopped and j.curve.id == best_id for j in experiment)),
        "bg_loss": bg.avg_norm_loss, "bg_done": bg.mean_completion,
    }


def _cell(value: float, key: str) -> str:
    if key in ("best_stopped",):
        return f"{value:.0f}"
    if key in ("bg_loss",):
        return f"{value:.3f}"
    return "never" if not np.isfinite(value) else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", nargs="+", default=list(SWEEP_TRACES),
                        choices=list(SWEEP_TRACES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--load", type=float, default=0.8,
                        help="background load, as a fraction of the cluster")
    parser.add_argument("--objective", choices=("auto", "loss"), default="auto",
                        help="auto: val_loss where the sweep recorded it")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    report: dict[str, dict[str, dict[str, float]]] = {}
    for sweep in args.sweeps:
        if not SWEEP_TRACES[sweep].exists():
            parser.error(f"{SWEEP_TRACES[sweep]} is missing: slaq record-trace --preset {sweep}")
        trace = load_trace(SWEEP_TRACES[sweep])
        objective = objective_of(trace, args.objective)
        best_id, target = best_final(trace, objective)
        rows: dict[str, dict[str, float]] = {}
        for label, policy, rule in ROWS:
            runs = [run(Case(sweep, seed, args.slots, args.load, objective), label, policy, rule)
                    for seed in args.seeds]
            rows[label] = {k: (float(sum(r[k] for r in runs)) if k == "best_stopped"
                               else float(np.mean([r[k] for r in runs]))) for k in KEYS}
        report[sweep] = rows
        print(f"\n{sweep}: {len(trace.curves)} configurations, "
              f"{args.slots} slots, background load {args.load}, seeds {args.seeds} "
              f"(means over seeds; best_stopped summed)\n"
              f"objective {objective}: best final {target:.4g} ({best_id})")
        print(f"{'':16}" + "".join(f"{k:>13}" for k in KEYS))
        for label, figs in rows.items():
            print(f"{label:16}" + "".join(f"{_cell(figs[k], k):>13}" for k in KEYS))
        ours, fair, asha = rows["slaq+predictive"], rows["fair"], rows["asha"]
        print(f"t_1%: fair / slaq+predictive = {fair['t_1%'] / ours['t_1%']:.2f}x, "
              f"asha / slaq+predictive = {asha['t_1%'] / ours['t_1%']:.2f}x; "
              f"slot-seconds slaq+predictive / fair = {ours['slot_s'] / fair['slot_s']:.2f}")
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
