"""Chunk leases, worker heartbeats and the scheduler lock in Redis.

A lease says "chunk ``seq`` of job ``j`` may run until ``expiry``". The
scheduler takes it before dispatching, the worker renews it while running and
releases it when done. A lease that expires (worker killed, host lost) frees
the slot, and the scheduler grants the job again; the database's chunk_seq
fences off whatever the lost worker might still write.

A worker that starts a chunk also claims the lease for its slot. Once a
claimed chunk's slot stops heartbeating the scheduler revokes the lease at
once instead of waiting out its TTL, which is sized for the longest gap
between renewals, not for noticing a dead process.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import redis

from backend.core.pools import SlotInfo
from backend.core.redis_keys import RedisKeys

# KEYS[1] = lease key of the job, KEYS[2] = leases sorted set, KEYS[3] = lease slots hash
# ARGV[1] = chunk_seq, ARGV[2] = ttl ms, ARGV[3] = job id, ARGV[4] = now ms
# Takes the lease unless another seq holds it; returns 1 on success. A new
# seq has no slot yet, so an older seq's claim is dropped.
_ACQUIRE = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
if not held then redis.call('HDEL', KEYS[3], ARGV[3]) end
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

# KEYS[1] = lease key, KEYS[2] = leases sorted set, KEYS[3] = lease slots hash
# ARGV[1] = chunk_seq, ARGV[2] = job id
# Drops the lease only if ``seq`` holds it, so a stale worker cannot free a
# newer chunk's slot; returns 1 if released.
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
return 1
"""

# KEYS[1] = lease key, KEYS[2] = lease slots hash, KEYS[3] = worker heartbeats sorted set
# ARGV[1] = chunk_seq, ARGV[2] = job id, ARGV[3] = slot id
# Returns the seq holding the lease (false if none) and, if it is ``seq``,
# records that ``slot`` runs it. A slot that never heartbeated (a chunk run
# outside a Celery pool process) is not recorded: nothing would ever prove it
# alive, so its lease expiry alone decides.
_CLAIM = """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] and redis.call('ZSCORE', KEYS[3], ARGV[3]) then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[1] .. ':' .. ARGV[3])
end
return held
"""

