"""Chunk leases, worker heartbeats and the scheduler lock in Redis.

A lease says "chunk ``seq`` of job ``j`` may run until ``expiry``". The
scheduler takes it before dispatching, the worker renews it while running and
releases it when done. A lease that expires (worker killed, host lost) frees
the slot, and the scheduler grants the job again; the database's chunk_seq
fences off whatever the lost worker might still write.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from backend.core.redis_keys import RedisKeys

# KEYS[1] = lease key of the job, KEYS[2] = leases sorted set
# ARGV[1] = chunk_seq, ARGV[2] = ttl ms, ARGV[3] = job id, ARGV[4] = now ms
# Takes the lease unless another seq holds it; returns 1 on success.
_ACQUIRE = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], tonumber(ARGV[4]) + tonumber(ARGV[2]), ARGV[3])
return 1
"""

# KEYS[1] = lease key, KEYS[2] = leases sorted set
# ARGV[1] = chunk_seq, ARGV[2] = ttl ms, ARGV[3] = job id, ARGV[4] = now ms
# Extends the lease only if ``seq`` still holds it; returns 1 if extended.
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], tonumber(ARGV[4]) + tonumber(ARGV[2]), ARGV[3])
return 1
"""

# KEYS[1] = lease key, KEYS[2] = leases sorted set
# ARGV[1] = chunk_seq, ARGV[2] = job id
# Drops the lease only if ``seq`` holds it, so a stale worker cannot free a
# newer chunk's slot; returns 1 if released.
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
"""


# KEYS[1] = scheduler lock key
# ARGV[1] = owner token (host:pid), ARGV[2] = ttl ms
# Extends the lock only while ``owner`` holds it: a plain EXPIRE after a GET
# could extend a lock that expired and was taken by another scheduler in
# between. Returns 1 if extended.
_LOCK_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS[1] = scheduler lock key
# ARGV[1] = owner token (host:pid)
# Deletes the lock only while ``owner`` holds it, so a scheduler stopping
# after its lock expired cannot free the lock of the one that took over.
# Returns 1 if deleted.
_LOCK_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""


def _now_ms() -> int:
    return int(time.time() * 1000)


class Leases:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._r = client
        self._k = keys
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def acquire(self, job_id: int, seq: int, ttl_s: float) -> bool:
        keys = [self._k.lease(job_id), self._k.leases]
        return bool(self._acquire(keys=keys, args=[seq, int(ttl_s * 1000), job_id, _now_ms()]))

    def renew(self, job_id: int, seq: int, ttl_s: float) -> bool:
        keys = [self._k.lease(job_id), self._k.leases]
        return bool(self._renew(keys=keys, args=[seq, int(ttl_s * 1000), job_id, _now_ms()]))

    def release(self, job_id: int, seq: int) -> bool:
        keys = [self._k.lease(job_id), self._k.leases]
        return bool(self._release(keys=keys, args=[seq, job_id]))

    def holder(self, job_id: int) -> int | None:
        value: Any = self._r.get(self._k.lease(job_id))
        return int(value) if value is not None else None

    def live_job_ids(self) -> set[int]:
        """Jobs with an unexpired lease; prunes expired entries on the way."""
        now = _now_ms()
        self._r.zremrangebyscore(self._k.leases, "-inf", now)
        members: Any = self._r.zrangebyscore(self._k.leases, now, "+inf")
        return {int(m) for m in members}


class Heartbeats:
    """Each worker slot announces itself; capacity is what announced recently."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._r = client
        self._k = keys

    def beat(self, slot_id: str, ttl_s: float) -> None:
        self._r.zadd(self._k.workers, {slot_id: _now_ms() + int(ttl_s * 1000)})

    def leave(self, slot_id: str) -> None:
        self._r.zrem(self._k.workers, slot_id)

    def alive(self) -> list[str]:
        now = _now_ms()
        self._r.zremrangebyscore(self._k.workers, "-inf", now)
        members: Any = self._r.zrangebyscore(self._k.workers, now, "+inf")
        return [str(m) for m in members]


class SchedulerLock:
    """The one-active-scheduler lock: a string holding its owner's token, with a TTL.

    A second scheduler would double-grant slots, so every round starts with
    :meth:`hold`; a scheduler that dies simply stops renewing, and another
    takes over once the TTL runs out.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys, owner: str, ttl_s: float) -> None:
        self._r = client
        self._key = keys.scheduler_lock
        self.owner = owner
        self._ttl_ms = max(int(ttl_s * 1000), 1)
        self._renew = client.register_script(_LOCK_RENEW)
        self._release = client.register_script(_LOCK_RELEASE)

    def acquire(self) -> bool:
        """Take the lock if nobody holds it."""
        return bool(self._r.set(self._key, self.owner, nx=True, px=self._ttl_ms))

    def renew(self) -> bool:
        """Extend the lock if this owner still holds it."""
        return bool(self._renew(keys=[self._key], args=[self.owner, self._ttl_ms]))

    def hold(self) -> bool:
        """Keep or take the lock; false while another scheduler holds it."""
        return self.renew() or self.acquire()

    def release(self) -> bool:
        """Give the lock up if this owner still holds it."""
        return bool(self._release(keys=[self._key], args=[self.owner]))
