"""Sweeps in the simulator: how soon an experiment finds its best configuration.

    .venv/bin/python -m tests.bench.sweeps [--sweeps sweep-numpy sweep-torch ...]
        [--seeds 0 1 2] [--slots 2 4 8] [--load L] [--objective auto|loss]
        [--move-seconds S] [--json-out sweeps.json]

Each sweep trace (``slaq record-trace --preset sweep-numpy`` / ``sweep-torch``
/ ``sweep-cnn`` / ``sweep-transformer``: every configuration run to its own
stop rule) is replayed as one experiment, all configurations submitted at
time 0 by one tenant, next to background jobs of the standard trace (Poisson
arrivals from another tenant at ``--load`` of the cluster; by default 1.0 of
2 slots, 0.8 of 4 and 0.5 of 8). Every sweep is run at every ``--slots``
and every seed of ``--seeds``. Per policy and rule:

* ``t_1%``: seconds until the experiment's best-so-far objective is within
  1% of the best final objective of the whole sweep. The objective is
  ``val_loss`` where the trace recorded it (the torch sweeps: held-out data,
  every 50 iterations, as a live job evaluates by default), otherwise, or
  with ``--objective loss``, the training loss as a trailing mean over 20
  iterations (minibatch losses are noisy enough that a raw minimum would be
  luck). The stopping rules and the experiment focus judge the same
  objective; the scheduling policies rank on the training loss.
* ``slot_s``: slot-seconds the experiment's jobs used.
* ``best_stopped``: runs (over seeds) in which the configuration with the
  best final objective was stopped; must be 0.
* ``top_stopped``: configurations among the ``top_k`` by final objective
  that were stopped, summed over seeds: the rule stops a job only when it
  "cannot reach the top k", so each one counted is a wrong call.
* ``stops``: configurations stopped early, mean over seeds.
* ``bg_loss`` / ``bg_done``: the background jobs' time-averaged normalised
  loss and mean completion seconds.

Then, per seed, ``t_1%`` of fair, las, asha and slaq+predictive, their
ratios, whether the best was stopped and the share of slot-seconds
slaq+predictive saved against running every configuration to its end
(fair's ``slot_s``); and last a summary of every sweep and cluster against
issue 41's targets: within 1% of the best no later than las or fair, 1.5x
sooner than fair on average, the best never stopped, and at least 30% of
slot-seconds saved where some configuration is hopeless (its best value over
its whole run is worse than the ``top_k``-th best final value, so it could
never be in the top ``top_k``).

The rules are the live ones (:mod:`backend.scheduling.early_stopping`,
default settings: top 3, at least 100 iterations, ASHA reduction 3), applied
through :class:`backend.simulation.sweep_stopping.SweepStopper`. The
``--seeds`` change the background workload and the order in which
configurations are queued. ``--move-seconds`` sets every curve's chunk
overhead (what a move to another slot costs; a chunk that steps on where
its trainer is loaded pays the dispatch alone) instead of the recorded one:
the recorded sweeps are small models that move in 0.002-0.1 s, while a
10M-parameter model moves in 0.14-2 s.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
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
KEYS = ("t_1%", "slot_s", "stops", "best_stopped", "top_stopped", "bg_loss", "bg_done")
SUMMED = ("best_stopped", "top_stopped")
"""Counts summed over seeds rather than averaged."""
LOADS = {2: 1.0, 4: 0.8, 8: 0.5}
"""Background load by cluster size when ``--load`` is not given: the grid
docs/experiments.md has always reported."""
TOP_K = RuleConfig().top_k
SAVE_TARGET = 0.30
SOONER_TARGET = 1.5


def smoothed(losses: Sequence[float]) -> np.ndarray:
    """Trailing mean over ``SMOOTH`` iterations (fewer at the start)."""
    values = np.asarray(losses, dtype=float)
    sums = np.cumsum(np.concatenate([[0.0], values]))
    ends = np.arange(1, values.size + 1)
    starts = np.maximum(ends - SMOOTH, 0)
    out: np.ndarray = (sums[ends] - sums[starts]) / (ends - starts)
    return out


@functools.cache
def _trace(path: Path, move_seconds: float | None = None) -> Trace:
    """The trace at ``path``, with every curve's move cost (its chunk
    overhead) set to ``move_seconds`` unless that is None."""
    trace = load_trace(path)
    if move_seconds is None:
        return trace
    return Trace(curves=tuple(replace(c, chunk_overhead_seconds=move_seconds)
                              for c in trace.curves))


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
    move_seconds: float | None = None


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
    sweep = _trace(SWEEP_TRACES[case.sweep], case.move_seconds)
    background = _trace(STANDARD_TRACE, case.move_seconds)
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
    top = top_finals(sweep, case.objective)
    bg = figures(SimResult(label, others, 0, 0.0, 0))
    return {
        "t_1%": time_to_target(experiment, target, 0.0, case.objective),
        "slot_s": float(sum(j.attained for j in experiment)),
        "stops": float(sum(j.stopped for j in experiment)),
        "best_stopped": float(any(j.stopped and j.curve.id == best_id for j in experiment)),
        "top_stopped": float(sum(j.stopped and j.curve.id in top for j in experiment)),
        "bg_loss": bg.avg_norm_loss, "bg_done": bg.mean_completion,
    }


def top_finals(sweep: Trace, objective: str, top_k: int = TOP_K) -> set[str]:
    """The ``top_k`` configurations by final objective: those the rule
    promises to keep ("cannot reach the top k" is its only reason to stop)."""
    finals = {c.id: float(series(c, objective)[1][-1]) for c in sweep.curves}
    return set(sorted(finals, key=lambda i: finals[i])[:top_k])


def hopeless(sweep: Trace, objective: str, top_k: int = TOP_K) -> list[str]:
    """Configurations that could never be in the top ``top_k``: their best
    value over their whole run is worse than the ``top_k``-th best final."""
    runs = {c.id: series(c, objective)[1] for c in sweep.curves}
    finals = sorted(float(v[-1]) for v in runs.values())
    if len(finals) <= top_k:
        return []
    bar = finals[top_k - 1]
    return [i for i, v in runs.items() if float(np.min(v)) > bar]


def _cell(value: float, key: str) -> str:
    if key in SUMMED:
        return f"{value:.0f}"
    if key in ("bg_loss",):
        return f"{value:.3f}"
    return "never" if not np.isfinite(value) else f"{value:.1f}"


def _ratio(num: float, den: float) -> float:
    if not np.isfinite(num) and not np.isfinite(den):
        return float("nan")
    if not np.isfinite(num):
        return float("inf")
    return num / den if den > 0 else float("inf")


def _x(value: float) -> str:
    return "  n/a" if np.isnan(value) else ("  inf" if not np.isfinite(value) else
                                              f"{value:.2f}x")


@dataclass
class Cell:
    """One sweep at one cluster size: each row's figures per seed."""

    sweep: str
    slots: int
    load: float
    objective: str
    per_seed: dict[str, list[dict[str, float]]]
    hopeless: int

    def mean(self, label: str, key: str) -> float:
        values = [r[key] for r in self.per_seed[label]]
        return float(sum(values)) if key in SUMMED else float(np.mean(values))

    def saved(self, seed_index: int | None = None) -> float:
        """Share of the slot-seconds of running every configuration to its
        end (fair's) that slaq+predictive did not use."""
        if seed_index is None:
            ours, full = self.mean("slaq+predictive", "slot_s"), self.mean("fair", "slot_s")
        else:
            ours = self.per_seed["slaq+predictive"][seed_index]["slot_s"]
            full = self.per_seed["fair"][seed_index]["slot_s"]
        return 1.0 - ours / full

    def verdicts(self) -> dict[str, bool | None]:
        ours = self.mean("slaq+predictive", "t_1%")
        return {
            "no later than las and fair": ours <= min(self.mean("las", "t_1%"),
                                                      self.mean("fair", "t_1%")),
            "1.5x sooner than fair": _ratio(self.mean("fair", "t_1%"), ours) >= SOONER_TARGET,
            "best never stopped": self.mean("slaq+predictive", "best_stopped") == 0,
            "saves 30%": (self.saved() >= SAVE_TARGET) if self.hopeless else None,
        }


