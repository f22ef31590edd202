"""Sign-in rate limiting: failed attempts per account and per client address
in a sliding window, kept in Redis so every API process shares them."""

from __future__ import annotations

import hashlib

import redis

from backend.core.redis_keys import RedisKeys

MAX_FAILURES = 5
WINDOW_SECONDS = 300


def _key(keys: RedisKeys, kind: str, value: str) -> str:
    digest = hashlib.sha256(value.lower().encode()).hexdigest()[:32]
    return keys.signin_failures(kind, digest)


def blocked_for(client: redis.Redis, keys: RedisKeys, email: str, address: str) -> int:
    """Seconds until this account/address may try again; 0 if it may now."""
    worst = 0
    for kind, value in (("email", email), ("addr", address)):
        key = _key(keys, kind, value)
        count = int(client.get(key) or 0)
        limit = MAX_FAILURES if kind == "email" else MAX_FAILURES * 4
        if count >= limit:
            worst = max(worst, int(client.ttl(key)))
    return max(worst, 0)


def record_failure(client: redis.Redis, keys: RedisKeys, email: str, address: str) -> None:
    pipe = client.pipeline()
    for kind, value in (("email", email), ("addr", address)):
        key = _key(keys, kind, value)
        pipe.incr(key)
        pipe.expire(key, WINDOW_SECONDS, nx=True)
    pipe.execute()


def clear(client: redis.Redis, keys: RedisKeys, email: str) -> None:
    client.delete(_key(keys, "email", email))
