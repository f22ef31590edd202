"""All configuration in one object, read from the environment and `.env`.

Every setting has a working default so `slaq run` starts on a fresh machine
with an SQLite file and a local Redis; production overrides DATABASE_URL,
REDIS_URL and SECRET_KEY.
"""

from __future__ import annotations

import ipaddress
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEV_SECRET = "dev-only-secret-change-me"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    environment: str = Field("development", description="development, test or production")
    data_dir: Path = Field(Path("var"), description="Where SQLite, checkpoints and logs live")
    database_url: str = Field("", description="SQLAlchemy URL; empty means SQLite in data_dir")
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Redis for broker and state")
    redis_prefix: str = Field("slaq", description="Namespace for every Redis key")
    secret_key: str = Field(DEV_SECRET, description="Signs session cookies")
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)
    chunk_seconds: float = Field(1.0, gt=0, description="Target wall time of one chunk")
    idle_chunk_factor: float = Field(
        5.0, ge=1, le=100,
        description="In a round that grants every waiting job and still leaves a slot idle, "
        "chunks are up to this many times chunk_seconds: no decision is pending, and each "
        "chunk costs a commit and a dispatch. 1: always chunk_seconds")
    default_chunk_iterations: int = Field(10, ge=1, description="First chunk of a new job")
    lease_seconds: float = Field(30.0, gt=0, description="A chunk not reported by then is lost")
    heartbeat_seconds: float = Field(2.0, gt=0, description="Worker heartbeat period")
    worker_pool: str = Field(
        "cpu", pattern=r"^[a-z0-9][a-z0-9-]{0,39}$",
        description="The pool a worker joins (`slaq worker --pool`): its slots take only "
        "chunks placed on that pool")
    scheduler_tick_seconds: float = Field(1.0, gt=0)
    scheduler_lock_seconds: float = Field(
        1.5, gt=0,
        description="TTL of the single-active scheduler lock: a standby takes over at most "
        "this long (plus one standby poll) after the active scheduler dies")
    scheduler_lock_renew_seconds: float = Field(
        0.5, gt=0,
        description="How often the active scheduler renews its lock, from a thread of its "
        "own so a long round cannot let it lapse. It stops granting once its last renewal "
        "is older than the TTL less this period; at most a third of SCHEDULER_LOCK_SECONDS")
    scheduler_standby_poll_seconds: float = Field(
        0.25, gt=0, description="How often a standby scheduler tries to take the lock")
    policy: str = Field("slaq", description="Active scheduling policy at first start")
    # backend.scheduling.guards.DEFAULT_COMPLETION_GUARD, written out: core
    # imports nothing else of the portal (tests/unit/test_layers.py), and a
    # unit test holds the two equal.
    completion_guard: float = Field(
        0.4, ge=0, le=1,
        description="slaq's completion-time guard at first start: the share of a round-robin "
        "turn every job is guaranteed (0 off: quality first; 1: as often as round-robin, "
        "mean completion near fair). A platform admin changes it on the admin page")
    completion_weight: float = Field(
        0.0, ge=0, le=1,
        description="What slaq counts finishing a job as worth, in normalised loss: a job "
        "gains this over the compute seconds it has left to max_iterations in its score, so "
        "jobs near their end finish sooner (0, the default: quality first; 0.01 cut mean "
        "completion by 2-5 points against las in the benchmarks and gave up 1-4 points of "
        "quality, docs/scheduling.md). At first start; a platform admin changes it on the "
        "admin page")
    max_iterations_limit: int = Field(1_000_000, ge=1, description="Hard cap on any job")
    checkpoint_dir: Path | None = None
    checkpoint_seconds: float = Field(
        30.0, gt=0,
        description="A resident trainer's state is written to the checkpoint store when its "
        "job leaves the slot, and otherwise at a chunk's end at most this often: what a "
        "worker crash can cost in compute (never in loss points)")
    checkpoint_share: float = Field(
        0.02, gt=0, le=1,
        description="A state whose save holds training up (state(), and for tenant code the "
        "copy out of its sandbox) is written less often than checkpoint_seconds, so that "
        "those saves take at most this share of its slot time: a 33M-parameter tenant "
        "model whose state takes 5 s is saved every 250 s at 0.02. 1: every "
        "checkpoint_seconds, whatever a save costs")
    idle_save_seconds: float = Field(
        2.0, gt=0,
        description="A slot whose resident job has not been granted again for this long "
        "writes that job's state (and lets it go once the job is paused, cancelled or over)")
    task_time_limit: int = Field(300, ge=1, description="Hard Celery time limit per chunk")
    api_processes: int = Field(
        1, ge=1, le=64,
        description="API server processes; each has its own threads and database pool")
    api_threads: int = Field(
        4, ge=1, le=1000,
        description="Requests one API process runs at once (on as many threads); more wait "
        "their turn in the event loop. The database pool holds as many connections, so no "
        "request waits on the pool. The work is mostly Python under one lock, and every "
        "thread beyond a few adds CPU per request (a 20-job list: 5.5 ms alone, 7.8 ms with "
        "4 threads, 11.6 ms with 16); scale with API_PROCESSES instead")
    worker_preload_trainers: bool = Field(
        True, description="Import every trainer class (PyTorch's and plugins') in a worker's "
        "main process before its slots start, so no slot's first job pays it (1-2 s of CPU); "
        "off, a slot imports PyTorch with its first PyTorch job")
    worker_nice: int = Field(
        10, ge=0, le=19,
        description="Scheduling niceness of worker processes (and of a worker's session "
        "group under Linux autogroup): on a shared host, training yields the CPU to the API "
        "and the scheduler, which answer people")
    admin_email: str = "admin@example.com"
    admin_password: str = Field(
        "", description="The seeded platform admin's first password; empty means generate "
        "one and print it once. Must pass the password policy")
    demo_tenant: str = "demo"
    stream_keepalive_seconds: float = Field(
        15.0, gt=0, le=300,
        description="Longest silence on a live event stream before the API sends an SSE "
        "comment, so proxies and browsers keep an idle job's stream open")
    demo_password: str = Field(
        "", description="The seeded demo tenant admin's first password; as ADMIN_PASSWORD")
    sandbox_memory_mib: int = Field(
        4096, ge=64, le=1_048_576,
        description="Memory one sandboxed tenant trainer may hold, everything counted "
        "(processes, memfds, tmpfs, shared memory, dirtied page cache), by cgroup (MiB)")
    sandbox_step_timeout_seconds: float | None = Field(
        None, gt=0, description="How long the worker waits for one answer from tenant code "
        "before killing it; empty means LEASE_SECONDS")
    sandbox_max_processes: int = Field(
        64, ge=1, le=4096, description="Processes and threads tenant code may run at once "
        "(cgroup pids.max)")
    sandbox_work_mib: int = Field(
        1024, ge=1, description="Size of the private /work and /tmp of tenant code (MiB "
        "each; what they hold counts against SANDBOX_MEMORY_MIB)")
    sandbox_prestart: bool = Field(
        True, description="Keep one empty sandbox started ahead per worker process, so a "
        "chunk of tenant code does not wait for the interpreter's imports")
    sandbox_preimport: Annotated[list[str], NoDecode] = Field(
        ["numpy", "torch"], description="Modules a sandbox imports before tenant code "
        "enters (comma-separated; ones not installed are skipped)")
    sandbox_max_state_mib: int | None = Field(
        None, ge=1, description="Largest training state tenant code may return (MiB); "
        "empty means a quarter of SANDBOX_MEMORY_MIB")
    sandbox_gpus: str = Field(
        "auto", description="GPUs whose device nodes the sandbox gets: 'auto' (the "
        "worker's CUDA_VISIBLE_DEVICES, else the host's only GPU), 'none', or minor "
        "numbers such as '0' or '2,3'")
    sandbox_cgroup_parent: str = Field(
        "", description="cgroup (path under the cgroup mount, or each v1 hierarchy) under "
        "which sandboxes get their own cgroups; empty means the worker's own")
    sandbox_require_cgroup: bool = Field(
        True, description="Refuse tenant code when no cgroup can bound its memory and "
        "processes; false only on development machines without cgroups")
    metrics_token: SecretStr = Field(
        SecretStr(""),
        description="Bearer token that may read the API's /metrics besides platform admins' "
        "API tokens (for Prometheus); empty means only platform admins. Never logged")
    metrics_token_file: Path | None = Field(
        None, description="A file holding METRICS_TOKEN (its first line), read at every "
        "scrape so it can be rotated in place; wins over METRICS_TOKEN when set")
    metrics_host: str = Field(
        "127.0.0.1", description="Address the scheduler's and workers' own metrics "
        "endpoints listen on (0.0.0.0 in containers); they carry no tenant figures")
    scheduler_metrics_port: int = Field(
        0, ge=0, le=65535,
        description="Port of the scheduler's own Prometheus endpoint; 0 turns it off")
    worker_metrics_port: int = Field(
        0, ge=0, le=65535,
        description="Port of a Celery worker's own Prometheus endpoint (its host's and "
        "pool's chunk figures); 0 turns it off")
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Reverse proxies (IPs or networks, comma-separated) whose "
        "X-Forwarded-For is believed; empty means the socket's peer is the client")

    @field_validator("trusted_proxies", "sandbox_preimport", mode="before")
    @classmethod
    def _split_proxies(cls, value: object) -> object:
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [part for part in (p.strip() for p in value.split(",")) if part]
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _valid_proxies(cls, value: list[str]) -> list[str]:
        for entry in value:
            ipaddress.ip_network(entry, strict=False)  # a ValueError names the bad entry
        return value

    @model_validator(mode="after")
    def _refuse_placeholder_secret(self) -> Settings:
        if self.environment == "production" and self.secret_key == DEV_SECRET:
            raise ValueError("SECRET_KEY must be set in production")
        return self

    @property
    def effective_metrics_token(self) -> str:
        """METRICS_TOKEN_FILE's first line if set, else METRICS_TOKEN; empty: none."""
        if self.metrics_token_file is not None:
            lines = self.metrics_token_file.read_text().splitlines()
            return lines[0].strip() if lines else ""
        return self.metrics_token.get_secret_value().strip()

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'slaq.db').resolve()}"

    @property
    def effective_checkpoint_dir(self) -> Path:
        return self.checkpoint_dir or (self.data_dir / "checkpoints")


@lru_cache
def get_settings() -> Settings:
    return Settings()
