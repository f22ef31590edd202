"""Celery tasks: thin wrappers that pass ids to plain service functions."""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

from celery.signals import worker_process_init, worker_process_shutdown

from backend.core.checkpoints import CheckpointStore
from backend.core.db import get_engine
from backend.core.leases import local_slot_id
from backend.core.redis_conn import get_keys, get_redis
from backend.core.settings import get_settings
from backend.core.task_names import RUN_CHUNK_TASK
from workers.celery_app import celery_app
from workers.chunk_service import ChunkContext, run_chunk
from workers.metrics import count_error, count_outcome
from workers.resident import IdleSaver, StateWriter, shut_down

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _context() -> ChunkContext:
    settings = get_settings()
    return ChunkContext(
        engine=get_engine(),
        redis=get_redis(),
        keys=get_keys(),
        checkpoints=CheckpointStore(settings.effective_checkpoint_dir),
        lease_seconds=settings.lease_seconds,
        checkpoint_seconds=settings.checkpoint_seconds,
        checkpoint_share=settings.checkpoint_share,
    )


_idle: list[IdleSaver] = []


@worker_process_init.connect
def _start_idle_saver(**_: Any) -> None:
    """Each slot process writes and lets go of the trainer its job left behind."""
    saver = IdleSaver(StateWriter(_context(), local_slot_id()),
                      get_settings().idle_save_seconds)
    saver.start()
    _idle.append(saver)


@worker_process_shutdown.connect
def _write_resident(**_: Any) -> None:
    """A slot stopping cleanly writes its resident job, so nothing is re-run."""
    for saver in _idle:
        saver.stop()
    try:
        shut_down(StateWriter(_context(), local_slot_id()))
    except Exception:
        log.exception("could not write the resident trainer at shutdown")


@celery_app.task(name=RUN_CHUNK_TASK, acks_late=True)
def run_chunk_task(job_id: int, chunk_seq: int, budget: int, yield_after: int = 0) -> None:
    """Run one granted chunk; safe to deliver twice (fenced by lease and seq).
    ``yield_after`` defaults for messages sent before it existed."""
    ctx = _context()
    try:
        done = run_chunk(ctx, int(job_id), int(chunk_seq), int(budget), int(yield_after))
    except Exception:
        count_error(ctx.redis, ctx.keys)
        raise
    count_outcome(ctx.redis, ctx.keys, done.outcome)
