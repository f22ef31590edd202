"""The scheduler process: one instance per cluster, rounds on wake or tick."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from typing import Any

from backend.core.db import get_engine
from backend.core.leases import SchedulerLock
from backend.core.redis_conn import get_keys, get_redis
from backend.core.settings import get_settings
from backend.core.task_names import RUN_CHUNK_TASK
from backend.scheduler.service import Scheduler, wait_for_wake

log = logging.getLogger(__name__)


def make_scheduler() -> Scheduler:
    from workers.celery_app import celery_app

    settings = get_settings()

    def send(job_id: int, chunk_seq: int, iterations: int) -> None:
        celery_app.send_task(RUN_CHUNK_TASK, args=[job_id, chunk_seq, iterations],
                             queue=get_keys().chunk_queue)

    return Scheduler(engine=get_engine(), client=get_redis(), keys=get_keys(), send=send,
                     chunk_seconds=settings.chunk_seconds, lease_seconds=settings.lease_seconds,
                     default_policy=settings.policy,
                     default_chunk_iterations=settings.default_chunk_iterations)


def run_forever() -> None:
    settings = get_settings()
    client, keys = get_redis(), get_keys()
    stop = threading.Event()

    def _stop(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    me = f"{socket.gethostname()}:{os.getpid()}"
    lock = SchedulerLock(client, keys, me, max(int(settings.scheduler_tick_seconds * 10), 5))
    scheduler = make_scheduler()
    log.info("scheduler %s started (default policy %s)", me, settings.policy)
    while not stop.is_set():
        # A second scheduler would double-grant; the lock makes it wait instead.
        if not lock.hold():
            stop.wait(settings.scheduler_tick_seconds)
            continue
        try:
            result = scheduler.run_round()
            if result.grants or result.reclaimed:
                log.info("policy=%s slots=%d free=%d runnable=%d granted=%s reclaimed=%s",
                         result.policy, result.slots, result.free_slots, result.runnable,
                         [(g.job_id, g.iterations) for g in result.grants], result.reclaimed)
        except Exception:
            log.exception("scheduling round failed; retrying next tick")
        wait_for_wake(client, keys, settings.scheduler_tick_seconds)
    lock.release()
    log.info("scheduler stopped")
