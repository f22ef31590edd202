"""Telling others that something changed: wake the scheduler, publish a
"job changed" event for pages. Best effort: Redis being down must never fail
a database write that already committed."""

from __future__ import annotations

import json
import logging
from typing import Any

import redis

from backend.core.redis_keys import RedisKeys

log = logging.getLogger(__name__)

# The wake list only needs one pending token to wake the scheduler.
_WAKE_MAX = 16


def wake_scheduler(client: redis.Redis, keys: RedisKeys, why: str) -> None:
    try:
        pipe = client.pipeline()
        pipe.lpush(keys.wake, why)
        pipe.ltrim(keys.wake, 0, _WAKE_MAX - 1)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("could not wake the scheduler: %s", exc)


def publish_job_event(client: redis.Redis, keys: RedisKeys, **event: Any) -> None:
    try:
        client.publish(keys.events, json.dumps(event, default=str))
    except redis.RedisError as exc:
        log.warning("could not publish job event: %s", exc)
