"""Live vs simulated: workloads, slaq vs fair and las, on real workers and
in the simulator, figures side by side.

    .venv/bin/python -m tests.bench.live_compare [--jobs 16] [--load 1.5] [--seeds 0 ...]

Each policy gets a fresh portal (2 real Celery worker slots, real Redis, an
SQLite database). Jobs are submitted at the workload's arrival times with the
recorded curves' algorithm, dataset, parameters and seed, and run for the
recorded number of iterations, after warm-up jobs of another kind have run on
every slot (a worker process's first chunk pays its imports, once per
process; the simulator models steady state). The live figures are computed
with the simulator's own metric code, each loss point dated when its iteration
ended (:func:`iteration_times`).

The simulator runs twice per policy: on the trace as recorded (``sim``), and
on the curves the live jobs produced (``sim@live``). Live jobs train on the
hold-out split's training rows, the trace on every row, so their losses and
speeds differ from the recording; training is deterministic, so every live
run of a configuration gives the same losses (checked and printed), and
``sim@live`` replays those losses with their mean measured seconds per
iteration. Each ``sim@live`` chunk is charged the live cost beyond compute,
fitted over every live chunk as a fixed part plus a part per iteration: a
chunk's wall time (grant to the commit of its loss points) less its
iterations' compute seconds; each decision is charged the scheduler's
mean delay before a grant (from the arrival or chunk end that let it run);
the policy sees a job's newest ``LIVE_HISTORY_POINTS`` loss points, as the live
scheduler's history cache holds them; and a job's attained service counts
its iterations' seconds only, as live.
Two live runs never time alike, and a schedule can turn on a few
milliseconds, so ``sim@live`` is the mean of ``--copies`` simulations, all
but the first with each configuration's seconds scaled by a factor drawn
with the live runs' own timing spread; the range over the copies is printed.
With several ``--seeds`` the slaq/fair and slaq/las ratios are also compared
over all the workloads.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.models import Decision, Job, LossRecord, as_utc
from backend.scheduling.metrics import Figures, figures
from backend.scheduling.simulator import SimConfig, SimJob, SimResult, build_policy, simulate
from backend.scheduling.trace import Trace, TraceCurve, load_trace
from backend.scheduling.types import LIVE_HISTORY_POINTS
from backend.scheduling.workload import Arrival, generate_workload
from backend.services.portal_trace import iteration_times
from backend.simulation.cli import STANDARD_TRACE
from tests.utils.portal import make_user_token, start_portal
from tests.utils.services import BENCH_REDIS_DB, test_redis

SLOTS = 2
WARM_UP = {"algorithm": "logistic_regression", "dataset": "wine",
           "stopping": {"max_iterations": 200, "tolerance": None}}
"""Run by every worker slot before the workload: a worker process's first chunk
pays its imports (seconds), once per process, not per job. A kind the standard
trace does not have, so it teaches the scheduler no speed the simulator lacks."""


def _epoch(moment: datetime) -> float:
    return as_utc(moment).timestamp()


ChunkCost = tuple[int, float, float]  # iterations, live compute, live wall (seconds)
LiveCurves = dict[int, tuple[list[float], list[float], list[float]]]
"""Per arrival index, the live job's losses, measured seconds and commit time
per iteration (seconds since the first arrival)."""


def chunk_costs(jobs: list[SimJob], live_seconds: dict[int, list[float]],
                grants: dict[int, list[tuple[float, int]]]
                ) -> tuple[list[ChunkCost], list[float]]:
    """Each live chunk's iterations, compute seconds (its iterations' measured
    seconds, ``live_seconds`` per job) and wall seconds, and the scheduler's
    delays before grants. Wall seconds:
    from its grant to its last loss point's commit. A delay: from the later of
    the latest chunk end before the grant and the job's own arrival or
    previous chunk end, to the grant. ``grants`` maps a job to its
    (grant time, iterations), in chunk order; times on the jobs' clock."""
    # (granted, ready: when the job could run, ended, iterations, live compute)
    chunks: list[tuple[float, float, float, int, float]] = []
    for job in jobs:
        done, ready = 0, job.arrival
        for granted, iterations in grants.get(job.job_id, []):
            last = min(done + iterations, len(job.iteration_times))
            if last <= done:
                break
            ended = job.iteration_times[last - 1]
            chunks.append((granted, ready, ended, last - done,
                           sum(live_seconds[job.job_id][done:last])))
            done, ready = last, ended
    ends = sorted(chunk[2] for chunk in chunks)
    costs, delays = [], []
    for granted, ready, ended, iterations, live_compute in chunks:
        costs.append((iterations, live_compute, ended - granted))
        # The slot this grant took was freed at the latest chunk end before it;
        # the job waited from then, or from when it could first run. A wait of
        # more than a second is a policy's choice, not the scheduler's reaction.
        before = [e for e in ends if e <= granted]
        gap = granted - max(before[-1] if before else ready, ready)
        if 0 <= gap < 1.0:
            delays.append(gap)
    return costs, delays


