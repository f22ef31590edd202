"""Where each job's trainer is resident: the slot whose process holds it loaded.

A worker slot keeps the trainer of the job it ran last (see
:mod:`workers.resident`). When that job's chunk commits, the slot records
itself here as the job's holder; the scheduler reads the map each round and
places the job's next chunk on that slot, where it steps on with no build,
no restore and no sandbox start. A slot that lets the job go (another job
takes the slot, the job is paused, cancelled or over, the process exits)
drops its entry, but only its own: another slot may hold the job since.

Redis holds this as fast state. Wiped, every job simply restores from its
checkpoint on its next chunk, which is always correct, only slower.
"""

from __future__ import annotations

from typing import Any

import redis

from backend.core.redis_keys import RedisKeys

# KEYS[1] = resident hash
# ARGV[1] = job id, ARGV[2] = slot id
# Drops the job's entry only if ``slot`` is still its holder; returns 1 if dropped.
_RELEASE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
"""


class Residency:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._r = client
        self._k = keys
        self._release = client.register_script(_RELEASE)

    def hold(self, job_id: int, slot_id: str) -> None:
        """``slot_id`` holds the job's trainer as of its latest committed chunk."""
        self._r.hset(self._k.resident, str(job_id), slot_id)

    def release(self, job_id: int, slot_id: str) -> bool:
        """Forget that ``slot_id`` holds the job, unless another slot does by now."""
        return bool(self._release(keys=[self._k.resident], args=[job_id, slot_id]))

    def holder(self, job_id: int) -> str | None:
        raw: Any = self._r.hget(self._k.resident, str(job_id))
        if raw is None:
            return None
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def where(self) -> dict[int, str]:
        """job id -> the slot holding its trainer."""
        raw: Any = self._r.hgetall(self._k.resident)
        found: dict[int, str] = {}
        for job, slot in raw.items():
            job_s = job.decode() if isinstance(job, bytes) else str(job)
            found[int(job_s)] = slot.decode() if isinstance(slot, bytes) else str(slot)
        return found

    def forget_slots(self, gone: set[str]) -> None:
        """Drop the entries of slots that stopped heartbeating: their processes,
        and the trainers in them, are gone."""
        if not gone:
            return
        stale = [str(job) for job, slot in self.where().items() if slot in gone]
        if stale:
            self._r.hdel(self._k.resident, *stale)
