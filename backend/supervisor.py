"""`slaq run`: the whole portal on one machine under one supervisor.

Starts (or finds) Redis, migrates and seeds the database, then runs the API,
the scheduler and the Celery workers as child processes, restarting any that
crash, and stops them all cleanly on Ctrl-C.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from backend.core.db import engine_for, migrate, session_scope
from backend.core.redis_conn import reachable, start_private_redis
from backend.core.redis_keys import RedisKeys
from backend.core.settings import Settings
from backend.seed import seed

log = logging.getLogger("slaq.supervisor")


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started: float = field(default=0.0)

    def start(self, env: dict[str, str]) -> None:
        # Own process group: Ctrl-C reaches only the supervisor, which then
        # stops the children in order instead of all at once.
        self.proc = subprocess.Popen(self.argv, env=env, start_new_session=True)
        self.started = time.monotonic()

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
    py = sys.executable
    return [
        Child("api", [py, "-m", "uvicorn", "backend.main:app", "--host", settings.host,
                      "--port", str(settings.port), "--log-level", "warning"]),
        Child("scheduler", [py, "-m", "backend.cli", "scheduler"]),
        Child("workers", [py, "-m", "celery", "-A", "workers.celery_app", "worker",
                          "--concurrency", str(settings.workers), "--pool", "prefork",
                          "-Q", RedisKeys(settings.redis_prefix).chunk_queue,
                          "--loglevel", "WARNING", "--without-gossip",
                          "--without-mingle", "-n", f"slaq-{os.getpid()}@%h"]),
    ]


def run(settings: Settings) -> int:
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
                      admin_password=settings.admin_password, demo_tenant=settings.demo_tenant)
    procs = children(settings)
    for child in procs:
        child.start(env)
    print(f"""
SLAQ portal is running: http://{settings.host}:{settings.port}/   (API docs: /docs)
  platform admin:    {seeded.admin_email} / {settings.admin_password}
  demo tenant admin: {seeded.demo_email} / demo
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
            time.sleep(0.5)
            for child in procs:
                if child.proc is not None and child.proc.poll() is not None and not stopping:
                    child.restarts += 1
                    delay = min(2 ** child.restarts, 30)
                    print(f"{child.name} exited with {child.proc.returncode}; "
                          f"restarting in {delay}s", flush=True)
                    time.sleep(delay)
                    child.start(env)
    finally:
        print("Stopping...", flush=True)
        for child in procs:
            child.stop(timeout=15)
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(10)
        print("Stopped.", flush=True)
    return 0