# KEYS[1] = lease key, KEYS[2] = leases sorted set, KEYS[3] = lease slots hash,
# KEYS[4] = worker heartbeats sorted set
# ARGV[1] = job id, ARGV[2] = now ms
# If the slot that claimed the job's lease has no live heartbeat, drops the
# lease and returns its seq. Decided here rather than from the caller's
# earlier reads, so a slot that beat meanwhile keeps its chunk. A claim whose
# lease is gone or moved to another seq is stale and is dropped on the way.
_REVOKE_ORPHAN = """
local claim = redis.call('HGET', KEYS[3], ARGV[1])
if not claim then return false end
local sep = string.find(claim, ':', 1, true)
local seq = sep and string.sub(claim, 1, sep - 1)
if not seq or redis.call('GET', KEYS[1]) ~= seq then
  redis.call('HDEL', KEYS[3], ARGV[1])
  return false
end
local beat = redis.call('ZSCORE', KEYS[4], string.sub(claim, sep + 1))
if beat and tonumber(beat) > tonumber(ARGV[2]) then return false end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return tonumber(seq)
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


def local_slot_id() -> str:
    """This process's worker slot id (host:pid): what it heartbeats and claims leases as."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Leases:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._r = client
        self._k = keys
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._claim = client.register_script(_CLAIM)
        self._revoke_orphan = client.register_script(_REVOKE_ORPHAN)

    def acquire(self, job_id: int, seq: int, ttl_s: float) -> bool:
        keys = [self._k.lease(job_id), self._k.leases, self._k.lease_slots]
        return bool(self._acquire(keys=keys, args=[seq, int(ttl_s * 1000), job_id, _now_ms()]))

    def renew(self, job_id: int, seq: int, ttl_s: float) -> bool:
        keys = [self._k.lease(job_id), self._k.leases]
        return bool(self._renew(keys=keys, args=[seq, int(ttl_s * 1000), job_id, _now_ms()]))

    def release(self, job_id: int, seq: int) -> bool:
        keys = [self._k.lease(job_id), self._k.leases, self._k.lease_slots]
        return bool(self._release(keys=keys, args=[seq, job_id]))

    def claim(self, job_id: int, seq: int, slot_id: str) -> int | None:
        """The seq holding the job's lease; if it is ``seq``, ``slot_id`` is
        recorded as running it (see :meth:`revoke_orphaned`)."""
        keys = [self._k.lease(job_id), self._k.lease_slots, self._k.workers]
        value: Any = self._claim(keys=keys, args=[seq, job_id, slot_id])
        return int(value) if value is not None else None

    def claimed_slots(self) -> dict[int, str]:
        """job id -> the slot id that claimed the job's lease."""
        raw: Any = self._r.hgetall(self._k.lease_slots)
        out: dict[int, str] = {}
        for job, claim in raw.items():
            text = claim.decode() if isinstance(claim, bytes) else str(claim)
            out[int(job)] = text.partition(":")[2]
        return out

    def revoke_orphaned(self, job_id: int) -> int | None:
        """Drop the job's lease if the slot that claimed it stopped
        heartbeating; returns the revoked chunk_seq."""
        keys = [self._k.lease(job_id), self._k.leases, self._k.lease_slots, self._k.workers]
        value: Any = self._revoke_orphan(keys=keys, args=[job_id, _now_ms()])
        return int(value) if value is not None else None

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

    def beat(self, slot_id: str, ttl_s: float, info: SlotInfo | None = None) -> None:
        pipe = self._r.pipeline(transaction=False)
        pipe.zadd(self._k.workers, {slot_id: _now_ms() + int(ttl_s * 1000)})
        if info is not None:
            pipe.hset(self._k.worker_info, slot_id, info.to_json())
        pipe.execute()

    def leave(self, slot_id: str) -> None:
        pipe = self._r.pipeline(transaction=False)
        pipe.zrem(self._k.workers, slot_id)
        pipe.hdel(self._k.worker_info, slot_id)
        pipe.execute()

    def alive(self) -> list[str]:
        now = _now_ms()
        self._r.zremrangebyscore(self._k.workers, "-inf", now)
        members: Any = self._r.zrangebyscore(self._k.workers, now, "+inf")
        return [str(m) for m in members]

    def alive_info(self) -> dict[str, SlotInfo]:
        """The live slots and their adverts; adverts of slots gone are dropped."""
        alive = self.alive()
        live = set(alive)
        adverts: Any = self._r.hgetall(self._k.worker_info)
        gone = [slot for slot in adverts if slot not in live]
        if gone:
            self._r.hdel(self._k.worker_info, *gone)
        return {slot: SlotInfo.from_json(adverts.get(slot)) for slot in alive}


class SchedulerLock:
    """The one-active-scheduler lock: a string holding its owner's token, with a TTL.

    A second scheduler would double-grant slots, so a scheduler grants only
    while :meth:`held`; a scheduler that dies simply stops renewing, and
    another takes over once the TTL runs out.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys, owner: str, ttl_s: float) -> None:
        self._r = client
        self._key = keys.scheduler_lock
        self.owner = owner
        self._ttl_ms = max(int(ttl_s * 1000), 1)
        self._renew = client.register_script(_LOCK_RENEW)
        self._release = client.register_script(_LOCK_RELEASE)
        # Monotonic time until which this owner surely holds the lock: the
        # TTL counted from before the command that set it was sent, so never
        # later than Redis's own expiry.
        self._valid_until = 0.0

    def acquire(self) -> bool:
        """Take the lock if nobody holds it."""
        sent = time.monotonic()
        if self._r.set(self._key, self.owner, nx=True, px=self._ttl_ms):
            self._valid_until = sent + self._ttl_ms / 1000
            return True
        return False

    def renew(self) -> bool:
        """Extend the lock if this owner still holds it."""
        sent = time.monotonic()
        if self._renew(keys=[self._key], args=[self.owner, self._ttl_ms]):
            self._valid_until = sent + self._ttl_ms / 1000
            return True
        self._valid_until = 0.0  # someone else's now, or nobody's: stop at once
        return False

    def hold(self) -> bool:
        """Keep or take the lock; false while another scheduler holds it."""
        return self.renew() or self.acquire()

    def held(self, margin_s: float = 0.0) -> bool:
        """Whether the lock is surely this owner's for ``margin_s`` more
        seconds, judged from the last successful renewal without asking Redis."""
        return time.monotonic() + margin_s < self._valid_until

    def release(self) -> bool:
        """Give the lock up if this owner still holds it."""
        self._valid_until = 0.0
        return bool(self._release(keys=[self._key], args=[self.owner]))
