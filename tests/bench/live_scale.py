"""The live scheduler with 100 / 1,000 / 10,000 queued jobs on 2 worker slots.

A real portal (API, scheduler, Celery workers, SQLite, Redis). A few jobs are
submitted over HTTP; the rest are copies of one of them inserted in one SQL
statement (10,000 HTTP submissions would measure the API, not the scheduler).
Prints, per queue size: the scheduler's round time (median / p95, from the
rounds it publishes in Redis) and time to its grants, the fraction of time
the slots hold a chunk, loss points stored per second, and the latency of
the jobs list, one job, its losses and the cluster view, and how long the
jobs page takes in chromium until its list shows. Chunks last the live
default (1 s; BENCH_CHUNK_SECONDS). Figures only, no timed assertions.

    REDIS_URL=redis://127.0.0.1:6379/3 .venv/bin/python -m tests.bench.live_scale [sizes...]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, insert, select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.leases import Leases
from backend.core.models import Job, JobStatus, LossRecord, utcnow
from tests.browser.helpers import CHROMIUM, CHROMIUM_ARGS
from tests.utils.portal import Portal, make_user_token, start_portal

SPEC: dict[str, Any] = {"algorithm": "logistic_regression", "dataset": "iris", "seed": 0,
                        "params": {}, "stopping": {"max_iterations": 400, "tolerance": None}}
BIG_QUOTAS: dict[str, Any] = {"max_queued_jobs": 100_000, "max_active_jobs": 100_000,
                              "max_slots": 8}
HTTP_JOBS = 10
BENCH_EMAIL = "b@bench.test"


def insert_copies(db_url: str, template_id: int, count: int) -> list[int]:
    """``count`` queued copies of job ``template_id`` (seeds 1..count), in one INSERT."""
    engine = engine_for(db_url)
    with session_scope(engine) as session:
        job = session.get(Job, template_id)
        assert job is not None
        now = utcnow()
        rows = [{
            "tenant_id": job.tenant_id, "user_id": job.user_id, "name": f"copy {i}",
            "algorithm": job.algorithm, "dataset": job.dataset, "params": job.params,
            "dataset_params": job.dataset_params, "seed": i, "max_iterations": job.max_iterations,
            "target_loss": job.target_loss, "tolerance": job.tolerance,
            "convergence_window": job.convergence_window, "status": JobStatus.queued,
            "created_at": now, "waiting_since": now,
        } for i in range(1, count + 1)]
        top = session.execute(select(func.max(col(Job.id)))).scalar() or 0
        session.execute(insert(Job), rows)
        session.commit()
        ids = [int(r[0]) for r in session.execute(
            select(col(Job.id)).where(col(Job.id) > top).order_by(col(Job.id))).all()]
    return ids


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def _latency(api: httpx.Client, path: str, repeat: int = 7) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(repeat):
        began = time.perf_counter()
        response = api.get(path)
        times.append((time.perf_counter() - began) * 1000)
        response.raise_for_status()
        size = len(response.content)
    return statistics.median(times), size


def _loss_rows(db_url: str) -> int:
    with session_scope(engine_for(db_url)) as session:
        return int(session.execute(select(func.count()).select_from(LossRecord)).scalar_one())


def jobs_page_ms(portal: Portal, repeat: int = 5) -> list[float] | None:
    """Milliseconds from opening /jobs (signed in) until its list shows rows, in
    Debian's chromium; ``None`` where chromium or playwright is missing."""
    if not Path(CHROMIUM).exists():
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(base_url=portal.base_url)
        page.goto("/login")
        page.get_by_label("Email").fill(BENCH_EMAIL)
        page.get_by_label("Password").fill("pw-" + BENCH_EMAIL)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/jobs")
        for _ in range(repeat):
            began = time.perf_counter()
            page.goto("/jobs")
            page.locator("#jobs-table tbody tr").first.wait_for()
            times.append((time.perf_counter() - began) * 1000)
        browser.close()
    return times