def measure(sweep: str, slots: int, load: float, seeds: Sequence[int],
            choice: str, move_seconds: float | None = None) -> Cell:
    trace = _trace(SWEEP_TRACES[sweep])
    objective = objective_of(trace, choice)
    per_seed = {label: [run(Case(sweep, seed, slots, load, objective, move_seconds), label,
                            policy, rule)
                        for seed in seeds]
                for label, policy, rule in ROWS}
    return Cell(sweep, slots, load, objective, per_seed, len(hopeless(trace, objective)))


def print_cell(cell: Cell, seeds: Sequence[int]) -> None:
    trace = _trace(SWEEP_TRACES[cell.sweep])
    best_id, target = best_final(trace, cell.objective)
    print(f"\n{cell.sweep}: {len(trace.curves)} configurations ({cell.hopeless} hopeless), "
          f"{cell.slots} slots, background load {cell.load}, seeds {list(seeds)} "
          f"(means over seeds; best_stopped summed)\n"
          f"objective {cell.objective}: best final {target:.4g} ({best_id})")
    print(f"{'':16}" + "".join(f"{k:>13}" for k in KEYS))
    for label, _, _ in ROWS:
        print(f"{label:16}" + "".join(f"{_cell(cell.mean(label, k), k):>13}" for k in KEYS))
    print(f"{'seed':>6}{'fair':>8}{'las':>8}{'asha':>8}{'ours':>8}{'fair/ours':>11}"
          f"{'las/ours':>10}{'asha/ours':>11}{'best_stopped':>14}{'saved':>8}")
    for i, seed in enumerate(seeds):
        t = {label: cell.per_seed[label][i]["t_1%"]
             for label in ("fair", "las", "asha", "slaq+predictive")}
        ours = t["slaq+predictive"]
        stopped = cell.per_seed["slaq+predictive"][i]["best_stopped"]
        print(f"{seed:>6}" + "".join(f"{_cell(t[k], 't_1%'):>8}" for k in t)
              + f"{_x(_ratio(t['fair'], ours)):>11}{_x(_ratio(t['las'], ours)):>10}"
              f"{_x(_ratio(t['asha'], ours)):>11}{'yes' if stopped else 'no':>14}"
              f"{cell.saved(i):>8.0%}")


