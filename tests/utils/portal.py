"""A whole portal in subprocesses (API, scheduler, Celery workers) for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from backend.core.db import engine_for, migrate, session_scope
from backend.core.leases import Heartbeats
from backend.core.models import ApiToken, Role
from backend.core.pools import DEFAULT_POOL
from backend.core.redis_conn import free_port
from backend.core.redis_keys import RedisKeys
from backend.security import hash_token, new_api_token, token_display_prefix
from backend.seed import ensure_tenant, ensure_user

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Portal:
    base_url: str
    db_url: str
    redis_url: str
    prefix: str
    data_dir: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    @property
    def keys(self) -> RedisKeys:
        return RedisKeys(self.prefix)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True)

    def _spawn(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> None:
        log_path = self.data_dir / f"{name}.log"
        self.logs[name] = log_path
        env = dict(self.env, **(extra_env or {}))
        self.procs[name] = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log_path.open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_api(self, port: int) -> None:
        self._spawn("api", [sys.executable, "-m", "backend.cli", "api"],
                    {"HOST": "127.0.0.1", "PORT": str(port)})

    def start_scheduler(self, name: str = "scheduler") -> None:
        self._spawn(name, [sys.executable, "-m", "backend.cli", "scheduler"])

    def start_workers(self, concurrency: int, name: str = "workers", pool: str = DEFAULT_POOL,
                      gpu: str | None = "none", extra_env: dict[str, str] | None = None) -> None:
        """Worker slots joining ``pool``. ``gpu`` ("<model>:<MiB>") makes them
        advertise a GPU this machine may lack; "none" hides any; ``None``
        leaves it to detection. ``extra_env`` is added to this worker's environment."""
        env = {"WORKER_POOL": pool, **(extra_env or {})}
        if gpu is not None:
            env["WORKER_GPU"] = gpu
        # One Celery node per slot, as `slaq worker` runs them (workers.nodes).
        self._spawn(name, [sys.executable, "-m", "backend.cli", "worker",
                           "--concurrency", str(concurrency), "--loglevel", "INFO",
                           "--name", f"{name}-{os.getpid()}"], env)

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop_all(self, timeout: float = 20, sig: int = signal.SIGTERM) -> None:
        """Signal every process at once, then wait: their shutdowns overlap."""
        procs = [p for p in self.procs.values() if p.poll() is None]
        self.procs.clear()
        for proc in procs:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def wait_for_slots(self, n: int, timeout: float = 60) -> None:
        beats = Heartbeats(self.redis(), self.keys)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(beats.alive()) >= n:
                return
            time.sleep(0.2)
        raise TimeoutError(f"fewer than {n} worker slots after {timeout}s; see {self.logs}")

    def worker_nodes(self, name: str = "workers") -> list[int]:
        """The Celery main process of each slot node started as ``name``."""
        import psutil

        return [child.pid for child in psutil.Process(self.procs[name].pid).children()]

    def slot_pids(self) -> list[int]:
        """The live slot processes (a slot killed a moment ago heartbeats no
        more but stays listed until its heartbeat expires: left out)."""
        pids = [int(s.rsplit(":", 1)[1]) for s in Heartbeats(self.redis(), self.keys).alive()]
        return [pid for pid in pids if Path(f"/proc/{pid}").exists()]

    def kill_slots(self) -> list[int]:
        """SIGKILL every live slot process; the pids killed."""
        killed = []
        for pid in self.slot_pids():
            with suppress(ProcessLookupError):  # it ended between the listing and now
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        return killed

    def close(self) -> None:
        """Kill every process and delete this portal's Redis keys and queue.

        Killed, not stopped: nothing a closing portal would write outlives it
        (its keys go next, its database after), and the workers' graceful
        stop took 2 s of each of ~90 portals. Tests of a graceful stop call
        :meth:`stop`; sandboxes die with their worker (bubblewrap's
        --die-with-parent) and the next worker sweeps their cgroups."""
        self.stop_all(sig=signal.SIGKILL)
        client = self.redis()
        for key in client.scan_iter(f"{self.prefix}:*"):
            client.delete(key)
        # Every pool's queue: the default pool's and the "<queue>.<pool>" ones.
        for key in client.scan_iter(f"{self.keys.chunk_queue}*"):
            client.delete(key)

    def log_tail(self, lines: int = 60) -> str:
        out = []
        for name, path in self.logs.items():
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {name} ---\n" + "\n".join(text))
        return "\n".join(out)


