"""Iteration-to-chart latency: from a worker streaming a loss point to the
browser's job page having it.

    .venv/bin/python -m tests.bench.chart_latency [--jobs 2] [--seconds 20] [--workers 2]

Starts a whole portal (API, scheduler, Celery workers; SQLite, the test
Redis), opens each job's page in Debian chromium, and lets the jobs train.
Every entry of a job's Redis stream carries ``t``, the worker's wall time
when it streamed the point; the bench watches each page as a user would,
noting ``Date.now()`` when a point is drawn on its loss chart (the line under
the chart is rewritten with every batch the SSE stream delivers). Latency =
drawn - t, for points streamed after the watch began, once the page's stream
was live (older ones are backlog).
Same machine, same clock. Workers flush points every 0.2 s, so a point can
wait up to that long in the worker before ``t``; that part is reported
separately as the flush interval, not measured here.

Prints p50/p95/max per job and overall; asserts nothing (target: p95 < 1 s).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import cast

import httpx
from playwright.sync_api import sync_playwright

from backend.core.models import Role
from tests.browser.helpers import CHROMIUM, CHROMIUM_ARGS, DESKTOP
from tests.utils.portal import make_user_token, start_portal
from tests.utils.services import BENCH_REDIS_DB, test_redis

JOB = {
    "algorithm": "logistic_regression",
    "dataset": "digits",
    "params": {"learning_rate": 0.05},
    "stopping": {"max_iterations": 100_000, "tolerance": None},
}
EMAIL = "bench@latency.test"

# Run in a job page once its stream is live: from then on, every point the
# loss chart gains is noted with the time it was drawn, in the bench's own
# window.__benchDrawn. Returns when the watch began (Date.now()).
WATCH = """() => {
  const chart = document.getElementById('loss-chart');
  const drawn = [];
  const newest = () => {
    const xs = chart.data[0].x;
    return xs.length ? xs[xs.length - 1] : -Infinity;
  };
  let last = newest();
  const look = () => {
    const at = Date.now();
    const xs = chart.data[0].x;
    for (let i = xs.length - 1; i >= 0 && xs[i] > last; i--) drawn.push({ iteration: xs[i], at });
    last = Math.max(last, newest());
  };
  new MutationObserver(look).observe(document.getElementById('chart-note'),
    { childList: true, characterData: true, subtree: true });
  window.__benchDrawn = drawn;
  return Date.now();
}"""
LIVE = ("() => document.getElementById('stream-live')?.dataset.state === 'live'"
        " && document.getElementById('loss-chart')?.data !== undefined")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def row(label: str, values: list[float]) -> str:
    if not values:
        return f"{label:<10} {'-':>8} {'-':>9} {'-':>9} {'-':>9}"
    return (f"{label:<10} {len(values):>8} {percentile(values, 0.5):>9.1f} "
            f"{percentile(values, 0.95):>9.1f} {max(values):>9.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2, help="job pages open at once")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to watch")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (slots)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="slaq-latency-") as tmp, \
            test_redis(Path(tmp) / "redis", BENCH_REDIS_DB) as redis_url:
        data = Path(tmp) / "portal"
        portal = start_portal(as_deployed=True,
                              data_dir=data, db_url=f"sqlite:///{data}/bench.db",
                              redis_url=redis_url, workers=args.workers)
        try:
            token = make_user_token(portal.db_url, tenant="latency", email=EMAIL,
                                    role=Role.member)
            api = httpx.Client(base_url=portal.base_url, timeout=30,
                               headers={"Authorization": f"Bearer {token}"})
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                context = browser.new_context(viewport=DESKTOP, base_url=portal.base_url)
                page = context.new_page()
                page.goto("/login")
                page.fill("#email", EMAIL)
                page.fill("#password", "pw-" + EMAIL)
                page.click("button[type=submit]")
                page.wait_for_url("**/jobs")

                pages = {}
                for i in range(args.jobs):
                    job_id = api.post("/api/v1/jobs", json={**JOB, "name": f"latency-{i}"}
                                      ).json()["id"]
                    job_page = context.new_page()
                    job_page.goto(f"/jobs/{job_id}")
                    pages[job_id] = job_page
                opened: dict[int, float] = {}
                for job_id, job_page in pages.items():
                    job_page.wait_for_function(LIVE, timeout=30_000)
                    opened[job_id] = float(job_page.evaluate(WATCH))
                print(f"watching {args.jobs} job page(s) for {args.seconds:.0f} s "
                      f"on {args.workers} worker slot(s)...")
                time.sleep(args.seconds)

                client = portal.redis()  # decode_responses=True: str fields
                per_job: dict[int, list[float]] = {}
                for job_id, job_page in pages.items():
                    arrivals = {s["iteration"]: s["at"]
                                for s in job_page.evaluate("window.__benchDrawn")}
                    entries = cast(list[tuple[str, dict[str, str]]],
                                   client.xrange(portal.keys.job_stream(job_id)))
                    streamed = {int(f["iteration"]): float(f["t"]) * 1000 for _, f in entries}
                    per_job[job_id] = [arrivals[it] - t for it, t in streamed.items()
                                       if it in arrivals and t >= opened[job_id]]
                    api.post(f"/api/v1/jobs/{job_id}/cancel")
                browser.close()
        finally:
            portal.close()

    everything = [v for values in per_job.values() for v in values]
    print()
    print("iteration-to-chart latency, ms (worker streams a point -> the page draws it)")
    print(f"{'job':<10} {'points':>8} {'p50':>9} {'p95':>9} {'max':>9}")
    for job_id, values in per_job.items():
        print(row(f"#{job_id}", values))
    print(row("all", everything))
    if everything:
        p95 = percentile(everything, 0.95)
        mean = statistics.fmean(everything)
        print(f"\nmean {mean:.1f} ms; p95 {p95:.1f} ms "
              f"({'within' if p95 < 1000 else 'over'} the 1 s target). Points also wait "
              "up to 0.2 s in the worker before they are streamed (its flush interval).")
    else:
        print("\nno live points arrived: is a worker running?")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
