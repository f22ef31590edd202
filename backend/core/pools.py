"""Worker pools: what a worker slot advertises, and the pools those adverts make.

A worker joins one pool when it starts (``slaq worker --pool gpu``; default
``cpu``) and each of its slots heartbeats the pool's name with the resources
it detected: cores, memory, and the GPU model and memory if it has one. Each
pool is its own Celery queue, so a chunk placed on a pool is taken only by
that pool's workers. The scheduler turns the live adverts into
pool views each round (:mod:`backend.scheduler.pools`) and records
every pool it has seen in the database (:class:`WorkerPool`), where platform
admins reserve pools for tenants and where the API checks at submit that some
pool can ever run a job.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from dataclasses import asdict, dataclass

from backend.core.redis_keys import RedisKeys

DEFAULT_POOL = "cpu"
"""The pool a worker joins unless told otherwise."""

POOL_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
POOL_NAME_RULE = "1-40 lower-case letters, digits or '-', starting with a letter or digit"


@dataclass(frozen=True)
class SlotInfo:
    """One worker slot's advert: its pool and its host's resources."""

    pool: str = DEFAULT_POOL
    host: str = ""
    cores: int = 0
    memory_mb: int = 0
    gpu: str | None = None
    gpu_memory_mb: int = 0
    queue: str = ""
    """The slot's own Celery queue: a chunk sent there runs in this very
    process, where the job's trainer may still be loaded. Empty for a worker
    without one (an older worker): it takes chunks from its pool's queue only."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str | bytes | None) -> SlotInfo:
        """A slot that advertised nothing (an older worker) is a default-pool slot."""
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
            return cls(pool=str(data.get("pool") or DEFAULT_POOL), host=str(data.get("host", "")),
                       cores=int(data.get("cores", 0)), memory_mb=int(data.get("memory_mb", 0)),
                       gpu=data.get("gpu") or None,
                       gpu_memory_mb=int(data.get("gpu_memory_mb", 0)),
                       queue=str(data.get("queue") or ""))
        except (ValueError, TypeError, AttributeError):
            return cls()


def check_pool_name(name: str) -> str:
    if not POOL_NAME.match(name):
        raise ValueError(f"pool name {name!r} is not valid: {POOL_NAME_RULE}")
    return name


def pool_queue(keys: RedisKeys, pool: str) -> str:
    """The Celery queue of a pool's workers.

    The default pool keeps the single queue of portals without pools, so
    chunks queued before an upgrade are still taken.
    """
    return keys.chunk_queue if pool == DEFAULT_POOL else f"{keys.chunk_queue}.{pool}"


def slot_queue(keys: RedisKeys, pool: str, node: str) -> str:
    """The queue only the worker node ``node`` (one slot: concurrency 1) consumes."""
    return f"{pool_queue(keys, pool)}.slot.{node}"


def _gpu_from_env(value: str) -> tuple[str | None, int]:
    # WORKER_GPU="none", or "<model>:<memory MiB>" where detection cannot see
    # the device (e.g. inside some containers).
    if value.lower() in ("", "none", "0"):
        return None, 0
    model, _, memory = value.rpartition(":")
    if not model or not memory.isdigit():
        return value, 0
    return model, int(memory)


def detect_gpu() -> tuple[str | None, int]:
    """The first GPU's model and memory in MiB, from nvidia-smi; none without one."""
    override = os.environ.get("WORKER_GPU")
    if override is not None:
        return _gpu_from_env(override.strip())
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, 0
    try:
        query = [smi, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]
        out = subprocess.run(query, capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, 0
    first = out.strip().splitlines()[0] if out.strip() else ""
    name, _, memory = first.rpartition(",")
    if not name:
        return None, 0
    return name.strip(), int(float(memory.strip() or 0))


def detect_slot(pool: str, queue: str = "") -> SlotInfo:
    """This host's resources, advertised by each of its slots in ``pool``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    gpu, gpu_memory_mb = detect_gpu()
    return SlotInfo(pool=pool, host=socket.gethostname(), cores=cores, memory_mb=int(memory_mb),
                    gpu=gpu, gpu_memory_mb=gpu_memory_mb, queue=queue)