def token_client(portal: Portal, token: str) -> httpx.Client:
    """An API client of ``portal`` that sends ``token``; close it (``with``)."""
    return httpx.Client(base_url=portal.base_url, timeout=30,
                        headers={"Authorization": f"Bearer {token}"})


def make_user_token(db_url: str, *, tenant: str, email: str, role: Role = Role.member,
                    **quotas: Any) -> str:
    """A user in ``tenant`` (created if needed) and a fresh API token for them."""
    with session_scope(engine_for(db_url)) as session:
        t = ensure_tenant(session, tenant, **quotas)
        user, _ = ensure_user(session, email=email, password="pw-" + email, tenant=t, role=role)
        token = new_api_token()
        session.add(ApiToken(user_id=user.id or 0, name="test", token_hash=hash_token(token),
                             prefix=token_display_prefix(token)))
        session.commit()
    return token


TEST_ENV = {
    # Tests count the chunks of a job alone on the cluster (residency,
    # cadence, pauses); the longer chunks of idle rounds have their own test
    # (test_idle_chunks_live).
    "IDLE_CHUNK_FACTOR": "1",
    # Most test portals run no PyTorch job: importing it in both slots' main
    # processes took ~1.5 s of each of ~90 portal starts on 2 cores.
    "WORKER_PRELOAD_TRAINERS": "false",
}
"""What a test portal runs with unless started ``as_deployed``."""


def start_portal(*, data_dir: Path, db_url: str, redis_url: str, workers: int = 2,
                 policy: str = "fair", extra_env: dict[str, str] | None = None,
                 as_deployed: bool = False) -> Portal:
    """API, scheduler and ``workers`` Celery worker processes on ``db_url``
    and ``redis_url``. ``as_deployed``: the portal's own defaults, as
    benchmarks of the portal as deployed want; else :data:`TEST_ENV`."""
    data_dir.mkdir(parents=True, exist_ok=True)
    migrate(db_url)
    port = free_port()
    # Unique per portal: two portals in one test process must not share keys.
    prefix = f"slaqtest{os.getpid()}-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": db_url, "REDIS_URL": redis_url, "REDIS_PREFIX": prefix,
        "DATA_DIR": str(data_dir), "POLICY": policy, "ENVIRONMENT": "test",
        "LEASE_SECONDS": "6", "HEARTBEAT_SECONDS": "1", "CHUNK_SECONDS": "0.5",
        "SCHEDULER_TICK_SECONDS": "0.5", "PYTHONUNBUFFERED": "1",
    })
    if not as_deployed:
        env.update(TEST_ENV)
    env.update(extra_env or {})
    portal = Portal(base_url=f"http://127.0.0.1:{port}", db_url=db_url, redis_url=redis_url,
                    prefix=prefix, data_dir=data_dir, env=env)
    portal.start_api(port)
    portal.start_scheduler()
    if workers:  # none: an API and scheduler only, for tests of stored data
        portal.start_workers(workers)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{portal.base_url}/api/v1/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            portal.stop_all()
            raise TimeoutError("API did not start:\n" + portal.log_tail())
        time.sleep(0.2)
    if not workers:
        return portal
    try:
        # Generous: on a loaded machine a Celery node takes a minute to import.
        portal.wait_for_slots(workers, timeout=180)
    except TimeoutError:
        portal.stop_all()  # a failed start must not leave its processes running
        raise
    return portal


@contextmanager
def running_portal(**kwargs: Any) -> Iterator[Portal]:
    """:func:`start_portal` for a ``with`` block; closed on the way out."""
    portal = start_portal(**kwargs)
    try:
        yield portal
    finally:
        portal.close()