def print_summary(cells: Sequence[Cell]) -> None:
    print("\nsummary (means over seeds): t_1% fair / las / asha / slaq+predictive, "
          "fair/ours, las/ours, best stopped, top-k stopped, slot-seconds saved; targets missed "
          "marked *")
    print(f"{'sweep':18}{'slots':>6}{'fair':>8}{'las':>8}{'asha':>8}{'ours':>8}"
          f"{'fair/ours':>11}{'las/ours':>10}{'best_stopped':>14}{'top_stopped':>13}"
          f"{'saved':>9}")
    ratios = []
    for cell in cells:
        t = {label: cell.mean(label, "t_1%") for label in ("fair", "las", "asha",
                                                           "slaq+predictive")}
        ours = t["slaq+predictive"]
        verdict = cell.verdicts()
        ratios.append(_ratio(t["fair"], ours))
        late = "" if verdict["no later than las and fair"] else "*"
        slow = "" if verdict["1.5x sooner than fair"] else "*"
        lost = "" if verdict["best never stopped"] else "*"
        little = "" if verdict["saves 30%"] in (True, None) else "*"
        saved = f"{cell.saved():.0%}" + ("" if cell.hopeless else " (-)")
        print(f"{cell.sweep:18}{cell.slots:>6}" + "".join(f"{_cell(t[k], 't_1%'):>8}"
                                                        for k in t)
              + f"{_x(ratios[-1]) + slow:>11}{_x(_ratio(t['las'], ours)) + late:>10}"
              f"{cell.mean('slaq+predictive', 'best_stopped'):>13.0f}{lost:1}"
              f"{cell.mean('slaq+predictive', 'top_stopped'):>13.0f}{saved + little:>9}")
    finite = [r for r in ratios if np.isfinite(r)]
    if finite:
        print(f"fair/ours over every sweep and cluster: mean {np.mean(finite):.2f}x, "
              f"geometric mean {float(np.exp(np.mean(np.log(finite)))):.2f}x "
              f"(target {SOONER_TARGET}x); saved (-): no configuration is hopeless")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", nargs="+", default=list(SWEEP_TRACES),
                        choices=list(SWEEP_TRACES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--slots", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--load", type=float, default=None,
                        help="background load, as a fraction of the cluster (default: "
                        + ", ".join(f"{v} at {k} slots" for k, v in LOADS.items()) + ")")
    parser.add_argument("--objective", choices=("auto", "loss"), default="auto",
                        help="auto: val_loss where the sweep recorded it")
    parser.add_argument("--move-seconds", type=float, default=None,
                        help="every curve's move cost in seconds instead of the recorded one")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    if args.move_seconds is not None and args.move_seconds < 0:
        parser.error("--move-seconds must be 0 or more")
    for sweep in args.sweeps:
        if not SWEEP_TRACES[sweep].exists():
            parser.error(f"{SWEEP_TRACES[sweep]} is missing: slaq record-trace --preset {sweep}")
    cells = []
    for sweep in args.sweeps:
        for slots in args.slots:
            load = args.load if args.load is not None else LOADS.get(slots, 0.8)
            cell = measure(sweep, slots, load, args.seeds, args.objective, args.move_seconds)
            print_cell(cell, args.seeds)
            cells.append(cell)
    print_summary(cells)
    if args.json_out:
        report = {f"{c.sweep}@{c.slots}": {
            "slots": c.slots, "load": c.load, "objective": c.objective, "seeds": args.seeds,
            "hopeless": c.hopeless, "saved": c.saved(),
            "targets": c.verdicts(),
            "means": {label: {k: c.mean(label, k) for k in KEYS} for label, _, _ in ROWS},
            "per_seed": c.per_seed} for c in cells}
        args.json_out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
