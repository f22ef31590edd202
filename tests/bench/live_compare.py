"""Live vs simulated: one workload, slaq vs fair and las, on real workers and
in the simulator, figures side by side.

    .venv/bin/python -m tests.bench.live_compare [--jobs 16] [--load 1.5] [--seed 0]

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
chunk's wall time (grant to the commit of its loss points, plus the
scheduler's delay before the grant) less its iterations' compute seconds.
"""

from __future__ import annotations

import argparse
import math
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
LiveCurves = dict[int, tuple[list[float], list[float]]]
"""Per arrival index, the live job's losses and measured seconds per iteration."""


def chunk_costs(jobs: list[SimJob], live_seconds: dict[int, list[float]],
                grants: dict[int, list[tuple[float, int]]]) -> list[ChunkCost]:
    """Each live chunk's iterations, compute seconds (its iterations' measured
    seconds, ``live_seconds`` per job) and wall seconds:
    from its grant to its last loss point's commit, plus the scheduler's delay
    before the grant (from the later of the latest chunk end before it and the
    job's own arrival or previous chunk end). ``grants`` maps a job to its
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
    out = []
    for granted, ready, ended, iterations, live_compute in chunks:
        # The slot this grant took was freed at the latest chunk end before it;
        # the job waited from then, or from when it could first run. A wait of
        # more than a second is a policy's choice, not a cost of chunking.
        before = [e for e in ends if e <= granted]
        gap = granted - max(before[-1] if before else ready, ready)
        out.append((iterations, live_compute,
                    ended - granted + (gap if 0 <= gap < 1.0 else 0.0)))
    return out


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
    seen: dict[str, list[tuple[list[float], list[float]]]] = {}
    for run in runs:
        for index, points in run.items():
            seen.setdefault(curve_of[index], []).append(points)
    between = recorded = 0.0
    curves: list[TraceCurve] = []
    for curve in trace.curves:
        if curve.id not in seen:
            continue
        losses = np.array(seen[curve.id][0][0])
        for other, _ in seen[curve.id]:
            between = max(between, _relative(np.array(other), losses))
        recorded = max(recorded, _relative(losses, np.array(curve.losses[: len(losses)])))
        seconds = np.mean([s for _, s in seen[curve.id]], axis=0)
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
             redis_url: str, root: Path) -> tuple[SimResult, LiveCurves, list[ChunkCost]]:
    """Replays ``arrivals`` on a fresh portal; returns the result, the live
    jobs' curves and the live chunks' costs (:func:`chunk_costs`)."""
    data = root / policy
    db_url = f"sqlite:///{data / 'live.db'}"
    portal = start_portal(data_dir=data, db_url=db_url, redis_url=redis_url, workers=SLOTS,
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
            sim.iteration_times = iteration_times(
                [(_epoch(p[1]) - t0, float(p[2] or 0.0)) for p in points])
            live_seconds[arrival.index] = [float(p[2] or 0.0) for p in points]
            curves[arrival.index] = ([float(p[0]) for p in points], live_seconds[arrival.index])
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--load", type=float, default=1.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-seconds", type=float, default=0.5)
    parser.add_argument("--trace", type=Path, default=STANDARD_TRACE)
    args = parser.parse_args()
    trace = load_trace(args.trace)
    arrivals = generate_workload(trace, slots=SLOTS, load=args.load, jobs=args.jobs,
                                 seed=args.seed, chunk_seconds=args.chunk_seconds)
    config = SimConfig(slots=SLOTS, chunk_seconds=args.chunk_seconds)
    rows: dict[str, Figures] = {}
    costs: list[ChunkCost] = []
    runs: list[LiveCurves] = []
    lives: dict[str, SimResult] = {}
    policies = ("fair", "las", "slaq")
    with tempfile.TemporaryDirectory() as tmp, test_redis(Path(tmp), BENCH_REDIS_DB) as redis_url:
        for policy in policies:
            rows[f"{policy} (sim)"] = figures(simulate(build_policy(policy, trace, arrivals),
                                                       trace, arrivals, config))
            live, curves, cost = run_live(policy, trace, arrivals, args.chunk_seconds,
                                          redis_url, Path(tmp))
            costs += cost
            runs.append(curves)
            lives[policy] = live
            print(f"{policy}: {len(cost)} chunks", flush=True)
    trained, between, recorded = live_trace(trace, arrivals, runs)
    fixed, per_iteration = fit_cost(costs)
    measured = at_live_cost(trained, fixed, per_iteration)
    for policy, live in lives.items():
        # Scored on the losses the live jobs produced, not the recording's.
        for job in live.jobs:
            job.curve = trained.curve(job.curve.id)
        rows[f"{policy} (live)"] = figures(live)
    print(f"live losses: the same in every run to a relative {between:.1e} (0: deterministic); "
          f"{recorded:.1e} from the recorded trace (live jobs train without the hold-out rows)")
    for policy in policies:
        rows[f"{policy} (sim@live)"] = figures(simulate(build_policy(policy, measured, arrivals),
                                                        measured, arrivals, config))
    keys = list(Figures.__dataclass_fields__)
    print(f"\nworkload: {args.jobs} jobs, load {args.load}, seed {args.seed}, {SLOTS} slots, "
          f"chunk {args.chunk_seconds}s ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC); live chunk "
          f"cost over {len(costs)} chunks: compute + {fixed:.3f} s "
          f"+ {per_iteration * 1e6:.1f} us per iteration")
    print(f"{'run':<18}" + "".join(f"{k:>16}" for k in keys))
    for name, fig in rows.items():
        print(f"{name:<18}" + "".join(f"{getattr(fig, k):>16.3f}" for k in keys))
    for other in ("fair", "las"):
        for kind in ("sim", "sim@live", "live"):
            base, slaq = rows[f"{other} ({kind})"], rows[f"slaq ({kind})"]
            print(f"slaq/{other} ({kind}): " + ", ".join(
                f"{k} {getattr(slaq, k) / getattr(base, k):.2f}" for k in keys
                if getattr(base, k)))
    for other in ("fair", "las"):
        agree = {k: (getattr(rows["slaq (live)"], k) / getattr(rows[f"{other} (live)"], k))
                 / (getattr(rows["slaq (sim@live)"], k) / getattr(rows[f"{other} (sim@live)"], k))
                 for k in keys if all(getattr(rows[f"{p} ({kind})"], k)
                                      for p in ("slaq", other) for kind in ("live", "sim@live"))}
        worst_key = max(agree, key=lambda k: abs(agree[k] - 1))
        print(f"slaq/{other} live over sim@live: " + ", ".join(
            f"{k} {v:.2f}" for k, v in agree.items())
            + f"; furthest {worst_key} {abs(agree[worst_key] - 1):.0%} off")
    for policy in policies:
        span = rows[f"{policy} (live)"].makespan
        print(f"{policy}: live makespan / simulated "
              f"{span / rows[f'{policy} (sim)'].makespan:.2f}, / simulated at the live chunk "
              f"cost {span / rows[f'{policy} (sim@live)'].makespan:.2f}")


if __name__ == "__main__":
    main()