def fit_cost(costs: list[ChunkCost]) -> tuple[float, float]:
    """(seconds per chunk, seconds per iteration) of the live chunks' wall time
    beyond their compute, by least squares: a chunk also pays for recording
    and publishing each of its loss points, which the iterations' measured
    seconds leave out (about 20 us each here, 0.08 s in a 4,000-iteration chunk)."""
    design = np.array([[1.0, iterations] for iterations, _, _ in costs])
    beyond = np.array([wall - live for _, live, wall in costs])
    fixed, per_iteration = np.linalg.lstsq(design, beyond, rcond=None)[0]
    return max(float(fixed), 0.0), max(float(per_iteration), 0.0)


def live_trace(trace: Trace, arrivals: list[Arrival], runs: list[LiveCurves]
               ) -> tuple[Trace, float, float]:
    """The trace of what the live jobs trained: per configuration, the live
    losses and the mean measured seconds of each iteration over every live
    job that ran it. Also returns the largest relative difference between
    two live runs' losses (~0 when training is deterministic) and between
    the live losses and the recording."""
    curve_of = {a.index: a.curve_id for a in arrivals}
    seen: dict[str, list[tuple[list[float], list[float], list[float]]]] = {}
    for run in runs:
        for index, points in run.items():
            seen.setdefault(curve_of[index], []).append(points)
    between = recorded = 0.0
    curves: list[TraceCurve] = []
    for curve in trace.curves:
        if curve.id not in seen:
            continue
        losses = np.array(seen[curve.id][0][0])
        for other, _, _ in seen[curve.id]:
            between = max(between, _relative(np.array(other), losses))
        recorded = max(recorded, _relative(losses, np.array(curve.losses[: len(losses)])))
        seconds = np.mean([s for _, s, _ in seen[curve.id]], axis=0)
        curves.append(replace(curve, losses=tuple(losses.tolist()),
                              seconds=tuple(seconds.tolist())))
    return replace(trace, curves=tuple(curves)), between, recorded


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return math.inf
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12), initial=0.0))


def at_live_cost(trace: Trace, fixed: float, per_iteration: float) -> Trace:
    return replace(trace, curves=tuple(
        replace(c, seconds=tuple(s + per_iteration for s in c.seconds),
                chunk_overhead_seconds=fixed) for c in trace.curves))


