"""Scheduling quality and completion time of every policy, per trace, over a grid.

    .venv/bin/python -m tests.bench.quality [--traces standard synthetic:1]
        [--seeds 3 4 5] [--slots 2 4] [--loads 1.2 2.0] [--chunks 0.1 1.0]
        [--procs 2] [--report quality.html] [--json-out quality.json]

Traces: ``standard`` (``data/traces/standard.json``, the portal's own
trainers), ``torch`` (``data/traces/torch.json``, the PyTorch trainers) and
``synthetic:<seed>`` (:mod:`backend.scheduling.synthetic`: power-law,
exponential, plateau, step-LR, noisy, stall and diverging curves,
loss scales 1e-2..1e4). Policies were tuned on synthetic seed 0 and workload
seeds 0-2; report on synthetic seed 1 and workload seeds 3-5 (held out).

For each trace and cell (slots x load x chunk seconds) the same workloads
run under every policy; figures are averaged over workload seeds. The
headline puts quality (avg normalised loss, time to 95%) next to mean
completion time, as slaq's change against ``fair`` and ``las`` (positive =
slaq better) and its gap to ``oracle`` (positive = slaq worse). ``avg``
is the paper's measure over the active jobs; ``arrived`` the same over
every arrived job, finished ones at their final loss
(``Figures.arrived_norm_loss``), which does not
reward keeping converged jobs waiting. Synthetic
traces are also broken down per curve shape (time to 95% and completion of
the jobs of that shape in the same runs).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path
from typing import TypeVar

import numpy as np

from backend.scheduling.metrics import Figures, figures, time_to_fraction
from backend.scheduling.residency import IDLE_CHUNK_FACTOR, SWITCH_SHARE
from backend.scheduling.simulator import SimConfig, SimResult, build_policy, simulate
from backend.scheduling.synthetic import shape_of, synthetic_trace
from backend.scheduling.trace import Trace, load_trace
from backend.scheduling.workload import generate_workload
from backend.simulation.cli import STANDARD_TRACE, TORCH_TRACE

SLOTS = (2, 4)
LOADS = (1.2, 2.0)
CHUNKS = (0.1, 1.0)
POLICIES = ("fair", "las", "slaq", "oracle")
KEYS = list(Figures.__dataclass_fields__)
HEADLINE = ("avg_norm_loss", "arrived_norm_loss", "t95_mean", "mean_completion")

Cell = tuple[str, int, float, float]  # trace, slots, load, chunk seconds
T = TypeVar("T")
R = TypeVar("R")


@cache
def get_trace(name: str) -> Trace:
    if name == "standard":
        return load_trace(STANDARD_TRACE)
    if name == "torch":
        return load_trace(TORCH_TRACE)
    if name.startswith("synthetic:"):
        return synthetic_trace(seed=int(name.split(":", 1)[1]))
    return load_trace(name)


def per_shape(result: SimResult) -> dict[str, dict[str, float]]:
    groups: dict[str, list[tuple[float, float]]] = {}
    for job in result.jobs:
        done = (job.finish or 0.0) - job.arrival
        groups.setdefault(shape_of(job.curve.id), []).append((time_to_fraction(job, 0.95), done))
    return {shape: {"t95_mean": float(np.mean([t for t, _ in v])),
                    "mean_completion": float(np.mean([c for _, c in v]))}
            for shape, v in groups.items()}


def run_cell(args: tuple[str, int, float, float, int, tuple[str, ...], bool, float, float]
             ) -> dict[str, dict[str, object]]:
    name, slots, load, chunk, seed, policies, residency, share, idle = args
    trace = get_trace(name)
    arrivals = generate_workload(trace, slots=slots, load=load, seed=seed, chunk_seconds=chunk)
    config = SimConfig(slots=slots, chunk_seconds=chunk, residency=residency,
                       switch_share=share, idle_factor=idle)
    out: dict[str, dict[str, object]] = {}
    for policy in policies:
        result = simulate(build_policy(policy, trace, arrivals), trace, arrivals, config)
        out[policy] = {"figures": figures(result).as_dict(), "shapes": per_shape(result)}
    return out


def run_tasks(work: Callable[[T], R], tasks: list[T], procs: int) -> list[R]:
    """``work`` over ``tasks``, in order, on ``procs`` processes (simulations are CPU-bound)."""
    if procs <= 1:
        return [work(t) for t in tasks]
    with ProcessPoolExecutor(procs) as pool:
        return list(pool.map(work, tasks))


def change(ours: float, theirs: float) -> float:
    """100 * (1 - ours / theirs): positive means ours is lower (better)."""
    return 100.0 * (1.0 - ours / theirs) if theirs > 0 else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", nargs="+", default=["standard", "synthetic:1"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 4, 5])
    parser.add_argument("--slots", type=int, nargs="+", default=list(SLOTS))
    parser.add_argument("--loads", type=float, nargs="+", default=list(LOADS))
    parser.add_argument("--chunks", type=float, nargs="+", default=list(CHUNKS),
                        help="chunk seconds (1.0 is the live default)")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--procs", type=int, default=1, help="parallel worker processes")
    parser.add_argument("--report", type=Path, help="write a Plotly HTML report here")
    parser.add_argument("--json-out", type=Path, help="write averaged figures as JSON here")
    parser.add_argument("--no-residency", action="store_true",
                        help="every chunk pays its whole overhead (the model before resident "
                        "trainers), to compare with")
    parser.add_argument("--switch-share", type=float, default=SWITCH_SHARE,
                        help="a moving job's chunk is stretched until its switch is at most "
                        "this share of it (1: never stretched)")
    parser.add_argument("--idle-factor", type=float, default=IDLE_CHUNK_FACTOR,
                        help="chunks granted while slots stay idle are up to this many chunks "
                        "long (1: never)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    tasks = [(t, s, load, c, seed, tuple(args.policies), not args.no_residency,
              args.switch_share, args.idle_factor)
             for t in args.traces
             for s in args.slots for load in args.loads for c in args.chunks
             for seed in args.seeds]
    raw = run_tasks(run_cell, tasks, args.procs)
    grid: dict[Cell, dict[str, dict[str, float]]] = {}
    shapes: dict[str, dict[str, dict[str, list[float]]]] = {}
    for (t, s, load, c, *_), runs in zip(tasks, raw, strict=True):
        cell = grid.setdefault((t, s, load, c), {})
        for policy, got in runs.items():
            acc = cell.setdefault(policy, {k: 0.0 for k in KEYS})
            figs: dict[str, float] = got["figures"]  # type: ignore[assignment]
            for k in KEYS:
                acc[k] += figs[k] / len(args.seeds)
            by_shape: dict[str, dict[str, float]] = got["shapes"]  # type: ignore[assignment]
            for shape, vals in by_shape.items():
                for k, v in vals.items():
                    shapes.setdefault(f"{t}|{shape}", {}).setdefault(policy, {}).setdefault(
                        k, []).append(v)
    summary = headline(grid, args.policies)
    if any(t.startswith("synthetic") for t in args.traces):
        shape_table(shapes)
    print(f"\n{len(tasks)} workloads x {len(args.policies)} policies in "
          f"{time.perf_counter() - started:.0f}s (seeds {args.seeds}, chunks {args.chunks})")
    if args.json_out:
        args.json_out.write_text(json.dumps(
            {"|".join(map(str, key)): figs for key, figs in grid.items()}, indent=1))
    if args.report:
        write_report(args.report, grid, summary)
        print(f"report written to {args.report}")
    return 0


def headline(grid: dict[Cell, dict[str, dict[str, float]]], policies: list[str]
             ) -> dict[str, dict[Cell, float]]:
    """One markdown row per cell: quality next to completion time; returns slaq's changes."""
    comparisons = [(base, k) for base in ("fair", "las") for k in HEADLINE] + [
        ("oracle", "avg_norm_loss")]
    cols = [f"{k.split('_')[0] if k != 'mean_completion' else 'compl'} vs {b}"
            for b, k in comparisons]
    print("\n| trace | slots | load | chunk | " + " | ".join(
        f"{p} loss" for p in policies) + " | slaq compl (s) | " + " | ".join(cols) + " |")
    print("|" + "---|" * (5 + len(policies) + len(cols)))
    summary: dict[str, dict[Cell, float]] = {}
    for key in sorted(grid):
        figs = grid[key]
        if "slaq" not in figs:
            continue
        row = [figs[p]["avg_norm_loss"] for p in policies]
        diffs = []
        for base, k in comparisons:
            if base not in figs:
                diffs.append(float("nan"))
                continue
            # The oracle column is slaq's excess over the oracle (positive = worse).
            v = (-change(figs["slaq"][k], figs[base][k]) if base == "oracle"
                 else change(figs["slaq"][k], figs[base][k]))
            diffs.append(v)
            summary.setdefault(f"{key[0]} vs {base}: {k}", {})[key] = v
        t, s, load, c = key
        print(f"| {t} | {s} | {load:g} | {c:g} | " + " | ".join(f"{v:.4f}" for v in row)
              + f" | {figs['slaq']['mean_completion']:.2f} | "
              + " | ".join(f"{v:+.1f}%" for v in diffs) + " |")
    print("\n== slaq over the grid, per trace (min / mean / max; positive = slaq better, "
          "except 'vs oracle' = slaq's excess) ==")
    for name, values in summary.items():
        cells = np.array(list(values.values()))
        print(f"{name:<44} {cells.min():+7.1f} / {cells.mean():+7.1f} / {cells.max():+7.1f}")
    return summary


