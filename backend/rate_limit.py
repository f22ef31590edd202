"""Sign-in throttling, kept in Redis so every API process shares it.

Failures are counted per (account, client address) pair and per client
address. After a few failures a pair waits before its next attempt, twice as
long after each further failure: guessing one account's password slows to a
crawl, while its owner, signing in from any other address, is never held up
by someone else's guesses. A looser count per address, across all accounts,
slows one address spraying guesses over many accounts.
"""

from __future__ import annotations

import hashlib
import math

import redis

from backend.core.redis_keys import RedisKeys

PAIR_FREE_FAILURES = 3
"""Failures of one account from one address before the back-off starts
(typos happen)."""
ADDRESS_FREE_FAILURES = 20
"""Failures from one address, over all accounts, before that address waits."""
MAX_WAIT_SECONDS = 900
FORGET_SECONDS = 24 * 3600
"""A count lapses after this long without a failure; longer than
MAX_WAIT_SECONDS, so an attacker who waits out each back-off keeps the
longest one."""


def backoff_seconds(failures: int, free: int) -> float:
    """The wait after ``failures`` failures when the first ``free`` cost none."""
    if failures < free:
        return 0
    return min(2.0 ** (failures - free), MAX_WAIT_SECONDS)


def _digest(value: str) -> str:
    return hashlib.sha256(value.lower().encode()).hexdigest()[:32]


def _scopes(email: str, address: str) -> list[tuple[str, str, int]]:
    """(key kind, digest, free failures): the pair first, then the address."""
    return [("pair", _digest(f"{email}\n{address}"), PAIR_FREE_FAILURES),
            ("addr", _digest(address), ADDRESS_FREE_FAILURES)]


def blocked_for(client: redis.Redis, keys: RedisKeys, email: str, address: str) -> int:
    """Whole seconds until ``email`` may be tried from ``address``; 0 if now."""
    pipe = client.pipeline()
    for kind, digest, _ in _scopes(email, address):
        pipe.pttl(keys.signin_backoff(kind, digest))
    longest = max((int(ms) for ms in pipe.execute() if int(ms) > 0), default=0)
    return math.ceil(longest / 1000)


def record_failure(client: redis.Redis, keys: RedisKeys, email: str, address: str) -> None:
    scopes = _scopes(email, address)
    pipe = client.pipeline()
    for kind, digest, _ in scopes:
        counter = keys.signin_failures(kind, digest)
        pipe.incr(counter)
        pipe.expire(counter, FORGET_SECONDS)
    counts = pipe.execute()[::2]
    pipe = client.pipeline()
    for (kind, digest, free), failures in zip(scopes, counts, strict=True):
        wait = backoff_seconds(int(failures), free)
        if wait:
            pipe.set(keys.signin_backoff(kind, digest), int(failures), px=int(wait * 1000))
    pipe.execute()


def clear(client: redis.Redis, keys: RedisKeys, email: str, address: str) -> None:
    """After a correct password: forget this pair's failures. The address's
    count stays, or signing in to one's own account would license guessing
    at others' from the same address."""
    kind, digest, _ = _scopes(email, address)[0]
    client.delete(keys.signin_failures(kind, digest), keys.signin_backoff(kind, digest))
