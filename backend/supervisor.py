"""`slaq run`: the whole portal on one machine under one supervisor.

Starts (or finds) Redis, migrates and seeds the database, then runs the API,
the scheduler and the Celery workers as child processes, restarting any that
crash, and stops them all cleanly on Ctrl-C.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from backend.core.db import engine_for, migrate, session_scope
from backend.core.pools import pool_queue
from backend.core.redis_conn import reachable, start_private_redis
from backend.core.redis_keys import RedisKeys
from backend.core.settings import Settings
from backend.seed import refused_seed_password, seed

log = logging.getLogger("slaq.supervisor")


STABLE_SECONDS = 60.0
"""A child that ran this long before exiting had settled: its back-off starts over."""
FIRST_RESTART_SECONDS = 0.5
"""Delay before restarting a child that crashed after a stable run."""
MAX_RESTART_SECONDS = 30.0
"""Longest delay between restarts of a child that keeps crashing at start."""


def restart_delay(quick_failures: int) -> float:
    """Back-off before the next start after ``quick_failures`` crashes in a row
    that each came before the child had run ``STABLE_SECONDS``."""
    return min(FIRST_RESTART_SECONDS * 2 ** quick_failures, MAX_RESTART_SECONDS)


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    quick_failures: int = 0
    started: float = field(default=0.0)
    restart_at: float | None = None

    def start(self, env: dict[str, str], now: float | None = None) -> None:
        # Own process group: Ctrl-C reaches only the supervisor, which then
        # stops the children in order instead of all at once.
        self.proc = subprocess.Popen(self.argv, env=env, start_new_session=True)
        self.started = time.monotonic() if now is None else now
        self.restart_at = None

    def check(self, env: dict[str, str], now: float) -> str | None:
        """Notice an exit and schedule a restart, or restart when due; never
        waits, so one crashing child does not delay watching the others.
        Returns a line for the operator when something happened."""
        if self.restart_at is not None:
            if now >= self.restart_at:
                self.restarts += 1
                self.start(env, now)
                return f"{self.name} restarted (restart {self.restarts})"
            return None
        if self.proc is None or self.proc.poll() is None:
            return None
        if now - self.started >= STABLE_SECONDS:
            self.quick_failures = 0
        delay = restart_delay(self.quick_failures)
        self.quick_failures += 1
        self.restart_at = now + delay
        return f"{self.name} exited with {self.proc.returncode}; restarting in {delay:g}s"

    def stop(self, timeout: float) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def children(settings: Settings) -> list[Child]:
    from workers.nodes import node_argv

    py = sys.executable
    return [
        Child("api", [py, "-m", "backend.cli", "api"]),
        Child("scheduler", [py, "-m", "backend.cli", "scheduler"]),
    ] + [
        # One node per slot, so a job's chunks can be sent back to the process
        # that holds its trainer (workers.nodes); each restarts on its own.
        Child(f"worker-{i}", node_argv(
            f"slaq-{os.getpid()}-{i}",
            pool_queue(RedisKeys(settings.redis_prefix), settings.worker_pool), "WARNING",
            quiet=True))
        for i in range(settings.workers)
    ]


READY_WAIT_SECONDS = 60.0
"""How long ``slaq run`` waits for the portal to be ready before printing its banner anyway."""


def wait_until_ready(settings: Settings, procs: list[Child], env: dict[str, str],
                     timeout: float = READY_WAIT_SECONDS) -> bool:
    """True once ``/api/v1/health`` answers with a worker slot up (the
    workers print their start-up lines before that); children are watched
    meanwhile, so one that crashes at start is restarted. False after ``timeout``."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    url = f"http://{host}:{settings.port}/api/v1/health"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if json.load(response).get("worker_slots", 0) >= 1:
                    return True
        except (OSError, ValueError):
            pass
        for child in procs:
            line = child.check(env, time.monotonic())
            if line:
                print(line, flush=True)
        time.sleep(0.2)
    return False


def run(settings: Settings) -> int:
    # Before anything starts (a private Redis included), so a refusal leaves
    # nothing behind to clean up.
    refused = refused_seed_password(
        admin_email=settings.admin_email, admin_password=settings.admin_password,
        demo_tenant=settings.demo_tenant, demo_password=settings.demo_password)
    if refused:
        print(f"Not starting: {refused}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    redis_proc = None
    redis_url = settings.redis_url
    if not reachable(redis_url):
        redis_proc, redis_url = start_private_redis(settings.data_dir / "redis")
        for _ in range(50):
            if reachable(redis_url):
                break
            time.sleep(0.1)
        print(f"No Redis at {settings.redis_url}; started a private one at {redis_url}")
    env["REDIS_URL"] = redis_url
    db_url = settings.effective_database_url
    env["DATABASE_URL"] = db_url
    migrate(db_url)
    with session_scope(engine_for(db_url)) as session:
        seeded = seed(session, admin_email=settings.admin_email,
                      admin_password=settings.admin_password, demo_tenant=settings.demo_tenant,
                      demo_password=settings.demo_password)
    procs = children(settings)
    for child in procs:
        child.start(env)
    # The banner holds the one-time passwords: printed once the portal is
    # ready, after the children's start-up lines, so it is the last thing on
    # screen (and stays so: nothing logs per scheduling round at INFO).
    if not wait_until_ready(settings, procs, env):
        print(f"The portal is not ready yet (API on port {settings.port}, a worker slot); "
              "see the lines above.")
    print(f"""
SLAQ portal is running: http://{settings.host}:{settings.port}/   (API docs: /docs)
  platform admin:    {seeded.admin.describe()}
  demo tenant admin: {seeded.demo.describe()}
  database: {db_url}
  redis:    {redis_url}
  workers:  {settings.workers} slot(s); policy {settings.policy}
Press Ctrl-C to stop.
""", flush=True)
    stopping = False

    def _stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stopping:
            time.sleep(0.2)
            for child in procs:
                line = None if stopping else child.check(env, time.monotonic())
                if line:
                    print(line, flush=True)
    finally:
        print("Stopping...", flush=True)
        for child in procs:
            child.stop(timeout=15)
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(10)
        print("Stopped.", flush=True)
    return 0
