"""Goodput of real models on the live portal: training seconds over slot seconds.

    .venv/bin/python -m tests.bench.goodput [--sizes 0.1M 2M 8.5M 33M]
        [--kinds builtin tenant loop] [--seconds 60] [--contended-size 2M]
        [--policies slaq las] [--chunk-seconds 1.0]

A fresh portal (2 worker slots, SQLite, the bench Redis database) runs wide
PyTorch MLPs, built-in (``torch_mlp``) and the same network as tenant code
(``tests/fixtures/trainers/torch_wide_mlp.py``, sandboxed; ``--kinds loop``
adds it written to the loop contract, ``torch_wide_mlp_loop.py``), of about 0.1M,
2M, 8.5M and 33M parameters, on a 64-feature synthetic classification set:

* **alone**: one job on the cluster for ``--seconds``, then cancelled;
* **contended**: 4 jobs of ``--contended-size`` on the 2 slots under each
  policy, for ``--seconds``.

Goodput = the seconds its iterations trained (the workers' own timing of each
step) over the wall seconds from its first grant to its last commit (alone),
or over 2 x the wall seconds from the run's first grant to its last commit
(contended). Per job it prints chunks,
chunks that stepped on a resident trainer, restores, checkpoints written,
the measured switch cost, per chunk the mean overhead (grant to commit less
training) and gap (commit to the next grant), and the steady goodput: from
the first chunk's commit on, as a job that runs for hours sees it. Asserts nothing; figures
depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.leases import Leases
from backend.core.models import Decision, LossRecord, as_utc
from tests.bench.chunk_overhead import chunk_samples
from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.services import BENCH_REDIS_DB, test_redis

SLOTS = 2
FEATURES = 64
DATASET = {"dataset": "synthetic_classification",
           "dataset_params": {"n_samples": 20000, "n_features": FEATURES, "n_classes": 10}}
SHAPES = {  # name -> (width, hidden layers): 64 inputs, 10 classes
    "0.1M": (256, 2), "2M": (1024, 3), "8.5M": (2048, 3), "33M": (4096, 3),
}
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trainers"
CODE = {"tenant": FIXTURES / "torch_wide_mlp.py", "loop": FIXTURES / "torch_wide_mlp_loop.py"}
"""The same network as tenant code: a Trainer, and a loop (the loop contract)."""


def parameters(width: int, layers: int) -> int:
    dims = [FEATURES] + [width] * layers + [10]
    return sum(a * b + b for a, b in zip(dims, dims[1:], strict=False))


@dataclass
class Figures:
    label: str
    training: float
    wall: float
    chunks: int
    resident: int
    restores: int
    saves: int
    switch: float | None
    iterations: int
    overhead_ms: float = 0.0
    """Mean per chunk: grant to commit, less the seconds its iterations trained."""
    gap_ms: float = 0.0
    """Mean per chunk: its commit to the job's next grant."""
    steady: float | None = None
    """Goodput after the first chunk (the job's start on the slot left out)."""

    @property
    def goodput(self) -> float:
        return self.training / self.wall if self.wall > 0 else 0.0


@contextmanager
def portal_for(root: Path, redis_url: str, policy: str,
               chunk_seconds: float) -> Iterator[tuple[Portal, httpx.Client]]:
    db_url = f"sqlite:///{root / 'bench.db'}"
    portal = start_portal(as_deployed=True,
                          data_dir=root, db_url=db_url, redis_url=redis_url, workers=SLOTS,
                          policy=policy,
                          extra_env={"CHUNK_SECONDS": str(chunk_seconds), "LOG_LEVEL": "WARNING",
                                     "LEASE_SECONDS": "120", "SANDBOX_MEMORY_MIB": "6144",
                                     "SANDBOX_STEP_TIMEOUT_SECONDS": "120"})
    try:
        token = make_user_token(db_url, tenant="bench", email="bench@bench.test",
                                max_slots=SLOTS, max_iterations_per_job=10**7,
                                allow_code_uploads=True)
        with httpx.Client(base_url=portal.base_url, timeout=120,
                          headers={"Authorization": f"Bearer {token}"}) as api:
            yield portal, api
    finally:
        portal.close()