def run_live(policy: str, trace: Trace, arrivals: list[Arrival], chunk_seconds: float,
             redis_url: str, root: Path
             ) -> tuple[SimResult, LiveCurves, tuple[list[ChunkCost], list[float]]]:
    """Replays ``arrivals`` on a fresh portal; returns the result, the live
    jobs' curves and the live chunks' costs and delays (:func:`chunk_costs`)."""
    data = root / policy
    db_url = f"sqlite:///{data / 'live.db'}"
    portal = start_portal(as_deployed=True,
                          data_dir=data, db_url=db_url, redis_url=redis_url, workers=SLOTS,
                          policy=policy, extra_env={"CHUNK_SECONDS": str(chunk_seconds),
                                                    "LOG_LEVEL": "WARNING"})
    ids: dict[int, int] = {}
    try:
        token = make_user_token(db_url, tenant="bench", email="bench@bench.test",
                                max_slots=SLOTS, max_active_jobs=10_000,
                                max_iterations_per_job=10**7)
        with httpx.Client(base_url=portal.base_url, timeout=60,
                          headers={"Authorization": f"Bearer {token}"}) as api:
            _warm_up(api)
            start = time.monotonic()
            for arrival in sorted(arrivals, key=lambda a: a.time):
                delay = start + arrival.time - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                curve = trace.curve(arrival.curve_id)
                resp = api.post("/api/v1/jobs", json={
                    "name": f"{arrival.index}:{curve.id}", "algorithm": curve.algorithm,
                    "dataset": curve.dataset, "params": dict(curve.params),
                    "dataset_params": dict(curve.dataset_params), "seed": curve.seed,
                    "stopping": {"max_iterations": curve.iterations, "tolerance": None}})
                resp.raise_for_status()
                ids[arrival.index] = resp.json()["id"]
            _wait_all_ended(api, 1800)
    finally:
        portal.close()
    jobs: list[SimJob] = []
    curves: LiveCurves = {}
    grants: dict[int, list[tuple[float, int]]] = {}
    live_seconds: dict[int, list[float]] = {}
    with session_scope(engine_for(db_url)) as session:
        rows = {j.id: j for j in session.execute(
            select(Job).where(col(Job.id).in_(ids.values()))).scalars()}
        t0 = min(_epoch(j.created_at) for j in rows.values())
        index = {job_id: i for i, job_id in ids.items()}
        for job_id, at, iterations in session.execute(
                select(col(Decision.job_id), col(Decision.created_at), col(Decision.iterations))
                .where(col(Decision.job_id).in_(ids.values()))
                .order_by(col(Decision.job_id), col(Decision.chunk_seq))).all():
            grants.setdefault(index[job_id], []).append((_epoch(at) - t0, iterations))
        for arrival in arrivals:
            job = rows[ids[arrival.index]]
            curve = trace.curve(arrival.curve_id)
            points = session.execute(
                select(col(LossRecord.loss),
                       col(LossRecord.recorded_at), col(LossRecord.seconds))
                .where(col(LossRecord.job_id) == job.id)
                .order_by(col(LossRecord.iteration))).all()
            sim = SimJob(arrival.index, curve, arrival.tenant_id, _epoch(job.created_at) - t0)
            commits = [_epoch(p[1]) - t0 for p in points]
            live_seconds[arrival.index] = [float(p[2] or 0.0) for p in points]
            sim.iteration_times = iteration_times(list(zip(commits, live_seconds[arrival.index],
                                                           strict=True)))
            curves[arrival.index] = ([float(p[0]) for p in points], live_seconds[arrival.index],
                                     commits)
            sim.finish = _epoch(job.finished_at) - t0 if job.finished_at else None
            jobs.append(sim)
    return SimResult(policy, jobs, 0, 0.0, 0), curves, chunk_costs(jobs, live_seconds, grants)


