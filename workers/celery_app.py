"""The Celery application: broker and task settings, worker slot heartbeats."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery import Celery
from celery.signals import (
    celeryd_after_setup,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
)

from backend.core.leases import Heartbeats, local_slot_id
from backend.core.pools import SlotInfo, detect_slot, pool_queue, slot_queue
from backend.core.redis_conn import get_keys, get_redis
from backend.core.settings import get_settings
from workers.datasets import preload as preload_datasets
from workers.priority import lower_process, lower_session_group

log = logging.getLogger(__name__)


def make_celery() -> Celery:
    settings = get_settings()
    queue = pool_queue(get_keys(), settings.worker_pool)
    app = Celery("slaq", broker=settings.redis_url, include=["workers.tasks"])
    app.conf.update(
        task_acks_late=True,
        # A worker process killed mid-chunk puts the message back, so the same
        # chunk (same lease, same seq) runs again at once instead of waiting
        # for the lease to expire.
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_default_queue=queue,
        task_routes={"slaq.*": {"queue": queue}},
        task_time_limit=settings.task_time_limit,
        task_soft_time_limit=max(settings.task_time_limit - 10, 1),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        broker_transport_options={"visibility_timeout": 3600},
    )
    return app


celery_app = make_celery()

SLOT_QUEUE_ENV = "SLAQ_SLOT_QUEUE"
"""Set by a one-slot worker node for its pool process: the queue it advertises."""


@celeryd_after_setup.connect
def _consume_slot_queue(sender: str, instance: Any, **_: Any) -> None:
    """A worker node of one slot also takes chunks sent to it by name: the
    scheduler sends a job's next chunk to the slot that holds its trainer.

    A node of several slots cannot say which of its processes takes a
    message, so it advertises no queue and takes its pool's chunks only
    (its trainers still stay resident, when luck brings their jobs back).
    """
    if int(getattr(instance, "concurrency", 1) or 1) != 1:
        log.warning("worker %s runs %s slots in one node: jobs cannot be sent back to the "
                    "slot that holds their trainer (run one node per slot: slaq worker)",
                    sender, instance.concurrency)
        return
    queue = slot_queue(get_keys(), get_settings().worker_pool, sender)
    instance.app.amqp.queues.select_add(queue)
    os.environ[SLOT_QUEUE_ENV] = queue

_stop = threading.Event()

HEARTBEAT_MISSES = 3
"""Heartbeat periods a slot may miss before it counts as gone: its capacity
leaves the pool and the chunk it claimed is reclaimed at once."""


def slot_id() -> str:
    return local_slot_id()


def _heartbeat_loop() -> None:
    settings = get_settings()
    beats = Heartbeats(get_redis(), get_keys())
    ttl = settings.heartbeat_seconds * HEARTBEAT_MISSES
    advert: SlotInfo = detect_slot(settings.worker_pool, os.environ.get(SLOT_QUEUE_ENV, ""))
    while not _stop.is_set():
        try:
            beats.beat(slot_id(), ttl, advert)
        except Exception as exc:  # Redis restarts must not kill the worker
            log.warning("heartbeat failed: %s", exc)
        _stop.wait(settings.heartbeat_seconds)


@worker_process_init.connect
def _start_slot(**_: Any) -> None:
    lower_process(get_settings().worker_nice)
    _stop.clear()
    threading.Thread(target=_heartbeat_loop, name="slaq-heartbeat", daemon=True).start()


@worker_process_shutdown.connect
def _stop_heartbeat(**_: Any) -> None:
    _stop.set()
    try:
        Heartbeats(get_redis(), get_keys()).leave(slot_id())
    except Exception as exc:
        log.warning("could not deregister slot: %s", exc)


@worker_init.connect
def _start_main_process(**_: Any) -> None:
    """In the worker's main process, before its pool starts: lower the
    session's CPU share (:mod:`workers.priority`), import what data sets and
    trainers need so pool processes inherit it, then
    serve this host's and pool's figures on WORKER_METRICS_PORT (see
    :mod:`workers.metrics`)."""
    settings = get_settings()
    lower_session_group(settings.worker_nice)
    preload_datasets()
    if settings.worker_preload_trainers:
        # Every trainer class (torch and plugins included) imported once here, so a
        # slot's first job does not pay ~0.8 s of torch import in its switch cost.
        from workers.trainers.registry import trainers

        trainers()
    if settings.worker_metrics_port:
        from workers.metrics import serve

        serve(settings.worker_metrics_port, settings.metrics_host)
