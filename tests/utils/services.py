"""Real Redis and databases for tests, each isolated and cleaned up."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from sqlalchemy import create_engine, text

from backend.core.redis_conn import reachable, start_private_redis

TEST_REDIS_DB = int(os.environ.get("SLAQ_TEST_REDIS_DB", "13"))
"""Database 13 unless ``SLAQ_TEST_REDIS_DB`` names another, so two suites can run side by side."""
BENCH_REDIS_DB = 12
"""Benchmarks flush their database too: never the one a running test suite uses."""
PG_ADMIN_URL = os.environ.get("SLAQ_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextmanager
def test_redis(tmp: Path, db: int = TEST_REDIS_DB) -> Iterator[str]:
    """A Redis URL on a database number kept for tests, flushed before and
    after; a private redis-server when the shared one is not reachable.
    ``SLAQ_TEST_REDIS_URL`` names another server; ``db`` is always used."""
    server = os.environ.get("SLAQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    base = f"{server.rsplit('/', 1)[0]}/{db}"
    proc: subprocess.Popen[bytes] | None = None
    url = base
    if not reachable(base):
        proc, url = start_private_redis(tmp / "redis")
        for _ in range(100):
            if reachable(url):
                break
            time.sleep(0.05)
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield url
    finally:
        try:
            client.flushdb()
        finally:
            client.close()
            if proc is not None:
                proc.terminate()
                proc.wait(10)


def postgres_available() -> bool:
    try:
        engine = create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
        return True
    except Exception:
        return False


@contextmanager
def temp_postgres_db() -> Iterator[str]:
    """A fresh PostgreSQL database, dropped afterwards."""
    name = f"slaq_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        from backend.core.db import engine_for

        engine_for(f"{base}/{name}").dispose()
        with admin.connect() as conn:
            conn.execute(text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"
            ), {"n": name})
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@contextmanager
def database(kind: str, tmp: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'test.db'}"
    else:
        with temp_postgres_db() as url:
            yield url