def measure(size: int, root: Path, redis_url: str, window: float) -> dict[str, Any]:
    data = root / f"n{size}"
    # The live default chunk length (the tests' portals use shorter chunks).
    portal: Portal = start_portal(as_deployed=True,
                                  data_dir=data, db_url=f"sqlite:///{data / 'slaq.db'}",
                                  redis_url=redis_url, workers=2, policy="slaq",
                                  extra_env={"CHUNK_SECONDS": os.environ.get(
                                      "BENCH_CHUNK_SECONDS", "1.0")})
    try:
        token = make_user_token(portal.db_url, tenant="bench", email=BENCH_EMAIL,
                                **BIG_QUOTAS)
        with httpx.Client(base_url=portal.base_url, timeout=60,
                          headers={"Authorization": f"Bearer {token}"}) as api:
            ids = [api.post("/api/v1/jobs", json=dict(SPEC, seed=s)).json()["id"]
                   for s in range(HTTP_JOBS)]
            ids += insert_copies(portal.db_url, ids[0], size - HTTP_JOBS)
            client = portal.redis()
            client.lpush(portal.keys.wake, "bench")
            leases = Leases(client, portal.keys)
            time.sleep(3)  # the scheduler's first full scan of the new queue
            client.delete(portal.keys.scheduler_rounds)
            points0, began = _loss_rows(portal.db_url), time.monotonic()
            busy: list[float] = []
            while time.monotonic() - began < window:
                busy.append(min(len(leases.live_job_ids()), 2) / 2)
                time.sleep(0.05)
            points = (_loss_rows(portal.db_url) - points0) / (time.monotonic() - began)
            rounds = [json.loads(r) for r in client.lrange(portal.keys.scheduler_rounds, 0, -1)]
            job = ids[0]
            lat = {name: _latency(api, path) for name, path in (
                ("jobs list", "/api/v1/jobs?limit=50"), ("one job", f"/api/v1/jobs/{job}"),
                ("losses", f"/api/v1/jobs/{job}/losses"), ("cluster", "/api/v1/cluster"))}
            page_ms = jobs_page_ms(portal)
        return {
            "size": size, "rounds": len(rounds),
            "round_median_ms": statistics.median(r[0] for r in rounds) if rounds else None,
            "round_p95_ms": _pct([r[0] for r in rounds], 0.95),
            "grant_median_ms": statistics.median(r[1] for r in rounds if r[2]) if any(
                r[2] for r in rounds) else None,
            "busy": sum(busy) / len(busy), "points_per_s": points, "latency": lat,
            "jobs_page_ms": page_ms,
        }
    finally:
        portal.close()


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [100, 1000, 10_000]
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/3")
    window = float(os.environ.get("BENCH_WINDOW", "20"))
    with tempfile.TemporaryDirectory(prefix="live-scale-") as tmp:
        for size in sizes:
            r = measure(size, Path(tmp), redis_url, window)
            lat = "  ".join(f"{k} {ms:.1f} ms/{b / 1024:.0f} KB" for k, (ms, b) in
                            r["latency"].items())
            grant = r["grant_median_ms"]
            print(f"queued {r['size']:>6}: rounds {r['rounds']:>4}  round median "
                  f"{r['round_median_ms']:.1f} ms p95 {r['round_p95_ms']:.1f} ms  "
                  f"grants after {grant if grant is None else round(grant, 1)} ms  "
                  f"slots busy {r['busy']:.0%}  loss points {r['points_per_s']:.0f}/s\n"
                  f"        {lat}", flush=True)
            page = r["jobs_page_ms"]
            print("        jobs page until the list shows: " + (
                "not measured (no chromium/playwright)" if page is None else
                f"median {statistics.median(page):.0f} ms, max {max(page):.0f} ms "
                f"over {len(page)} loads"), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
