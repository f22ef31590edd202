"""Celery tasks: thin wrappers that pass ids to plain service functions."""

from __future__ import annotations

from functools import lru_cache

from backend.core.db import get_engine
from backend.core.redis_conn import get_keys, get_redis
from backend.core.settings import get_settings
from backend.core.task_names import RUN_CHUNK_TASK
from workers.celery_app import celery_app
from workers.checkpoints import CheckpointStore
from workers.chunk_service import ChunkContext, run_chunk
from workers.metrics import count_error, count_outcome


@lru_cache(maxsize=1)
def _context() -> ChunkContext:
    settings = get_settings()
    return ChunkContext(
        engine=get_engine(),
        redis=get_redis(),
        keys=get_keys(),
        checkpoints=CheckpointStore(settings.effective_checkpoint_dir),
        lease_seconds=settings.lease_seconds,
    )


@celery_app.task(name=RUN_CHUNK_TASK, acks_late=True)
def run_chunk_task(job_id: int, chunk_seq: int, budget: int) -> None:
    """Run one granted chunk; safe to deliver twice (fenced by lease and seq)."""
    ctx = _context()
    try:
        done = run_chunk(ctx, int(job_id), int(chunk_seq), int(budget))
    except Exception:
        count_error(ctx.redis, ctx.keys)
        raise
    count_outcome(ctx.redis, ctx.keys, done.outcome)
