"""Counting chunks lost while their worker stayed up, to stop re-running a job for ever.

A chunk whose lease runs out while the slot that started it (claimed its
lease) keeps heartbeating did not die with a worker: the chunk task itself
crashed or hung (a trainer whose state() raises, a commit the database
refused). Queuing such a job again runs the same hostile code again, for
ever. So the scheduler counts these losses per job, and a job that loses
``LOST_IN_A_ROW`` chunks in a row without storing one in between fails
instead. Chunks lost to a worker's death, or never started (the message
waited or went missing), are not counted: the job was not at fault.

"In a row" is told by the job's ``chunks_run``, which every stored chunk
increments: a loss at the same ``chunks_run`` as the last one follows it
directly. The count lives in Redis rather than in a column: it is fast state
whose loss (Redis wiped) costs at most one more try, and it needs no
migration.
"""

from __future__ import annotations

from typing import Any

import redis

from backend.core.redis_keys import RedisKeys

LOST_IN_A_ROW = 2
"""A job fails when this many of its chunks in a row are lost with their worker alive."""
COUNT_TTL_SECONDS = 7 * 24 * 3600
"""How long a count outlives the last loss: long past any job's pause between chunks."""

# KEYS[1] = the job's lost-chunks key
# ARGV[1] = the job's chunks_run now, ARGV[2] = TTL in seconds
# Records one more loss and returns how many in a row: the stored count plus
# one if the job stored no chunk since (same chunks_run), else 1.
_LOST = """
local held = redis.call('GET', KEYS[1])
local count = 1
if held then
  local sep = string.find(held, ':', 1, true)
  if sep and string.sub(held, 1, sep - 1) == ARGV[1] then
    count = (tonumber(string.sub(held, sep + 1)) or 0) + 1
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. count, 'EX', ARGV[2])
return count
"""


class LostChunks:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._keys = keys
        self._lost = client.register_script(_LOST)

    def lost(self, job_id: int, chunks_run: int) -> int:
        """Note that ``job_id`` lost a chunk with its worker alive, at
        ``chunks_run`` stored chunks; how many it has lost in a row."""
        value: Any = self._lost(keys=[self._keys.lost_chunks(job_id)],
                                args=[chunks_run, COUNT_TTL_SECONDS])
        return int(value)


def keep_failing_reason(count: int) -> str:
    """The failed job's error: what happened, and where to look."""
    return (f"its chunks keep failing: {count} chunks in a row were lost while their "
            "worker stayed up (the chunk crashed or ran past its lease before storing "
            "anything); not queued again. The worker log has the error.")
