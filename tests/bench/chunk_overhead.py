"""Per-chunk overhead on real workers: what a chunk costs beyond its iterations.

    .venv/bin/python -m tests.bench.chunk_overhead [--seconds 20] [--chunk-seconds 0.5 1.0]

For each chunk length a fresh portal (2 Celery worker slots, the bench Redis
database, SQLite) runs two long jobs, one per slot, so nothing waits for a
slot. Then, per chunk, from the database:

* ``run``: its grant (``Decision.created_at``) to its commit (the
  ``recorded_at`` its loss points share);
* ``compute``: the sum of its iterations' measured seconds;
* ``overhead`` = run - compute: Celery dispatch, lease check, checkpoint
  restore and save, the commit transaction;
* ``gap``: its commit to the job's next grant (the scheduler noticing).

Prints p50 / p95 / mean in ms and the share of wall time that is not
training, (overhead + gap) / (run + gap). The simulator's traces assume a
measured checkpoint save + restore plus 20 ms of dispatch per chunk
(21-59 ms in all); this is the number to compare with. Asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import httpx
from sqlalchemy import select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.models import Decision, LossRecord, as_utc
from tests.utils.portal import make_user_token, start_portal
from tests.utils.services import BENCH_REDIS_DB, test_redis

SLOTS = 2
JOBS = (  # one small and one larger model, so checkpoints of both sizes show
    {"name": "logreg", "algorithm": "logistic_regression", "dataset": "synthetic_classification",
     "params": {"batch_size": 256},
     "dataset_params": {"n_samples": 20000, "n_features": 40, "n_classes": 4}},
    {"name": "mlp", "algorithm": "mlp", "dataset": "digits",
     "params": {"hidden_units": 256, "batch_size": 128}},
)


def _epoch(moment: datetime) -> float:
    return as_utc(moment).timestamp()


def measure(chunk_seconds: float, seconds: float, redis_url: str,
            root: Path) -> dict[str, list[float]]:
    """Runs the jobs for ``seconds``; returns per-chunk ``run``, ``compute``,
    ``overhead`` and per-grant ``gap`` samples in seconds."""
    db_url = f"sqlite:///{root / 'bench.db'}"
    portal = start_portal(data_dir=root, db_url=db_url, redis_url=redis_url, workers=SLOTS,
                          policy="fair", extra_env={"CHUNK_SECONDS": str(chunk_seconds),
                                                    "LOG_LEVEL": "WARNING"})
    try:
        token = make_user_token(db_url, tenant="bench", email="bench@bench.test",
                                max_slots=SLOTS, max_iterations_per_job=10**7)
        with httpx.Client(base_url=portal.base_url, timeout=60,
                          headers={"Authorization": f"Bearer {token}"}) as api:
            ids = []
            for spec in JOBS:
                resp = api.post("/api/v1/jobs", json={
                    **spec, "stopping": {"max_iterations": 1_000_000, "tolerance": None}})
                if resp.status_code != 201:
                    raise SystemExit(f"submission refused: {resp.text}")
                ids.append(resp.json()["id"])
            time.sleep(seconds)
            for job_id in ids:
                api.post(f"/api/v1/jobs/{job_id}/cancel")
    finally:
        portal.close()

    return chunk_samples(db_url)


def chunk_samples(db_url: str, job_ids: set[int] | None = None) -> dict[str, list[float]]:
    """Per chunk of ``job_ids`` (every job when None), from the database:
    ``run``, ``compute``, ``overhead`` and the ``gap`` to the job's next grant."""
    samples: dict[str, list[float]] = defaultdict(list)
    with session_scope(engine_for(db_url)) as session:
        grants: dict[int, list[float]] = defaultdict(list)
        for job_id, created in session.execute(
                select(col(Decision.job_id), col(Decision.created_at)).order_by(col(Decision.id))):
            if job_ids is None or job_id in job_ids:
                grants[job_id].append(_epoch(created))
        commits: dict[tuple[int, float], float] = defaultdict(float)  # -> compute seconds
        for job_id, recorded, sec in session.execute(
                select(col(LossRecord.job_id), col(LossRecord.recorded_at),
                       col(LossRecord.seconds))):
            if job_ids is None or job_id in job_ids:
                commits[(job_id, _epoch(recorded))] += sec
    for (job_id, committed), compute in sorted(commits.items()):
        granted = max((g for g in grants[job_id] if g < committed), default=None)
        if granted is None:
            continue
        samples["run"].append(committed - granted)
        samples["compute"].append(compute)
        samples["overhead"].append(committed - granted - compute)
        following = [g for g in grants[job_id] if g > committed]
        if following:
            samples["gap"].append(following[0] - committed)
    return samples


def _row(name: str, values: list[float]) -> str:
    if not values:
        return f"{name:<10}{'-':>10}"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (f"{name:<10}{1000 * statistics.median(ordered):>10.1f}{1000 * p95:>10.1f}"
            f"{1000 * statistics.fmean(ordered):>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--chunk-seconds", type=float, nargs="+", default=[0.5, 1.0])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, \
            test_redis(Path(tmp) / "redis", BENCH_REDIS_DB) as redis_url:
        for chunk in args.chunk_seconds:
            samples = measure(chunk, args.seconds, redis_url, Path(tmp) / f"chunk{chunk}")
            print(f"\nchunk {chunk}s, {len(samples['run'])} chunks over {args.seconds:.0f}s "
                  f"on {SLOTS} slots (ms)")
            print(f"{'':<10}{'p50':>10}{'p95':>10}{'mean':>10}")
            for name in ("run", "compute", "overhead", "gap"):
                print(_row(name, samples[name]))
            lost = sum(samples["overhead"]) + sum(samples["gap"])
            wall = sum(samples["run"]) + sum(samples["gap"])
            if wall > 0:
                print(f"not training: {100 * lost / wall:.1f}% of the slots' wall time",
                      flush=True)


if __name__ == "__main__":
    main()
