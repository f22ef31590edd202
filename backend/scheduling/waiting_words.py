"""The words a user reads about a waiting job, from its facts.

Every sentence about why a job waits is written here, from a
:class:`~backend.scheduling.waiting.WaitingEntry` (what the scheduler
publishes): :func:`summary` (the plain account on the job's page, the queue
list and ``slaq status``), :func:`reason` (the scheduler's reason, the API's
``scheduler_reason``), :func:`detail` (the technical account kept apart) and
:func:`pool_reason` (what the worker pools hold it back for). Pure: no I/O,
so the scheduler's tests, the API and the pages word an entry alike.
"""

from __future__ import annotations

import math

from backend.scheduling.waiting import PoolWait, WaitingEntry, WaitKind

# How each policy orders the queue, finishing "behind N jobs ...".
_ORDER = {
    "fifo": "submitted before it",
    "fair": "ahead of it in the fair-share order",
    "las": "that have trained less so far",
}
_PREDICTIVE_ORDER = "with larger predicted gains"
_QUOTA_ZERO = "your team's slot quota is 0: no job of it runs until an admin raises the quota"


def plain_duration(seconds: float) -> str:
    """"about 40 s", "about 3 min", "about 2 h": rounded, as an estimate is."""
    if seconds < 60:
        return f"about {max(5, 5 * math.ceil(seconds / 5))} s"
    if seconds < 3600:
        return f"about {math.ceil(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h".replace(".0 h", " h")


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def _s(n: int) -> str:
    return "s" if n != 1 else ""


def pool_reason(pool: PoolWait) -> str:
    """What the pools hold a job back for.

    Example: ``PoolWait("busy", full=("cpu",), free=0, slots=2)`` ->
    ``"waiting for a slot in pool cpu: 0 of 2 free"``.
    """
    if pool.hold == "no_pool":
        return "no live worker pool can run this job: waiting for one to join"
    if pool.hold == "pool_quota":
        limits = ", ".join(f"{n} in pool {name}" for name, n in pool.limits)
        return f"your team is using all of its slots in the pools this job can use ({limits})"
    note = ""
    if pool.kept:
        note = (f"the {pool.kept_free} free slot{_s(pool.kept_free)} of pool"
                f"{'s' if len(pool.kept) > 1 else ''} {', '.join(pool.kept)} "
                f"{'are' if pool.kept_free != 1 else 'is'} kept for jobs that want a GPU")
        if not pool.full:
            return f"waiting for a slot: {note}"
    if pool.gpu:
        what = "a GPU slot"
    elif len(pool.full) == 1:
        what = f"a slot in pool {pool.full[0]}"
    else:
        what = "a slot in pools " + ", ".join(pool.full)
    return f"waiting for {what}: {pool.free} of {pool.slots} free" + (f" ({note})" if note else "")


def reason(entry: WaitingEntry) -> str:
    """The scheduler's reason for the wait, the policy's account included.

    Example: a ranked job at position 4, every slot busy ->
    ``"waiting for a free slot, position 4: rank 4 by predicted gain ..."``.
    """
    kind = entry.kind
    ranked = entry.ranked
    if kind == WaitKind.QUOTA_ZERO:
        return _QUOTA_ZERO
    if kind == WaitKind.QUOTA:
        return (f"your team is using all {entry.quota} of its slots (its quota); "
                + (f"when one frees up: {entry.policy_reason}" if ranked else
                   f"new job, {entry.ahead_in_tenant} of your team's jobs ahead of it"))
    if kind == WaitKind.POOL and entry.pool is not None:
        return pool_reason(entry.pool)
    if kind == WaitKind.NEW or not ranked:
        cap = ("" if entry.sweep_share is None else
               f" (an experiment's new configurations hold at most {entry.sweep_share:.0%} "
               "of the slots while others wait)")
        return (f"new job waiting to start: {entry.new_ahead} new jobs ahead of it; new "
                f"jobs get their first chunk as slots free up{cap}")
    if kind == WaitKind.NO_WORKERS:
        return f"no worker is running; when one starts: {entry.policy_reason}"
    if kind == WaitKind.NEXT:
        return f"about to run: {entry.policy_reason}"
    if kind == WaitKind.POOL:
        return "waiting for a slot of a pool that can run it"
    return f"waiting for a free slot, position {entry.position}: {entry.policy_reason}"


def detail(entry: WaitingEntry) -> str | None:
    """The technical account kept apart from the summary: the policy's own
    reason, or the scheduler's for a job the policy has not ranked yet."""
    return entry.policy_reason or reason(entry) or None


def summary(entry: WaitingEntry) -> str:
    """The plain account of a waiting job: what it waits for, its place
    (unless ``position`` is 0) and a rough estimate.

    Example: ``WaitingEntry(1, WaitKind.TURN, position=5, policy="slaq",
    running_ahead=2, estimate_seconds=95.0)`` -> "Waiting for its turn: 4
    jobs with larger predicted gains go first (2 running now). Queue position
    5. Expected to start in about 2 min."
    """
    kind = entry.kind or WaitKind.SLOT
    position = entry.position
    quota = entry.quota
    mine_ahead = entry.ahead_in_tenant
    order = _ORDER.get(entry.policy, _PREDICTIVE_ORDER)
    if kind == WaitKind.QUOTA_ZERO:
        what = ("Waiting for your team's slot quota: it is 0, so none of your team's jobs "
                "runs until an admin raises it.")
    elif kind == WaitKind.NO_WORKERS:
        what = "Waiting for a worker: none is running, so no job can start."
    elif kind == WaitKind.POOL:
        said = (pool_reason(entry.pool) if entry.pool is not None
                else "waiting for a slot of a pool that can run it")
        what = said[0].upper() + said[1:] + "."
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
        new_ahead = entry.new_ahead
        what = (f"Waiting for its first chunk: new jobs start as slots free up, in the "
                f"order they came; {_jobs(new_ahead)} came before it." if new_ahead else
                "Waiting for its first chunk: new jobs start as slots free up, and it is "
                "the next new job.")
        position = 0
    elif kind == WaitKind.TURN:
        # "Go first" and the position are one ranking's: the jobs before it.
        ahead = max(position - 1 if position else entry.ahead, 1)
        running_ahead = min(entry.running_ahead, ahead)
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
    estimate = entry.estimate_seconds
    when = ""
    if estimate is not None and kind != WaitKind.NEXT:
        when = (" Expected to start within seconds." if estimate < 5
                else f" Expected to start in {plain_duration(float(estimate))}.")
    return what + where + when