def _wait_all_ended(api: httpx.Client, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        page = api.get("/api/v1/jobs", params={"limit": 200}).json()
        if all(j["status"] in ("completed", "failed") for j in page["items"]):
            return
        time.sleep(0.5)
    raise TimeoutError(f"jobs still running after {seconds:.0f} s")


def _warm_up(api: httpx.Client) -> None:
    """Two :data:`WARM_UP` jobs per slot, run to the end before the workload."""
    for _ in range(2 * SLOTS):
        api.post("/api/v1/jobs", json=WARM_UP).raise_for_status()
    _wait_all_ended(api, 120)


POLICIES = ("fair", "las", "slaq")
KEYS = list(Figures.__dataclass_fields__)


def jittered(trace: Trace, spread: float, seed: int) -> Trace:
    """``trace`` with each curve's seconds scaled by its own factor drawn
    around 1 with the live runs' own spread: two live runs of one workload
    never time alike, and a schedule can turn on a few milliseconds."""
    rng = np.random.default_rng(seed)
    return replace(trace, curves=tuple(
        replace(c, seconds=tuple(x * max(1.0 + rng.normal(0.0, spread), 0.5)
                                 for x in c.seconds)) for c in trace.curves))


def timing_spread(arrivals: list[Arrival], runs: list[LiveCurves]) -> float:
    """Median, over configurations run more than once live, of the relative
    standard deviation of a job's total compute seconds."""
    curve_of = {a.index: a.curve_id for a in arrivals}
    totals: dict[str, list[float]] = {}
    for run in runs:
        for index, (_, seconds, _) in run.items():
            totals.setdefault(curve_of[index], []).append(sum(seconds))
    spreads = [float(np.std(t) / np.mean(t)) for t in totals.values() if len(t) > 1]
    return statistics.median(spreads) if spreads else 0.0


def ratios(slaq: Figures, base: Figures) -> dict[str, float]:
    """slaq's figures over another policy's, where that one's is not zero."""
    return {k: getattr(slaq, k) / getattr(base, k) for k in KEYS if getattr(base, k)}


def compare(trace: Trace, args: argparse.Namespace, seed: int, redis_url: str, root: Path
            ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """One workload live and simulated; prints its table and returns, per
    comparison ("slaq/fair", "slaq/las"), the live ratios and the sim@live
    ratios (geometric mean over the jittered copies)."""
    arrivals = generate_workload(trace, slots=SLOTS, load=args.load, jobs=args.jobs,
                                 seed=seed, chunk_seconds=args.chunk_seconds)
    config = SimConfig(slots=SLOTS, chunk_seconds=args.chunk_seconds)
    rows: dict[str, Figures] = {}
    costs: list[ChunkCost] = []
    delays: list[float] = []
    runs: list[LiveCurves] = []
    lives: dict[str, SimResult] = {}
    for policy in POLICIES:
        rows[f"{policy} (sim)"] = figures(simulate(build_policy(policy, trace, arrivals),
                                                   trace, arrivals, config))
        live, curves, (cost, waits) = run_live(policy, trace, arrivals, args.chunk_seconds,
                                               redis_url, root / f"s{seed}")
        costs += cost
        delays += waits
        runs.append(curves)
        lives[policy] = live
        print(f"seed {seed}, {policy}: {len(cost)} chunks", flush=True)
    trained, between, recorded = live_trace(trace, arrivals, runs)
    fixed, per_iteration = fit_cost(costs)
    measured = at_live_cost(trained, fixed, per_iteration)
    # Each decision's grants start this much later, as live after an arrival
    # or a chunk's end (the round's wake-up, sync and dispatch); the policy
    # sees the newest points the live scheduler keeps per job.
    delay = statistics.fmean(delays) if delays else 0.0
    at_live = replace(config, decision_seconds=delay, history_points=LIVE_HISTORY_POINTS,
                      attained_overhead=False)
    spread = timing_spread(arrivals, runs)
    for (policy, live), curves in zip(lives.items(), runs, strict=True):
        for job in live.jobs:
            # Scored on the losses the live jobs produced, not the recording's,
            # each dated back from its commit as sim@live times it: its
            # seconds plus the fitted cost of recording it.
            job.curve = trained.curve(job.curve.id)
            _, seconds, commits = curves[job.job_id]
            job.iteration_times = iteration_times(
                [(c, x + per_iteration) for c, x in zip(commits, seconds, strict=True)])
        rows[f"{policy} (live)"] = figures(live)
    copies: dict[str, list[Figures]] = {}
    for copy in range(args.copies):
        timed = jittered(measured, spread, copy) if copy else measured
        for policy in POLICIES:
            copies.setdefault(policy, []).append(figures(simulate(
                build_policy(policy, timed, arrivals), timed, arrivals, at_live)))
    for policy in POLICIES:
        rows[f"{policy} (sim@live)"] = Figures(**{k: statistics.fmean(
            getattr(f, k) for f in copies[policy]) for k in KEYS})
    print(f"\nworkload: {args.jobs} jobs, load {args.load}, seed {seed}, {SLOTS} slots, "
          f"chunk {args.chunk_seconds}s ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)")
    print(f"live losses: the same in every run to a relative {between:.1e} (0: deterministic); "
          f"{recorded:.1e} from the recorded trace (live jobs train without the hold-out rows)")
    print(f"live chunk cost over {len(costs)} chunks: compute + {fixed:.3f} s "
          f"+ {per_iteration * 1e6:.1f} us per iteration; scheduler delay before a grant "
          f"{delay:.3f} s (mean of {len(delays)}); live timing spread {spread:.1%}; "
          f"sim@live: mean of {args.copies} simulations, all but the first with seconds "
          f"jittered by that spread")
    print(f"{'run':<18}" + "".join(f"{k:>16}" for k in KEYS))
    for kind in ("sim", "sim@live", "live"):
        for policy in POLICIES:
            fig = rows[f"{policy} ({kind})"]
            print(f"{policy + f' ({kind})':<18}" + "".join(f"{getattr(fig, k):>16.3f}"
                                                          for k in KEYS))
    live_ratios: dict[str, dict[str, float]] = {}
    sim_ratios: dict[str, dict[str, float]] = {}
    for other in ("fair", "las"):
        name = f"slaq/{other}"
        per_copy = [ratios(mine, theirs)
                    for mine, theirs in zip(copies["slaq"], copies[other], strict=True)]
        sim_ratios[name] = {k: _geomean([r[k] for r in per_copy]) for k in KEYS
                            if all(k in r for r in per_copy)}
        live_ratios[name] = ratios(rows["slaq (live)"], rows[f"{other} (live)"])
        print(f"{name} (sim): " + _fmt(ratios(rows["slaq (sim)"], rows[f"{other} (sim)"])))
        print(f"{name} (sim@live): " + _fmt(sim_ratios[name]) + "; range over copies: "
              + ", ".join(f"{k} {min(r[k] for r in per_copy):.2f}-{max(r[k] for r in per_copy):.2f}"
                          for k in ("avg_norm_loss", "t95_mean", "mean_completion")))
        print(f"{name} (live): " + _fmt(live_ratios[name]))
        _agreement(f"{name} live over sim@live", live_ratios[name], sim_ratios[name])
    for policy in POLICIES:
        span = rows[f"{policy} (live)"].makespan
        print(f"{policy}: live makespan / simulated "
              f"{span / rows[f'{policy} (sim)'].makespan:.2f}, / simulated at the live chunk "
              f"cost {span / rows[f'{policy} (sim@live)'].makespan:.2f}")
    return live_ratios, sim_ratios


def _geomean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def _fmt(figs: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in figs.items())


def _agreement(label: str, live: dict[str, float], sim: dict[str, float]) -> None:
    agree = {k: live[k] / sim[k] for k in sim if k in live and sim[k]}
    worst = max(agree, key=lambda k: abs(agree[k] - 1))
    print(f"{label}: {_fmt(agree)}; furthest {worst} {abs(agree[worst] - 1):.0%} off")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--load", type=float, default=1.5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="one workload per seed; with several, the ratios are also "
                             "compared over all of them (geometric means)")
    parser.add_argument("--chunk-seconds", type=float, default=0.5)
    parser.add_argument("--copies", type=int, default=5,
                        help="simulations per policy at the live cost (jittered timing)")
    parser.add_argument("--trace", type=Path, default=STANDARD_TRACE)
    args = parser.parse_args()
    trace = load_trace(args.trace)
    live: dict[str, list[dict[str, float]]] = {}
    sim: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, test_redis(Path(tmp), BENCH_REDIS_DB) as redis_url:
        for seed in args.seeds:
            live_ratios, sim_ratios = compare(trace, args, seed, redis_url, Path(tmp))
            for name in live_ratios:
                live.setdefault(name, []).append(live_ratios[name])
                sim.setdefault(name, []).append(sim_ratios[name])
    if len(args.seeds) > 1:
        print(f"\nover {len(args.seeds)} workloads (seeds {' '.join(map(str, args.seeds))}), "
              "geometric means:")
        for name in live:
            keys = [k for k in KEYS if all(k in r for r in live[name] + sim[name])]
            means = {kind: {k: _geomean([r[k] for r in rows]) for k in keys}
                     for kind, rows in (("live", live[name]), ("sim@live", sim[name]))}
            print(f"{name} (sim@live): " + _fmt(means["sim@live"]))
            print(f"{name} (live): " + _fmt(means["live"]))
            _agreement(f"{name} live over sim@live", means["live"], means["sim@live"])


if __name__ == "__main__":
    main()
