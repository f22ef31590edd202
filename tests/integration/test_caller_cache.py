"""API processes remember callers, yet every account change is seen at once.

A commit that touches an account, token, web session or tenant replaces the
Redis auth epoch; a portal with two API processes refuses a revoked token or
a deactivated user on the very next request, whichever process answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import select
from sqlmodel import col

from backend.core.auth_epoch import bump
from backend.core.db import engine_for, migrate, session_scope
from backend.core.models import ApiToken, Job, Role, User
from backend.core.redis_keys import RedisKeys
from backend.core.settings import get_settings
from backend.security import hash_token
from tests.utils.portal import Portal, make_user_token, start_portal

# One database: the subject is a cache epoch in Redis shared by API processes.
pytestmark = pytest.mark.one_database

REQUESTS = 24  # each on its own connection, so both API processes answer some


@pytest.fixture(scope="module")
def two_api_processes(module_db_url: str, redis_url: str,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    portal = start_portal(data_dir=tmp_path_factory.mktemp("portal"), db_url=module_db_url,
                          redis_url=redis_url, workers=1, extra_env={"API_PROCESSES": "2"})
    try:
        yield portal
    finally:
        portal.close()


def _statuses(portal: Portal, token: str) -> set[int]:
    codes = set()
    for _ in range(REQUESTS):
        with httpx.Client(base_url=portal.base_url, timeout=30,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            codes.add(client.get("/api/v1/jobs").status_code)
    return codes


def test_a_revoked_token_is_refused_by_every_process(two_api_processes: Portal) -> None:
    portal = two_api_processes
    token = make_user_token(portal.db_url, tenant="epoch", email="rev@epoch.test")
    assert _statuses(portal, token) == {200}
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        mine = client.get("/api/v1/auth/tokens").json()
        assert client.delete(f"/api/v1/auth/tokens/{mine[0]['id']}").status_code == 204
    assert _statuses(portal, token) == {401}


def test_a_deactivated_user_is_refused_by_every_process(two_api_processes: Portal) -> None:
    portal = two_api_processes
    admin = make_user_token(portal.db_url, tenant="epoch", email="boss@epoch.test",
                            role=Role.tenant_admin)
    token = make_user_token(portal.db_url, tenant="epoch", email="gone@epoch.test")
    assert _statuses(portal, token) == {200}
    with session_scope(engine_for(portal.db_url)) as session:
        user_id = session.execute(
            select(col(User.id)).where(col(User.email) == "gone@epoch.test")).scalar_one()
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {admin}"}) as client:
        assert client.patch(f"/api/v1/admin/users/{user_id}",
                            json={"is_active": False}).status_code == 200
    assert _statuses(portal, token) == {401}


@pytest.fixture
def epoch_here(db_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch,
               tmp_path: Path) -> Iterator[tuple[str, redis.Redis, RedisKeys]]:
    """This process's sessions publish to a test Redis prefix."""
    migrate(db_url)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("REDIS_PREFIX", f"epoch-{tmp_path.name}")
    get_settings.cache_clear()
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield db_url, client, RedisKeys(get_settings().redis_prefix)
    finally:
        client.close()
        get_settings.cache_clear()


def test_only_account_commits_replace_the_epoch(
        epoch_here: tuple[str, redis.Redis, RedisKeys]) -> None:
    db_url, client, keys = epoch_here
    token = make_user_token(db_url, tenant="quiet", email="q@quiet.test")
    first = client.get(keys.auth_epoch)
    assert first is not None, "creating a user and a token is an account change"
    with session_scope(engine_for(db_url)) as session:
        user = session.execute(select(User)).scalars().first()
        assert user is not None
        session.add(Job(tenant_id=user.tenant_id, user_id=user.id or 0, name="j",
                        algorithm="logistic_regression", dataset="iris", max_iterations=10))
        session.commit()
    assert client.get(keys.auth_epoch) == first, "a job is not an account change"
    with session_scope(engine_for(db_url)) as session:
        row = session.execute(select(ApiToken).where(
            col(ApiToken.token_hash) == hash_token(token))).scalar_one()
        row.name = "renamed"
        session.add(row)
        session.rollback()
    assert client.get(keys.auth_epoch) == first, "a rolled-back change is no change"
    with session_scope(engine_for(db_url)) as session:
        row = session.execute(select(ApiToken).where(
            col(ApiToken.token_hash) == hash_token(token))).scalar_one()
        row.revoked_at = row.created_at
        session.add(row)
        session.commit()
    assert client.get(keys.auth_epoch) not in (None, first)


def test_an_epoch_is_never_reused(epoch_here: tuple[str, redis.Redis, RedisKeys]) -> None:
    _, client, keys = epoch_here
    seen = set()
    for _ in range(3):
        bump(client, keys)
        seen.add(client.get(keys.auth_epoch))
        client.delete(keys.auth_epoch)  # as a wiped Redis would
    assert len(seen) == 3