def shape_table(shapes: dict[str, dict[str, dict[str, list[float]]]]) -> None:
    print("\n== per shape (mean over cells and seeds): slaq's change in t95 and completion ==")
    print("| trace | shape | t95 vs fair | t95 vs las | t95 gap to oracle | compl vs fair "
          "| compl vs las |")
    print("|---|---|---|---|---|---|---|")
    for key in sorted(shapes):
        by = {p: {k: float(np.mean(v)) for k, v in d.items()} for p, d in shapes[key].items()}
        if "slaq" not in by:
            continue
        ours = by["slaq"]

        def pct(base: str, k: str, ours: dict[str, float] = ours,
                by: dict[str, dict[str, float]] = by) -> str:
            return f"{change(ours[k], by[base][k]):+.1f}%" if base in by else "-"

        gap = (f"{-change(ours['t95_mean'], by['oracle']['t95_mean']):+.1f}%"
               if "oracle" in by else "-")
        trace, shape = key.split("|")
        print(f"| {trace} | {shape} | {pct('fair', 't95_mean')} | {pct('las', 't95_mean')} "
              f"| {gap} | {pct('fair', 'mean_completion')} | {pct('las', 'mean_completion')} |")


def write_report(path: Path, grid: dict[Cell, dict[str, dict[str, float]]],
                 summary: dict[str, dict[Cell, float]]) -> None:
    import plotly.graph_objects as go

    from backend.simulation.report import table_figure, write_html

    figs = []
    for name, values in summary.items():
        keys = sorted(values)
        bar = go.Figure(go.Bar(x=[f"{s}x{load:g}@{c:g}s" for _, s, load, c in keys],
                               y=[values[k] for k in keys]))
        bar.update_layout(title=f"slaq {name} (%)", height=300)
        figs.append(bar)
    for key, cell in sorted(grid.items()):
        rows = [[p] + [cell[p][k] for k in KEYS] for p in cell]
        figs.append(table_figure(["policy", *KEYS], rows,
                                 "{} {} slots, load {}, chunk {}s".format(*key)))
    write_html(path, "SLAQ scheduling quality, simulated", figs)


if __name__ == "__main__":
    raise SystemExit(main())
