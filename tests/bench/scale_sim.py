"""Scale: thousands of jobs on a thousand slots in several pools, through the
live policy and placement code, with each decision's time charged to the clock.

    .venv/bin/python -m tests.bench.scale_sim [--jobs 10000] [--slots 1000] [--seed 0]
        [--policies fair las slaq] [--load 2.0] [--gpu-speedup 4] [--chunk-seconds 1.0]
        [--no-charge] [--profile slaq]

The cluster (fractions of ``--slots``): ``cpu`` 70% (16 GiB workers), ``gpu``
20% (GPU, 64 GiB; jobs that want a GPU run ``--gpu-speedup`` times faster
there) and ``acme`` 10% (32 GiB) reserved for tenant 4. Four tenants submit
round-robin; tenant 2 may hold at most a quarter of the GPU slots.

Jobs are Poisson arrivals (:func:`~backend.scheduling.workload.generate_workload`,
``--load`` times the slots' capacity at recorded CPU speed) of the recorded
curves of ``data/traces/standard.json`` (the sklearn-style trainers) and
``data/traces/torch.json`` (the PyTorch trainers). Requirements, drawn with
the seed: torch jobs 40% need a GPU, the rest prefer one (the portal's
default for torch trainers); other jobs 3% need 32 GiB of memory (so only the
GPU pool, or acme's for tenant 4, can run them), 5% name the ``cpu`` pool, the
rest need nothing.

Every decision is the live scheduler's: the policy ranks the free slots plus
32 jobs, ``split_grants`` checks the ranking, ``placement.place`` maps it to
pools. Its wall time (allocate + check + place) is added to the simulated
clock (``--no-charge`` turns that off). Printed per policy: decision time per
round (median, p95, max) and in total, slot utilisation per pool (busy slot
time over pool slots x makespan), mean completion, average normalised loss,
makespan, grants, grants rejected by the hard-limit check, and top-ranked
grants no pool could take that round ("unplaced"). Decision times are
measured on this machine and vary run to run; the figures are not asserted.
``--profile NAME`` runs that policy under cProfile and prints the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import time
from collections.abc import Sequence

import numpy as np

from backend.scheduling.metrics import figures
from backend.scheduling.simulator import (
    RANKING_EXTRA,
    SimConfig,
    SimPool,
    SimResult,
    build_policy,
    simulate,
)
from backend.scheduling.trace import Trace, load_trace
from backend.scheduling.types import Requirements, TenantView
from backend.scheduling.workload import Arrival, generate_workload
from backend.simulation.cli import STANDARD_TRACE

TRACE_DIR = STANDARD_TRACE.parent

ACME = 4
TENANTS = 4
GPU_QUOTA_TENANT = 2


def cluster(slots: int, speedup: float) -> tuple[SimPool, ...]:
    gpu = max(1, round(0.2 * slots))
    acme = max(1, round(0.1 * slots))
    return (SimPool("cpu", slots - gpu - acme, memory_mb=16384),
            SimPool("gpu", gpu, gpu=True, speedup=speedup, memory_mb=65536),
            SimPool("acme", acme, memory_mb=32768, reserved_for=frozenset({ACME})))


def tenants(pools: Sequence[SimPool]) -> dict[int, TenantView]:
    total = sum(p.slots for p in pools)
    gpu = next(p.slots for p in pools if p.gpu)
    out = {t: TenantView(t, max_slots=total) for t in range(1, TENANTS + 1)}
    out[GPU_QUOTA_TENANT] = TenantView(GPU_QUOTA_TENANT, max_slots=total,
                                       pool_slots={"gpu": max(1, gpu // 4)})
    return out


TRACES = ("standard", "sweep-numpy", "torch", "sweep-torch")


def mixed_trace() -> Trace:
    curves = tuple(c for name in TRACES for c in load_trace(TRACE_DIR / f"{name}.json").curves)
    return Trace(curves, description=" + ".join(TRACES))


def requirements(trace: Trace, arrivals: Sequence[Arrival], seed: int
                 ) -> dict[int, Requirements]:
    rng = np.random.default_rng(seed + 1)
    torch = {c.id for c in trace.curves if c.algorithm.startswith(("torch", "char_"))}
    out: dict[int, Requirements] = {}
    for a in arrivals:
        draw = rng.random()
        if a.curve_id in torch:
            out[a.index] = Requirements(gpu=True) if draw < 0.4 else Requirements(prefer_gpu=True)
        elif draw < 0.03:
            out[a.index] = Requirements(min_memory_mb=32768)
        elif draw < 0.08:
            out[a.index] = Requirements(pool="cpu")
    return out


def run(policy_name: str, trace: Trace, arrivals: list[Arrival],
        needs: dict[int, Requirements], config: SimConfig, profile: bool, collect: bool
        ) -> tuple[SimResult, float, str]:
    policy = build_policy(policy_name, trace, arrivals)
    profiler = cProfile.Profile() if profile else None
    gc.collect()
    if not collect:
        # The simulated jobs' histories (millions of loss points, no cycles)
        # would make every full collection walk them, inside whichever
        # decision triggers it; the live scheduler's heap holds far less.
        gc.disable()
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    try:
        result = simulate(policy, trace, arrivals, config, requirements=needs)
    finally:
        if profiler is not None:
            profiler.disable()
        gc.enable()
    wall = time.perf_counter() - started
    report = ""
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        report = out.getvalue()
    return result, wall, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", nargs="+", default=["fair", "las", "slaq"])
    parser.add_argument("--load", type=float, default=2.0,
                        help="offered load at recorded (CPU) speed; GPUs make it lighter")
    parser.add_argument("--gpu-speedup", type=float, default=4.0)
    parser.add_argument("--chunk-seconds", type=float, default=1.0)
    parser.add_argument("--no-charge", action="store_true",
                        help="do not add decision time to the simulated clock (slow: "
                        "every arrival and chunk end is then a decision)")
    parser.add_argument("--profile", metavar="POLICY", help="run this policy under cProfile")
    parser.add_argument("--ranking-extra", type=int, default=RANKING_EXTRA,
                        help="grants asked for beyond the free slots (live: BACKLOG_LENGTH)")
    parser.add_argument("--gc", action="store_true",
                        help="leave Python's cyclic garbage collector on while simulating")
    args = parser.parse_args(argv)

    trace = mixed_trace()
    pools = cluster(args.slots, args.gpu_speedup)
    arrivals = generate_workload(trace, slots=args.slots, load=args.load, jobs=args.jobs,
                                 seed=args.seed, tenants=TENANTS,
                                 chunk_seconds=args.chunk_seconds)
    needs = requirements(trace, arrivals, args.seed)
    config = SimConfig(slots=args.slots, chunk_seconds=args.chunk_seconds,
                       tenants=tenants(pools), pools=pools,
                       charge_decisions=not args.no_charge, ranking_extra=args.ranking_extra)
    kinds = {"gpu": sum(r.gpu for r in needs.values()),
             "prefer_gpu": sum(r.prefer_gpu for r in needs.values()),
             "memory": sum(r.min_memory_mb > 0 for r in needs.values()),
             "pool cpu": sum(r.pool == "cpu" for r in needs.values())}
    print(f"{len(arrivals)} jobs over {arrivals[-1].time:.0f} s on {args.slots} slots ("
          + ", ".join(f"{p.name} {p.slots}{' GPU x' + format(p.speedup, 'g') if p.gpu else ''}"
                      for p in pools)
          + f"), load {args.load:g}, {args.chunk_seconds:g} s chunks, seed {args.seed}; "
          f"requirements: " + ", ".join(f"{k} {v}" for k, v in kinds.items())
          + f"; decision time {'not ' if args.no_charge else ''}charged; ranking: free slots + "
          f"{args.ranking_extra}", flush=True)

    rows: dict[str, dict[str, float]] = {}
    for name in args.policies:
        print(f"\n(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)", end="")
        result, wall, report = run(name, trace, arrivals, needs, config, name == args.profile,
                                   args.gc)
        fig = figures(result)
        times = np.asarray(result.decision_times) * 1000
        util = result.utilisation()
        rows[name] = {"avg_norm_loss": fig.avg_norm_loss, "mean_completion": fig.mean_completion,
                      "makespan": fig.makespan, "charged": result.charged_seconds}
        print(f"\n{name}: {result.decisions} decisions, {result.grants} grants, "
              f"simulated in {wall:.0f} s wall")
        print(f"  decision time per round: median {np.median(times):.1f} ms, "
              f"p95 {np.percentile(times, 95):.1f} ms, max {times.max():.1f} ms; "
              f"total {result.decision_seconds:.1f} s, charged {result.charged_seconds:.1f} s "
              f"({100 * result.charged_seconds / fig.makespan:.1f}% of the makespan)")
        overall = sum(result.pool_busy.values()) / (args.slots * fig.makespan)
        loaded = result.utilisation(0.0, arrivals[-1].time)
        print("  utilisation to the last finish: "
              + ", ".join(f"{pool} {100 * u:.1f}%" for pool, u in util.items())
              + f"; overall {100 * overall:.1f}%; while jobs arrive (0-{arrivals[-1].time:.0f} s): "
              + ", ".join(f"{pool} {100 * u:.1f}%" for pool, u in loaded.items()))
        print(f"  mean completion {fig.mean_completion:.2f} s, avg normalised loss "
              f"{fig.avg_norm_loss:.4f}, t95 {fig.t95_mean:.2f} s, makespan {fig.makespan:.1f} s")
        print(f"  grants rejected (hard limits) {result.rejected}, "
              f"top-ranked grants no pool could take {result.unplaced} "
              f"({result.unplaced / max(result.decisions, 1):.1f} a decision)")
        print("  slots a decision left free although a waiting job could run there, on "
              "average: " + ", ".join(
            f"{pool.name} {result.left_free.get(pool.name, 0) / max(result.decisions, 1):.1f}"
            for pool in pools))
        gpu_jobs = [j for j in result.jobs if j.requirements.gpu]
        on_gpu = sum(c == "gpu" for j in result.jobs if j.requirements.prefer_gpu
                     for c in j.chunk_pools)
        preferring = sum(len(j.chunk_pools) for j in result.jobs if j.requirements.prefer_gpu)
        print(f"  GPU-only jobs off the GPU pool: "
              f"{sum(c != 'gpu' for j in gpu_jobs for c in j.chunk_pools)} chunks; "
              f"GPU-preferring chunks on the GPU: {on_gpu} of {preferring}")
        if report:
            print(report)
        del result
    if "fair" in rows and len(rows) > 1:
        print("\nvs fair (positive = lower = better):")
        base = rows["fair"]
        for name, row in rows.items():
            if name == "fair":
                continue
            print(f"  {name}: " + ", ".join(
                f"{key} {100 * (1 - row[key] / base[key]):+.1f}%"
                for key in ("avg_norm_loss", "mean_completion", "makespan") if base[key] > 0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
