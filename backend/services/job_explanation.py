"""What a job is doing or waiting for, in words a user reads.

The scheduler publishes structured facts about each waiting job (what it
waits for, its place, a rough estimate; :meth:`backend.scheduler.service.
Scheduler._explain`); :func:`explain_job` turns them, or a finished job's end
reason, into one summary with the technical detail kept apart. The pages and
``slaq status`` print the same summary.
"""

from __future__ import annotations

import math
from typing import Any

from backend.core.models import JobStatus
from backend.scheduling.explain import WaitKind
from backend.schemas import JobExplanation

# How each policy orders the queue, finishing "behind N jobs ...".
_ORDER = {
    "fifo": "submitted before it",
    "fair": "ahead of it in the fair-share order",
    "las": "that have trained less so far",
}
_PREDICTIVE_ORDER = "with larger predicted gains"


def plain_duration(seconds: float) -> str:
    """"about 40 s", "about 3 min", "about 2 h": rounded, as an estimate is."""
    if seconds < 60:
        return f"about {max(5, 5 * math.ceil(seconds / 5))} s"
    if seconds < 3600:
        return f"about {math.ceil(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h".replace(".0 h", " h")


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def _waiting_summary(entry: dict[str, Any]) -> str:
    kind = str(entry.get("kind") or WaitKind.SLOT)
    position = int(entry.get("position") or 0)
    quota = int(entry.get("quota") or 0)
    mine_ahead = int(entry.get("ahead_in_tenant") or 0)
    order = _ORDER.get(str(entry.get("policy") or ""), _PREDICTIVE_ORDER)
    if kind == WaitKind.QUOTA_ZERO:
        what = ("Waiting for your team's slot quota: it is 0, so none of your team's jobs "
                "runs until an admin raises it.")
    elif kind == WaitKind.NO_WORKERS:
        what = "Waiting for a worker: none is running, so no job can start."
    elif kind == WaitKind.POOL:
        reason = str(entry.get("reason") or "waiting for a slot of a pool that can run it")
        what = reason[0].upper() + reason[1:] + "."
    elif kind == WaitKind.QUOTA:
        what = ("Waiting for your team's one slot (its quota): another of your jobs is "
                "using it" if quota == 1 else
                f"Waiting for one of your team's {quota} slots (its quota): all are in use "
                "by your other jobs")
        what += (f", and {_jobs(mine_ahead)} of yours {'goes' if mine_ahead == 1 else 'go'} "
                 "first." if mine_ahead else ".")
    elif kind == WaitKind.NEXT:
        what = "Starting: it gets the next free slot."
    elif kind == WaitKind.NEW:
        # Not in the policy's ranking yet: new jobs start in arrival order.
        new_ahead = int(entry.get("new_ahead") or 0)
        what = (f"Waiting for its first chunk: new jobs start as slots free up, in the "
                f"order they came; {_jobs(new_ahead)} came before it." if new_ahead else
                "Waiting for its first chunk: new jobs start as slots free up, and it is "
                "the next new job.")
        position = 0
    elif kind == WaitKind.TURN:
        # "Go first" and the position are one ranking's: the jobs before it.
        ahead = max(position - 1 if position else int(entry.get("ahead") or 0), 1)
        running_ahead = min(int(entry.get("running_ahead") or 0), ahead)
        what = (f"Waiting for its turn: {_jobs(ahead)} {order} "
                f"{'goes' if ahead == 1 else 'go'} first"
                + (f" ({running_ahead} running now)." if running_ahead else "."))
    elif position > 1:
        # No waiting job before it, only running ones: said, so "next in
        # line" never sits beside "Queue position 3" unexplained.
        what = (f"Waiting for a free slot: every slot is busy, and it is next in line after "
                f"the {_jobs(position - 1)} running now.")
    else:
        what = "Waiting for a free slot: every slot is busy, and it is next in line."
    where = f" Queue position {position}." if position and kind != WaitKind.NEXT else ""
    estimate = entry.get("estimate_seconds")
    when = ""
    if isinstance(estimate, int | float) and kind != WaitKind.NEXT:
        when = (" Expected to start within seconds." if estimate < 5
                else f" Expected to start in {plain_duration(float(estimate))}.")
    return what + where + when


def explain_job(*, status: str, end_reason: str | None, error: str | None,
                last_reason: str | None, waiting: dict[str, Any] | None,
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
        estimate = waiting.get("estimate_seconds")
        return JobExplanation(
            summary=_waiting_summary(waiting),
            detail=str(waiting.get("detail") or waiting.get("reason") or "") or None,
            position=(int(waiting["position"]) if waiting.get("position")
                      and waiting.get("kind") != WaitKind.NEW else None),
            estimate_seconds=float(estimate) if isinstance(estimate, int | float) else None)
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
