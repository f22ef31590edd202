"""Engine, sessions and migrations for SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine

MIGRATIONS_DIR = Path(__file__).parent.parent / "migrations"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets the API read while a worker writes; the busy timeout turns
    # momentary lock contention between processes into a short wait.
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


STREAM_OVERFLOW = 10


def make_engine(url: str) -> Engine:
    from backend.core.auth_epoch import watch_sessions
    from backend.core.settings import get_settings

    watch_sessions()  # every process that writes accounts tells the API processes

    # The API lets at most ``api_threads`` requests in at once
    # (backend.api.request_limit) and each holds at most one connection, so a
    # pool that large never makes a request wait for a connection. Live
    # streams are not counted there and read briefly: they take the overflow.
    size = get_settings().api_threads
    pool = {"pool_size": min(size, 10), "max_overflow": max(size - 10, 0) + STREAM_OVERFLOW,
            "pool_timeout": 10}
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               **pool)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, **pool)


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    return make_engine(url)


def get_engine() -> Engine:
    from backend.core.settings import get_settings

    return engine_for(get_settings().effective_database_url)


@contextmanager
def session_scope(engine: Engine | None = None) -> Iterator[Session]:
    """A session for background code; commits are explicit."""
    with Session(engine or get_engine(), expire_on_commit=False) as session:
        yield session


def migrate(url: str) -> None:
    """Bring the schema at ``url`` to the newest Alembic revision."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    engine = engine_for(url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
