"""The scheduler process: one active instance per cluster, rounds on wake or tick.

Any number may run; the one holding the scheduler lock grants, the others
stand by and poll the lock, so one of them takes over within the lock's TTL
(plus one poll) of the active one dying.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

import redis

from backend.core.db import get_engine
from backend.core.leases import SchedulerLock
from backend.core.pools import pool_queue
from backend.core.redis_conn import get_keys, get_redis
from backend.core.settings import get_settings
from backend.core.task_names import RUN_CHUNK_TASK
from backend.scheduler import metrics as scheduler_metrics
from backend.scheduler.service import Scheduler, wait_for_wake

log = logging.getLogger(__name__)


def make_scheduler(owner: str = "", may_grant: Callable[[], bool] = lambda: True) -> Scheduler:
    from workers.celery_app import celery_app

    settings = get_settings()

    def send(job_id: int, chunk_seq: int, iterations: int, pool: str, queue: str = "",
             yield_after: int = 0) -> None:
        # A slot's own queue when placement named one (the job's trainer may be
        # resident there), else any slot of the pool.
        celery_app.send_task(RUN_CHUNK_TASK, args=[job_id, chunk_seq, iterations, yield_after],
                             queue=queue or pool_queue(get_keys(), pool))

    return Scheduler(engine=get_engine(), client=get_redis(), keys=get_keys(), send=send,
                     chunk_seconds=settings.chunk_seconds, lease_seconds=settings.lease_seconds,
                     default_policy=settings.policy,
                     default_completion_guard=settings.completion_guard,
                     default_completion_weight=settings.completion_weight,
                     default_chunk_iterations=settings.default_chunk_iterations,
                     idle_chunk_factor=settings.idle_chunk_factor,
                     owner=owner, may_grant=may_grant)


class LockKeeper:
    """Takes and keeps the scheduler lock from a thread of its own.

    Renewing between rounds would let one slow round (a large snapshot, a
    slow database) outlast the short TTL; a thread keeps renewing whatever
    the round is doing.
    """

    def __init__(self, lock: SchedulerLock, *, renew_s: float, poll_s: float,
                 stop: threading.Event) -> None:
        self.lock = lock
        self.renew_s = renew_s
        self.poll_s = poll_s
        self._stop = stop
        self.acquired = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slaq-scheduler-lock",
                                        daemon=True)

    def may_grant(self) -> bool:
        # A renewal one period late still leaves this much of the TTL, the
        # time a grant already under way has to land before another
        # scheduler could take over.
        return self.lock.held(margin_s=self.renew_s)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def _run(self) -> None:
        holding: bool | None = None
        while not self._stop.is_set():
            try:
                now = self.lock.hold()
            except redis.RedisError as exc:
                log.warning("scheduler lock unreachable: %s", exc)
                now = self.lock.held()
            if now and not holding:
                log.info("acquired scheduler lock as %s", self.lock.owner)
                self.acquired.set()
            elif not now and holding:
                log.warning("lost scheduler lock; %s stops granting", self.lock.owner)
            elif not now and holding is None:
                log.info("standing by: the scheduler lock is held by another scheduler")
            holding = now
            self._stop.wait(self.renew_s if now else self.poll_s)


def run_forever() -> None:
    settings = get_settings()
    client, keys = get_redis(), get_keys()
    stop = threading.Event()

    def _stop(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    me = f"{socket.gethostname()}:{os.getpid()}"
    ttl = settings.scheduler_lock_seconds
    # A renewal period near the TTL would leave no time to renew before it lapses.
    renew = min(settings.scheduler_lock_renew_seconds, ttl / 3)
    keeper = LockKeeper(SchedulerLock(client, keys, me, ttl), renew_s=renew,
                        poll_s=settings.scheduler_standby_poll_seconds, stop=stop)
    scheduler = make_scheduler(owner=me, may_grant=keeper.may_grant)
    scheduler_metrics.serve(settings.scheduler_metrics_port, settings.metrics_host,
                            keeper.may_grant)
    log.info("scheduler %s started (default policy %s, lock TTL %.2fs)", me, settings.policy, ttl)
    keeper.start()
    while not stop.is_set():
        if not keeper.may_grant():
            scheduler.stand_by()
            # Woken the moment the keeper takes the lock, not a tick later.
            keeper.acquired.wait(settings.scheduler_tick_seconds)
            keeper.acquired.clear()
            continue
        try:
            result = scheduler.run_round()
            if result.grants or result.reclaimed:
                # Debug: a busy portal grants every round (hundreds of lines
                # an hour), which buried `slaq run`'s banner; LOG_LEVEL=DEBUG.
                log.debug("policy=%s slots=%d free=%d runnable=%d granted=%s reclaimed=%s",
                          result.policy, result.slots, result.free_slots, result.runnable,
                          [(g.job_id, g.iterations) for g in result.grants], result.reclaimed)
        except Exception:
            log.exception("scheduling round failed; retrying next tick")
        wait_for_wake(client, keys, settings.scheduler_tick_seconds)
    keeper.join()
    keeper.lock.release()
    log.info("scheduler stopped")
