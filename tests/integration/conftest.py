from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.utils.portal import Portal, make_user_token, start_portal


@pytest.fixture(scope="module")
def portal(module_db_url: str, redis_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    """API + scheduler + 2 Celery worker processes on real Redis and DB."""
    data: Path = tmp_path_factory.mktemp("portal")
    running = start_portal(data_dir=data, db_url=module_db_url, redis_url=redis_url)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def member_token(portal: Portal) -> str:
    return make_user_token(portal.db_url, tenant="team-a", email="alice@team-a.test")


@pytest.fixture
def api(portal: Portal, member_token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {member_token}"}) as client:
        yield client


@pytest.fixture
def portal_url(portal: Portal) -> str:
    return portal.base_url


@pytest.fixture(scope="module")
def other_token(portal: Portal) -> str:
    return make_user_token(portal.db_url, tenant="team-b", email="bob@team-b.test")