def spec(kind: str, size: str, code: dict[str, str], seed: int = 0) -> dict[str, Any]:
    width, layers = SHAPES[size]
    if kind == "builtin":
        algorithm, params = "torch_mlp", {"hidden_units": width, "hidden_layers": layers,
                                          "batch_size": 128}
    else:
        algorithm, params = code[kind], {"width": width, "layers": layers, "batch_size": 128}
    return {**DATASET, "algorithm": algorithm, "params": params, "seed": seed,
            "eval_every": 0, "stopping": {"max_iterations": 10**6, "tolerance": None}}


def upload(api: httpx.Client, kinds: list[str]) -> dict[str, str]:
    """Each tenant-code kind's upload, as its algorithm name."""
    out = {}
    for kind in kinds:
        if kind not in CODE:
            continue
        path = CODE[kind]
        resp = api.post("/api/v1/code", files={"file": (path.name, path.read_bytes(),
                                                        "text/x-python")},
                        data={"name": f"wide-mlp-{kind}"})
        if resp.status_code != 201:
            raise SystemExit(f"upload refused: {resp.text}")
        out[kind] = str(resp.json()["algorithm"])
    return out


def run_jobs(portal: Portal, api: httpx.Client, specs: list[dict[str, Any]],
             seconds: float) -> list[int]:
    ids = []
    for body in specs:
        resp = api.post("/api/v1/jobs", json=body)
        if resp.status_code != 201:
            raise SystemExit(f"submission refused: {resp.text}")
        ids.append(int(resp.json()["id"]))
    time.sleep(seconds)  # a bench's fixed window, not a wait for a condition
    for job_id in ids:
        api.post(f"/api/v1/jobs/{job_id}/cancel")
    # Figures once every chunk in flight has committed (a cancel ends a
    # chunk at its next iteration, with its points kept).
    leases = Leases(portal.redis(), portal.keys)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        states = [api.get(f"/api/v1/jobs/{j}").json()["status"] for j in ids]
        if all(s in ("cancelled", "completed", "failed") for s in states) and \
                all(leases.holder(j) is None for j in ids):
            break
        time.sleep(0.5)
    return ids


def figures(portal: Portal, api: httpx.Client, job_id: int, label: str,
            contended: float | None = None) -> Figures:
    """One job's figures; ``contended``: its share of the slots' wall time
    when it shared them (else its own first grant to last commit)."""
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    if job["status"] == "failed":
        print(f"  {label}: FAILED: {job['error']}")
    with session_scope(engine_for(portal.db_url)) as session:
        training = session.execute(
            select(func.coalesce(func.sum(col(LossRecord.seconds)), 0.0))
            .where(col(LossRecord.job_id) == job_id)).scalar_one()
    wall = busy_seconds(portal.db_url, [job_id]) if contended is None else contended
    res = job["residency"]
    chunks = chunk_samples(portal.db_url, {job_id})
    return Figures(label, float(training), wall, job["chunks_run"], res["resident_chunks"],
                   res["restores"], res["checkpoints_saved"], res["switch_seconds"],
                   job["iterations_done"], 1000 * _mean(chunks["overhead"]),
                   1000 * _mean(chunks["gap"]),
                   # Sharing slots, its gaps are waits for its turn, not overhead.
                   _steady(chunks) if contended is None else None)


def _steady(chunks: dict[str, list[float]]) -> float | None:
    """Training over wall time from the first chunk's commit on: what a job
    that runs for hours sees, its one start on the slot amortised away."""
    runs, gaps = chunks["run"], chunks["gap"]
    if len(runs) < 2:
        return None
    wall = sum(runs[1:]) + sum(gaps[:len(runs) - 1])
    return sum(chunks["compute"][1:]) / wall if wall > 0 else None


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def print_table(title: str, rows: list[Figures]) -> None:
    print(f"\n{title}")
    print(f"{'job':<28}{'params':>8}{'goodput':>9}{'steady':>8}{'train s':>9}{'wall s':>8}"
          f"{'iters':>7}"
          f"{'chunks':>8}{'resident':>9}{'restores':>9}{'saves':>7}{'switch s':>9}"
          f"{'ovh ms':>8}{'gap ms':>8}")
    for f in rows:
        size = f.label.split()[1] if len(f.label.split()) > 1 else ""
        width, layers = SHAPES.get(size, (0, 0))
        params = f"{parameters(width, layers) / 1e6:.1f}M" if width else ""
        switch = "-" if f.switch is None else f"{f.switch:.2f}"
        steady = "-" if f.steady is None else f"{100 * f.steady:.1f}%"
        print(f"{f.label:<28}{params:>8}{100 * f.goodput:>8.1f}%{steady:>8}{f.training:>9.1f}"
              f"{f.wall:>8.1f}{f.iterations:>7}{f.chunks:>8}{f.resident:>9}{f.restores:>9}"
              f"{f.saves:>7}{switch:>9}{f.overhead_ms:>8.0f}{f.gap_ms:>8.0f}", flush=True)


