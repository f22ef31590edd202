"""Shared fixtures: a real Redis (test database number), real databases
(SQLite and PostgreSQL), and a whole portal in subprocesses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.utils.services import database, postgres_available, test_redis

DB_KINDS = ["sqlite", "postgresql"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests whose subject is not the database (sandbox, streams) run
    once, on SQLite, instead of once per database."""
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and "postgresql" in callspec.params.values()
        (drop if on_postgres and item.get_closest_marker("one_database") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with test_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


def _db(kind: str, tmp: Path) -> Iterator[str]:
    if kind == "postgresql" and not postgres_available():
        pytest.fail("PostgreSQL is not reachable at SLAQ_TEST_PG_URL; .ci/run starts it")
    with database(kind, tmp) as url:
        yield url


@pytest.fixture(params=DB_KINDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of each kind (function scope)."""
    yield from _db(request.param, tmp_path)


@pytest.fixture(scope="module", params=DB_KINDS)
def module_db_url(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _db(request.param, tmp_path_factory.mktemp("db"))
