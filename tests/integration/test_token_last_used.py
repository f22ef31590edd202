"""An API token's "Last used" is recorded when it is used, and written at
most once a minute however often it is used (issue 38: it stayed "never"
after dozens of calls)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.utils.portal import Portal

# One database: the subject is the caller cache's write-back of last use; tokens are stored on
# both databases in test_admin_tokens.
pytestmark = pytest.mark.one_database


def _mine(api: httpx.Client, name: str) -> dict[str, object]:
    listed = api.get("/api/v1/auth/tokens")
    assert listed.status_code == 200, listed.text
    return next(t for t in listed.json() if t["name"] == name)


def test_a_used_token_shows_when_it_was_last_used(api: httpx.Client, portal: Portal) -> None:
    created = api.post("/api/v1/auth/tokens", json={"name": "script"})
    assert created.status_code == 201, created.text
    assert _mine(api, "script")["last_used_at"] is None

    before = datetime.now(UTC)
    headers = {"Authorization": f"Bearer {created.json()['token']}"}
    with httpx.Client(base_url=portal.base_url, timeout=30, headers=headers) as script:
        for _ in range(3):
            assert script.get("/api/v1/jobs").status_code == 200
        first = _mine(api, "script")["last_used_at"]
        assert isinstance(first, str)
        used = datetime.fromisoformat(first)
        assert before - timedelta(seconds=5) <= used <= datetime.now(UTC) + timedelta(seconds=5)

        # Dozens of calls within the minute write nothing more.
        for _ in range(20):
            assert script.get("/api/v1/jobs").status_code == 200
        assert _mine(api, "script")["last_used_at"] == first
