"""API under concurrent clients: requests/s, latency percentiles and errors.

    .venv/bin/python -m tests.bench.api_load [--db sqlite|postgres|both] [--seconds 60]

A real portal (API, scheduler, 2 Celery worker slots) with 20 jobs training.
Each client signs in with an API token and loops over what a browser tab or a
script does: list the jobs, open a job, read its losses, and now and then
(3%) submit a job. Three runs per database, figures side by side:

- ``paced-200``: 200 clients that each wait 1 s between requests (about 200
  requests/s offered), as browser tabs polling do;
- ``max-20`` and ``max-200``: 20 and 200 clients sending back to back; the
  200/20 throughput ratio says whether more clients cost throughput.

Each database is measured with 1 and 2 API processes (``--processes``). The
load generator (asyncio + aiohttp, one process) shares the machine with the
portal, so absolute figures are lower than on a dedicated client host;
compare within one run. aiohttp rather than httpx: httpx's connection pool
costs the generator several milliseconds of CPU per request at 200
connections, CPU the portal under test then lacks.

Each run also prints where the machine's CPU went, in milliseconds per
completed request: the API processes, the scheduler, the workers, the load
generator itself, and the database and Redis servers. A drop in throughput
from 20 to 200 clients shows there as the part that grew.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import psutil

from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.services import BENCH_REDIS_DB, database, test_redis

ACTIVE_JOBS = 20
SUBMIT_SHARE = 0.03
RUNS = {"paced-200": (200, 1.0), "max-20": (20, 0.0), "max-200": (200, 0.0)}
"""Run name: (clients, seconds each client waits between requests)."""
SLOW = 0.25
"""Latency above which a request counts as slow: the paced-200 p99 target."""
LONG_JOB = {"algorithm": "logistic_regression", "dataset": "digits",
            "params": {"learning_rate": 0.01},
            "stopping": {"max_iterations": 500_000, "tolerance": None}}


def _process_tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _servers(names: tuple[str, ...]) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["name"]) if p.info["name"] in names]


class CpuMeter:
    """CPU seconds used by each part of the machine during one run."""

    def __init__(self, portal: Portal) -> None:
        self.portal = portal

    def _groups(self) -> dict[str, list[psutil.Process]]:
        groups: dict[str, list[psutil.Process]] = {}
        for name, popen in self.portal.procs.items():
            part = "workers" if name.startswith("worker") else name
            groups.setdefault(part, []).extend(_process_tree(psutil.Process(popen.pid)))
        groups["load generator"] = [psutil.Process()]
        groups["database"] = _servers(("postgres",))
        groups["redis"] = _servers(("redis-server",))
        return groups

    def sample(self) -> dict[tuple[str, int], float]:
        out: dict[tuple[str, int], float] = {}
        for part, processes in self._groups().items():
            for process in processes:
                try:
                    times = process.cpu_times()
                except psutil.NoSuchProcess:
                    continue
                out[(part, process.pid)] = times.user + times.system
        return out

    @staticmethod
    def spent(before: dict[tuple[str, int], float],
              after: dict[tuple[str, int], float]) -> dict[str, float]:
        """CPU seconds per part between two samples; a process that started
        in between counts from zero, one that ended is left out."""
        out: dict[str, float] = {}
        for (part, pid), seconds in after.items():
            out[part] = out.get(part, 0.0) + seconds - before.get((part, pid), 0.0)
        return out


def _percentiles_ms(latencies: list[float]) -> list[float]:
    """p50, p95 and p99 in milliseconds."""
    qs = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    return [q * 1000 for q in (qs[49], qs[94], qs[98])]


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    by_kind: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    starts: list[float] = field(default_factory=list)

    def add(self, kind: str, seconds: float, started: float) -> None:
        self.latencies.append(seconds)
        self.starts.append(started)
        self.by_kind.setdefault(kind, []).append(seconds)

    def line(self, name: str) -> str:
        n = len(self.latencies)
        if n == 0:
            return f"{name:>10}  no request completed; errors {dict(self.errors)}"
        ms = _percentiles_ms(self.latencies)
        kinds = "  ".join(f"{kind} p50 {p[0]:.0f} / p99 {p[2]:.0f}"
                          for kind, values in sorted(self.by_kind.items())
                          for p in [_percentiles_ms(values)])
        return (f"{name:>10}  {n / self.seconds:7.1f} req/s  p50 {ms[0]:6.0f} ms  "
                f"p95 {ms[1]:6.0f} ms  p99 {ms[2]:6.0f} ms  requests {n:6d}  "
                f"errors {sum(self.errors.values())} {dict(self.errors) or ''}\n"
                f"{'':>12}by route (ms): {kinds}\n"
                f"{'':>12}CPU ms per request: {self._cpu_line(n)}\n"
                f"{'':>12}{self._slow_line()}")

    def _slow_line(self) -> str:
        """Whether the slow requests were spread out or one stall: a single
        half-second stall in a minute at 200 req/s is already the p99."""
        slow = sorted(t for t, s in zip(self.starts, self.latencies, strict=True) if s > SLOW)
        if not slow:
            return f"no request over {SLOW * 1000:.0f} ms"
        per_second = Counter(int(t) for t in slow)
        worst = max(per_second.values())
        return (f"over {SLOW * 1000:.0f} ms: {len(slow)} requests in {len(per_second)} "
                f"distinct seconds, at most {worst} starting in one second")

    def _cpu_line(self, requests: int) -> str:
        parts = sorted(self.cpu.items(), key=lambda item: -item[1])
        total, cores = sum(self.cpu.values()), psutil.cpu_count() or 1
        return "  ".join([f"{part} {1000 * seconds / requests:.1f}" for part, seconds in parts]
                         + [f"(machine busy {100 * total / self.seconds / cores:.0f}%)"])


async def _one_request(api: aiohttp.ClientSession, job_ids: list[int],
                       rng: random.Random) -> tuple[str, int]:
    roll = rng.random()
    if roll < SUBMIT_SHARE:
        kind = "submit"
        spec = dict(LONG_JOB, stopping={"max_iterations": 200, "tolerance": None})
        request = api.post("/api/v1/jobs", json=spec)
    else:
        job = rng.choice(job_ids)
        if roll < 0.35:
            kind, request = "list", api.get("/api/v1/jobs", params={"limit": 20})
        elif roll < 0.7:
            kind, request = "job", api.get(f"/api/v1/jobs/{job}")
        else:
            kind = "losses"
            request = api.get(f"/api/v1/jobs/{job}/losses", params={"max_points": 500})
    async with request as response:
        await response.read()  # a client reads what it asked for
        return kind, response.status


async def _client(api: aiohttp.ClientSession, job_ids: list[int], stats: Stats, stop_at: float,
                  pause: float, seed: int) -> None:
    rng = random.Random(seed)
    if pause:
        await asyncio.sleep(rng.random() * pause)  # spread the first requests
    while time.monotonic() < stop_at:
        started = time.monotonic()
        try:
            kind, code = await _one_request(api, job_ids, rng)
            if code >= 400:
                stats.errors[str(code)] += 1
            else:
                stats.add(kind, time.monotonic() - started, started)
        except (aiohttp.ClientError, TimeoutError) as exc:
            stats.errors[type(exc).__name__] += 1
        if pause:
            await asyncio.sleep(pause)


async def _run(base_url: str, token: str, job_ids: list[int], clients: int, pause: float,
               seconds: float) -> Stats:
    stats = Stats()
    # One connection per client, kept alive, as each browser tab or script has.
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(base_url=base_url, connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60),
                                     headers={"Authorization": f"Bearer {token}"}) as api:
        started = time.monotonic()
        stop_at = started + seconds
        await asyncio.gather(*(_client(api, job_ids, stats, stop_at, pause, i)
                               for i in range(clients)))
        stats.seconds = time.monotonic() - started
    return stats


def bench_portal(portal: Portal, db_url: str, seconds: float,
                runs: Sequence[str] = tuple(RUNS)) -> dict[str, Stats]:
    token = make_user_token(db_url, tenant="load", email="load@load.test", max_slots=2,
                            max_active_jobs=100_000, max_queued_jobs=100_000,
                            max_iterations_per_job=10**6)
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as api:
        job_ids = []
        for _ in range(ACTIVE_JOBS):
            response = api.post("/api/v1/jobs", json=LONG_JOB)
            response.raise_for_status()
            job_ids.append(response.json()["id"])
    results: dict[str, Stats] = {}
    meter = CpuMeter(portal)
    for name in runs:
        clients, pause = RUNS[name]
        before = meter.sample()
        results[name] = asyncio.run(_run(portal.base_url, token, job_ids, clients, pause,
                                         seconds))
        results[name].cpu = meter.spent(before, meter.sample())
        print(results[name].line(name), flush=True)
    return results


def run(db: str, seconds: float, root: Path, processes: int, runs: Sequence[str]) -> None:
    with test_redis(root, db=BENCH_REDIS_DB) as redis_url, database(db, root) as db_url:
        _measure(db, db_url, redis_url, root / f"{db}-{processes}", seconds, processes, runs)


def _measure(db: str, db_url: str, redis_url: str, root: Path, seconds: float,
             processes: int, runs: Sequence[str]) -> None:
    print(f"\n{db}, {processes} API process(es): {ACTIVE_JOBS} jobs training on 2 worker "
          f"slots, {seconds:.0f} s per run")
    portal = start_portal(as_deployed=True,
                          data_dir=root, db_url=db_url, redis_url=redis_url, workers=2,
                          policy="slaq", extra_env={"LOG_LEVEL": "WARNING",
                                                    "API_PROCESSES": str(processes)})
    try:
        results = bench_portal(portal, db_url, seconds, runs)
    finally:
        portal.close()
    slow, fast = results.get("max-20"), results.get("max-200")
    if slow and fast and slow.latencies and fast.latencies:
        ratio = (len(fast.latencies) / fast.seconds) / (len(slow.latencies) / slow.seconds)
        print(f"{'':>10}  throughput 200 clients / 20 clients: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2],
                        help="API process counts to compare (API_PROCESSES)")
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    parser.add_argument("--keep", type=Path, help="keep the portals' logs in this directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for db in (["sqlite", "postgres"] if args.db == "both" else [args.db]):
            for processes in args.processes:
                run(db, args.seconds, args.keep or Path(tmp), processes, args.runs)


if __name__ == "__main__":
    main()
