"""What a job is doing or waiting for, in words a user reads.

The scheduler publishes a typed entry of facts about each waiting job (what
it waits for, its place, a rough estimate: :class:`backend.scheduling.
waiting.WaitingEntry`, read back by :func:`read_waiting`); :func:`explain_job`
turns it, or a finished job's end reason, into one summary with the
technical detail kept apart. Every sentence about a wait is
:mod:`backend.scheduling.waiting_words`'s. The pages and ``slaq status``
print the same summary.
"""

from __future__ import annotations

import redis

from backend.core.models import JobStatus
from backend.core.redis_keys import RedisKeys
from backend.scheduling.waiting import WaitingEntry, WaitKind
from backend.scheduling.waiting_words import detail, plain_duration, summary
from backend.schemas import JobExplanation

__all__ = ["WaitingEntry", "explain_job", "plain_duration", "read_waiting"]


def read_waiting(client: redis.Redis, keys: RedisKeys,
                 job_ids: list[int]) -> dict[int, WaitingEntry]:
    """The scheduler's published entries for these jobs (those it has one
    for); none when Redis cannot be read."""
    if not job_ids:
        return {}
    try:
        raw: list[str | bytes | None] = client.hmget(
            keys.waiting, [str(i) for i in job_ids])
    except redis.RedisError:
        return {}
    found: dict[int, WaitingEntry] = {}
    for job_id, value in zip(job_ids, raw, strict=True):
        if value is None:
            continue
        try:
            found[job_id] = WaitingEntry.from_json(value, job_id)
        except (ValueError, TypeError):  # not an entry of this shape: as if none
            continue
    return found


def explain_job(*, status: str, end_reason: str | None, error: str | None,
                last_reason: str | None, waiting: WaitingEntry | None,
                chunks_run: int = 0) -> JobExplanation:
    """The plain account of a job in ``status``; ``waiting`` is the
    scheduler's published entry for a queued job (None if it has none yet)."""
    if status == JobStatus.queued:
        if waiting is None and chunks_run > 0:
            # Every chunk ends in "queued" until the next round grants the
            # next one (at once on an idle portal): training, not waiting in line.
            return JobExplanation(summary="Between chunks: it finished a chunk and gets its "
                                  "next one at the scheduler's next round.", detail=last_reason)
        if waiting is None:
            return JobExplanation(summary="Queued: the scheduler will place it in line at "
                                  "its next round.", detail=last_reason)
        return JobExplanation(
            summary=summary(waiting), detail=detail(waiting),
            position=waiting.position if waiting.position and waiting.kind != WaitKind.NEW
            else None,
            estimate_seconds=waiting.estimate_seconds)
    if status == JobStatus.running:
        return JobExplanation(summary="Running: it holds a slot for its current chunk of "
                              "iterations.", detail=last_reason)
    if status == JobStatus.paused:
        if end_reason and end_reason.startswith("stopped early"):
            return JobExplanation(summary=f"Paused by its experiment's early-stopping rule "
                                  f"({end_reason}); it keeps its checkpoint: resume it to "
                                  "overrule the rule.")
        return JobExplanation(summary="Paused: it keeps its checkpoint; resume it to put it "
                              "back in the queue.")
    if status == JobStatus.completed:
        return JobExplanation(summary=f"Completed: {end_reason or 'finished'}.")
    if status == JobStatus.failed:
        why = end_reason or "it failed"
        return JobExplanation(summary=f"Failed: {why}.",
                              detail=error if error and error != end_reason else None)
    if status == JobStatus.cancelled:
        return JobExplanation(summary=f"Cancelled: {end_reason or 'cancelled'}.")
    return JobExplanation(summary=status)
