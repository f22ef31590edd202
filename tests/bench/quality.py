"""Scheduling quality of every policy on the standard workload, over slots x load.

    .venv/bin/python -m tests.bench.quality [--seeds 0 1 2] [--report quality.html]

For each grid cell the same workloads (one per seed) run under every policy;
figures are averaged over seeds. Printed: the figures, slaq's improvement over
``fair`` and ``las`` (positive = better) and its gap to ``oracle``.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from backend.scheduling.metrics import Figures
from backend.simulation.cli import SIM_POLICIES, STANDARD_TRACE, run_policies

SLOTS = (2, 4, 8)
LOADS = (0.8, 1.2, 2.0)
KEYS = list(Figures.__dataclass_fields__)
HEADLINE = ("avg_norm_loss", "t90_mean", "t95_mean", "mean_completion")


def cell(args: tuple[Path, int, float, int, float, tuple[str, ...]]) -> dict[str, dict[str, float]]:
    trace, slots, load, seed, chunk, policies = args
    runs = run_policies(trace, list(policies), slots=slots, load=load, seed=seed,
                        chunk_seconds=chunk)
    return {name: fig.as_dict() for name, (_, fig) in runs.items()}


def better(ours: float, theirs: float) -> float:
    """Improvement in percent: 100 * (1 - ours / theirs); positive means lower is ours."""
    return 100.0 * (1.0 - ours / theirs) if theirs > 0 else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", type=Path, default=STANDARD_TRACE)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--slots", type=int, nargs="+", default=list(SLOTS))
    parser.add_argument("--loads", type=float, nargs="+", default=list(LOADS))
    parser.add_argument("--chunk-seconds", type=float, default=0.1)
    parser.add_argument("--policies", nargs="+", default=list(SIM_POLICIES))
    parser.add_argument("--procs", type=int, default=1, help="parallel worker processes")
    parser.add_argument("--report", type=Path, help="write a Plotly HTML report here")
    parser.add_argument("--json-out", type=Path, help="write raw figures as JSON here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    tasks = [(args.trace, s, load, seed, args.chunk_seconds, tuple(args.policies))
             for s in args.slots for load in args.loads for seed in args.seeds]
    if args.procs > 1:
        with ProcessPoolExecutor(args.procs) as pool:
            raw = list(pool.map(cell, tasks))
    else:
        raw = [cell(t) for t in tasks]
    grid: dict[tuple[int, float], dict[str, dict[str, float]]] = {}
    for (_, s, load, _, _, _), figs in zip(tasks, raw, strict=True):
        grid.setdefault((s, load), {})
        for name, fig in figs.items():
            acc = grid[(s, load)].setdefault(name, {k: 0.0 for k in KEYS})
            for k in KEYS:
                acc[k] += fig[k] / len(args.seeds)
    summary = report_grid(grid, args.policies)
    print(f"\n{len(tasks)} workloads x {len(args.policies)} policies in "
          f"{time.perf_counter() - started:.0f}s (seeds {args.seeds}, "
          f"chunk {args.chunk_seconds}s, trace {args.trace.name})")
    if args.json_out:
        args.json_out.write_text(json.dumps(
            {f"{s}x{load}": figs for (s, load), figs in grid.items()}, indent=1))
    if args.report:
        write_report(args.report, grid, summary)
        print(f"report written to {args.report}")
    return 0


def report_grid(grid: dict[tuple[int, float], dict[str, dict[str, float]]],
                policies: list[str]) -> dict[str, dict[tuple[int, float], float]]:
    """Print one table per cell and a summary; returns slaq's ratios per cell."""
    summary: dict[str, dict[tuple[int, float], float]] = {}
    for (s, load), figs in sorted(grid.items()):
        print(f"\n== {s} slots, load {load} ==")
        print(f"{'policy':<13}" + "".join(f"{k:>16}" for k in KEYS))
        for name in policies:
            print(f"{name:<13}" + "".join(f"{figs[name][k]:>16.4g}" for k in KEYS))
        if "slaq" not in figs:
            continue
        for base in ("fair", "las", "slaq-classic", "oracle"):
            if base not in figs:
                continue
            gains = {k: better(figs["slaq"][k], figs[base][k]) for k in HEADLINE}
            print(f"slaq vs {base:<13}" + "  ".join(f"{k} {v:+.1f}%" for k, v in gains.items()))
            for k, v in gains.items():
                summary.setdefault(f"vs {base}: {k}", {})[(s, load)] = v
    print("\n== slaq summary over the grid (improvement %, positive = slaq lower/better) ==")
    for key, values in summary.items():
        cells = np.array(list(values.values()))
        print(f"{key:<38} min {cells.min():+7.1f}  mean {cells.mean():+7.1f}  "
              f"max {cells.max():+7.1f}")
    return summary


def write_report(path: Path, grid: dict[tuple[int, float], dict[str, dict[str, float]]],
                 summary: dict[str, dict[tuple[int, float], float]]) -> None:
    import plotly.graph_objects as go

    from backend.simulation.report import table_figure, write_html

    figures = []
    slots = sorted({s for s, _ in grid})
    loads = sorted({load for _, load in grid})
    for key in ("vs fair: avg_norm_loss", "vs las: avg_norm_loss", "vs oracle: avg_norm_loss",
                "vs fair: t95_mean", "vs fair: mean_completion"):
        if key not in summary:
            continue
        z = [[summary[key].get((s, load), np.nan) for load in loads] for s in slots]
        heat = go.Figure(go.Heatmap(z=z, x=[f"load {x}" for x in loads],
                                    y=[f"{s} slots" for s in slots], colorscale="RdBu",
                                    zmid=0, texttemplate="%{z:.1f}%"))
        heat.update_layout(title=f"slaq improvement {key} (positive = better)", height=350)
        figures.append(heat)
    for (s, load), figs in sorted(grid.items()):
        rows = [[name] + [figs[name][k] for k in KEYS] for name in figs]
        figures.append(table_figure(["policy", *KEYS], rows, f"{s} slots, load {load}"))
    write_html(path, "SLAQ scheduling quality, simulated", figures)


if __name__ == "__main__":
    raise SystemExit(main())
