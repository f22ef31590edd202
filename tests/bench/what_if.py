"""What-if replay: how long a large window takes, and what it costs the API
process that took the request, in the request (a thread, as before
2026-11-25) and in the background (the spawned process the portal uses now).

    .venv/bin/python -m tests.bench.what_if [--jobs 2000] [--slots 8]
        [--policies fair slaq] [--seed 0]

The workload: ``--jobs`` arrivals within about an hour of the synthetic
curve shapes (:func:`~backend.scheduling.synthetic.synthetic_trace`), "as
run" under ``fair``; replayed on ``--slots`` at 1 s chunks. A probe stands
for the API process's other requests: a thread that runs 1 ms of Python,
sleeps 10 ms, and records how long each 1 ms took. Printed per mode: the
probe's p50 / p95 / max while the replay runs, the replay's wall time, and
for the background mode how long :func:`start` took (the request's own
wait), the progress updates seen by polling at 10 Hz, and p95 against the
idle probe. Figures vary run to run on a shared machine; nothing is
asserted. Needs Redis at ``REDIS_URL`` (default ``redis://127.0.0.1:6379/3``).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TypeVar

import numpy as np

from backend.core.models import utcnow
from backend.core.redis_conn import client_for
from backend.core.redis_keys import RedisKeys
from backend.scheduling.simulator import SimConfig, build_policy, simulate
from backend.scheduling.synthetic import synthetic_trace
from backend.scheduling.trace import Trace
from backend.scheduling.types import LIVE_HISTORY_POINTS
from backend.scheduling.workload import generate_workload
from backend.services import what_if_runs
from backend.services.portal_trace import PortalWorkload
from backend.services.what_if import replay, report

T = TypeVar("T")


def workload(jobs: int, slots: int, seed: int) -> PortalWorkload:
    trace = synthetic_trace(seed, per_shape=max(1, jobs // 8))
    arrivals = generate_workload(trace, slots=slots, load=2.0, jobs=jobs, seed=seed)
    scale = 3600.0 / max(arrivals[-1].time, 1.0)  # arrivals spread over an hour
    arrivals = [replace(a, time=a.time * scale) for a in arrivals]
    recorded = Trace(curves=trace.curves, description=trace.description,
                     arrivals=tuple(arrivals))
    as_run = simulate(build_policy("fair", recorded, arrivals), recorded, arrivals,
                      SimConfig(slots=slots, history_points=LIVE_HISTORY_POINTS))
    now = utcnow()
    return PortalWorkload(recorded, as_run, since=now, until=now)


class Probe:
    """1 ms of Python every 10 ms in a thread: how long after it was due each
    1 ms of work is done (1 ms when nothing else wants the GIL)."""

    def __init__(self) -> None:
        self.took: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        # From when it is due, not from when it got the GIL: waiting for the
        # GIL is the delay a request would see.
        due = time.perf_counter() + 0.01
        while not self.stop.wait(max(0.0, due - time.perf_counter())):
            end = time.perf_counter() + 0.001
            while time.perf_counter() < end:
                pass
            self.took.append(time.perf_counter() - due)
            due = time.perf_counter() + 0.01

    def __enter__(self) -> Probe:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()

    def figures(self) -> tuple[float, float, float]:
        ms = np.asarray(self.took or [float("nan")]) * 1000
        return float(np.median(ms)), float(np.percentile(ms, 95)), float(ms.max())


def in_request(load: PortalWorkload, policies: list[str], slots: int) -> float:
    started = time.perf_counter()
    done = threading.Event()

    def work() -> None:
        report(load, replay(load, policies, slots=slots, chunk_seconds=1.0))
        done.set()

    threading.Thread(target=work, daemon=True).start()
    done.wait()
    return time.perf_counter() - started


def background(load: PortalWorkload, policies: list[str], slots: int,
               keys: RedisKeys, url: str) -> tuple[float, float, int, str]:
    client = client_for(url)
    job = what_if_runs.ReplayJob(load, policies, slots, 1.0)
    started = time.perf_counter()
    run_id = what_if_runs.start(client, keys, job, started_by="bench")
    returned = time.perf_counter() - started
    seen: set[tuple[str, int]] = set()
    while True:
        run = what_if_runs.read(client, keys, run_id)
        assert run is not None
        if run["state"] != "running":
            break
        progress = run["progress"]
        seen.add((progress["policy"] or "", progress["jobs_finished"]))
        time.sleep(0.1)
    took = time.perf_counter() - started
    for key in (keys.what_if_run(run_id), keys.what_if_latest):
        client.delete(key)
    return returned, took, len(seen), run["state"]


def probed(fn: Callable[[], T]) -> tuple[T, tuple[float, float, float]]:
    with Probe() as probe:
        out = fn()
    return out, probe.figures()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--policies", nargs="+", default=["fair", "slaq"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    url = os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/3")
    keys = RedisKeys(f"slaqbench-{uuid.uuid4().hex[:8]}")
    os.environ["REDIS_PREFIX"] = keys.prefix
    built = time.perf_counter()
    load = workload(args.jobs, args.slots, args.seed)
    points = sum(c.iterations for c in load.trace.curves)
    print(f"{args.jobs} jobs ({len(load.trace.curves)} curves, {points:,} points), "
          f"{args.slots} slots, policies {' '.join(args.policies)}; "
          f"built in {time.perf_counter() - built:.1f} s at {datetime.now():%H:%M}")
    _, idle = probed(lambda: time.sleep(3))
    took, thread = probed(lambda: in_request(load, args.policies, args.slots))
    (returned, bg_took, updates, state), spawned = probed(
        lambda: background(load, args.policies, args.slots, keys, url))
    print(f"{'mode':<12} {'replay s':>9} {'probe p50 ms':>13} {'p95 ms':>8} {'max ms':>8} "
          f"{'p95/idle':>9}")
    for mode, seconds, (p50, p95, top) in (("idle", None, idle), ("in request", took, thread),
                                           ("background", bg_took, spawned)):
        shown = "-" if seconds is None else f"{seconds:.1f}"
        print(f"{mode:<12} {shown:>9} {p50:>13.2f} {p95:>8.2f} {top:>8.1f} "
              f"{p95 / idle[1]:>9.1f}")
    print(f"background: start() returned in {returned * 1000:.0f} ms; {updates} progress "
          f"states seen; ended {state}")


if __name__ == "__main__":
    main()