def run_alone(redis_url: str, root: Path, args: argparse.Namespace) -> None:
    rows: list[Figures] = []
    with portal_for(root, redis_url, "slaq", args.chunk_seconds) as (portal, api):
        code = upload(api, args.kinds)
        for kind in args.kinds:
            for size in args.sizes:
                (job_id,) = run_jobs(portal, api, [spec(kind, size, code)], args.seconds)
                rows.append(figures(portal, api, job_id, f"{kind} {size}"))
    print_table(f"alone on the cluster, {args.seconds:.0f} s each, chunks of "
                f"{args.chunk_seconds} s", rows)


def busy_seconds(db_url: str, ids: list[int]) -> float:
    """Wall seconds from the first grant to any of ``ids`` to their last
    commit: the run as the slots saw it, without submission and clean-up."""
    with session_scope(engine_for(db_url)) as session:
        first = session.execute(select(func.min(col(Decision.created_at)))
                                .where(col(Decision.job_id).in_(ids))).scalar()
        last = session.execute(select(func.max(col(LossRecord.recorded_at)))
                               .where(col(LossRecord.job_id).in_(ids))).scalar()
    return as_utc(last).timestamp() - as_utc(first).timestamp() if first and last else 0.0


def print_timeline(db_url: str, ids: list[int]) -> None:
    """Each grant to ``ids`` in order: seconds since the first, job, chunk
    length and the scheduler's reason (where a move or a stretch shows)."""
    with session_scope(engine_for(db_url)) as session:
        rows = session.execute(
            select(col(Decision.created_at), col(Decision.job_id), col(Decision.iterations),
                   col(Decision.reason))
            .where(col(Decision.job_id).in_(ids)).order_by(col(Decision.id))).all()
    if not rows:
        return
    start = as_utc(rows[0][0]).timestamp()
    for created, job_id, iterations, reason in rows:
        print(f"  {as_utc(created).timestamp() - start:7.2f}s job {ids.index(job_id)} "
              f"{iterations:>6} it  {reason[:110]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="*", default=list(SHAPES), choices=list(SHAPES),
                        help="sizes run alone on the cluster (none: the contended runs only)")
    parser.add_argument("--kinds", nargs="+", default=["builtin", "tenant"],
                        choices=["builtin", "tenant", "loop"],
                        help="loop: the tenant code written to the loop contract")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--contended-size", default="2M", choices=list(SHAPES))
    parser.add_argument("--policies", nargs="*", default=["slaq", "las"])
    parser.add_argument("--chunk-seconds", type=float, default=1.0)
    parser.add_argument("--timeline", action="store_true",
                        help="print each contended run's grants: when, which job, how long, why")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, \
            test_redis(Path(tmp) / "redis", BENCH_REDIS_DB) as redis_url:
        if args.sizes:
            run_alone(redis_url, Path(tmp) / "alone", args)
        for policy in args.policies:
            with portal_for(Path(tmp) / f"contended-{policy}", redis_url, policy,
                            args.chunk_seconds) as (portal, api):
                code = upload(api, args.kinds)
                for kind in args.kinds:
                    ids = run_jobs(portal, api, [spec(kind, args.contended_size, code, seed)
                                                 for seed in range(4)], args.seconds)
                    wall = busy_seconds(portal.db_url, ids)
                    if args.timeline:
                        print_timeline(portal.db_url, ids)
                    jobs = [figures(portal, api, j, f"{kind} {args.contended_size} #{i}",
                                    contended=SLOTS * wall / 4) for i, j in enumerate(ids)]
                    total = Figures(f"{kind} {args.contended_size} all", sum(
                        f.training for f in jobs), SLOTS * wall, sum(f.chunks for f in jobs),
                        sum(f.resident for f in jobs), sum(f.restores for f in jobs),
                        sum(f.saves for f in jobs), None, sum(f.iterations for f in jobs))
                    print_table(f"4 jobs on {SLOTS} slots under {policy}, {args.seconds:.0f} s",
                                [*jobs, total])


if __name__ == "__main__":
    main()
