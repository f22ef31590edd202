"""A remembered caller is used only under the epoch, age and token expiry it
was read with."""

from __future__ import annotations

from datetime import timedelta

from backend.api.callers import CallerCache
from backend.core.models import Tenant, User, utcnow


def _rows() -> tuple[User, Tenant]:
    tenant = Tenant(id=3, name="t")
    return User(id=7, tenant_id=3, email="u@t.test", password_hash="x"), tenant


def test_remembered_under_the_same_epoch_only() -> None:
    cache = CallerCache()
    cache.put("h", "epoch-1", *_rows(), token_expires_at=None)
    found = cache.get("h", "epoch-1")
    assert found is not None and (found[0].id, found[1].name) == (7, "t")
    assert cache.get("h", "epoch-2") is None
    assert cache.get("h", "epoch-1") is None, "a stale entry is dropped, not kept for later"


def test_remembered_rows_are_copies() -> None:
    cache = CallerCache()
    user, tenant = _rows()
    cache.put("h", "e", user, tenant, token_expires_at=None)
    user.email = "changed@t.test"
    found = cache.get("h", "e")
    assert found is not None and found[0].email == "u@t.test"


def test_forgotten_after_the_ttl() -> None:
    cache = CallerCache(ttl=0.0)
    cache.put("h", "e", *_rows(), token_expires_at=None)
    assert cache.get("h", "e") is None


def test_an_expired_token_is_not_served_from_memory() -> None:
    cache = CallerCache()
    cache.put("h", "e", *_rows(), token_expires_at=utcnow() - timedelta(seconds=1))
    assert cache.get("h", "e") is None
    cache.put("h", "e", *_rows(), token_expires_at=utcnow() + timedelta(hours=1))
    assert cache.get("h", "e") is not None


def test_bounded_least_recently_stored_first() -> None:
    cache = CallerCache(max_entries=2)
    for key in ("a", "b", "c"):
        cache.put(key, "e", *_rows(), token_expires_at=None)
    assert cache.get("a", "e") is None
    assert cache.get("b", "e") is not None and cache.get("c", "e") is not None
