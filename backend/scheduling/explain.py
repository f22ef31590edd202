"""Answers for "why is my job waiting?" that the live API can serve.

:func:`explain_waiting` gives each waiting job a typed entry of facts
(:class:`backend.scheduling.waiting.WaitingEntry`; its words are
:mod:`backend.scheduling.waiting_words`'s). It asks the active policy for
its full preference order (the same ``allocate`` call, on a copy of the
snapshot with a slot for every waiting job and no quota limits) and combines
it with the real limits: the tenant's quota and the number of free slots.
The predicted curve itself is the scheduler's own fit, published each time
it refits (:mod:`backend.core.fits`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from backend.scheduling.types import Grant, Policy, Snapshot, TenantView
from backend.scheduling.waiting import WaitingEntry, WaitKind

__all__ = ["MetricNamedPolicy", "WaitKind", "WaitingEntry", "explain_waiting", "name_metric",
           "wait_estimate"]

TRAINING_LOSS = "loss"

QUALITY_BLIND = frozenset({"fifo", "fair", "las"})
"""Policies that never look at a job's curve: their reasons name no metric."""


def name_metric(reason: str, metric: str) -> str:
    """``reason`` saying which metric it is about, when that is not the
    training loss: a policy's "predicted drop" of a job scheduled on
    ``val_loss`` is a drop of its held-out loss.

    Example: ``name_metric("rank 1 by lookahead index: ...", "val_loss")`` ->
    ``"on val_loss: rank 1 by lookahead index: ..."``.
    """
    if metric == TRAINING_LOSS or reason.startswith(f"on {metric}: "):
        return reason
    return f"on {metric}: {reason}"


class MetricNamedPolicy:
    """A policy whose grant reasons name each job's quality metric.

    Policies rank on ``JobView.losses`` whatever the series is; the live
    scheduler fills it with a job's evaluation series when the job is
    scheduled on ``val_loss``, and this wrapper makes the reasons users read
    (decisions, the queue's "why waiting") of policies that rank on it say
    so (not those of ``QUALITY_BLIND`` policies). Every other attribute (the
    policy's predictor, say) is the wrapped policy's own.
    """

    def __init__(self, inner: Policy, metric_of: Callable[[int], str]) -> None:
        self.inner = inner
        self.name = inner.name
        self.metric_of = metric_of

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        grants = self.inner.allocate(snapshot)
        if self.name in QUALITY_BLIND:
            return grants
        return [replace(g, reason=name_metric(g.reason, self.metric_of(g.job_id)))
                for g in grants]

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


def wait_estimate(*, kind: str, position: int, free_slots: int, total_slots: int,
                  ahead_in_tenant: int, quota: int, chunk_seconds: float | None,
                  ahead: int = 0, policy: str = "") -> float | None:
    """Roughly how many seconds until a waiting job gets a slot, or ``None``
    when that cannot honestly be said (no measured chunk length yet, no
    worker, a zero quota).

    Slots free up at about ``total_slots / chunk_seconds`` a second; a job
    needs the jobs before it in line beyond the free slots to get one first
    (for a quota-bound job: its own tenant's jobs ahead, over its quota's
    slots). A job waiting its turn behind ``ahead`` jobs under a policy that
    rotates slots (all but FIFO) waits about one chunk per job ahead, shared
    over the slots; under FIFO the jobs ahead keep their slots until they
    end, which no chunk length tells, so there is no estimate. The order may
    change as curves change, so this is a rough guide.

    Example: a new job 5th in line, no free slot, 2 slots, chunks of 10 s -> 25.0.
    """
    if chunk_seconds is None or chunk_seconds <= 0 or total_slots <= 0:
        return None
    if kind in (WaitKind.QUOTA_ZERO, WaitKind.NO_WORKERS):
        return None
    if kind == WaitKind.QUOTA:
        return (ahead_in_tenant + 1) * chunk_seconds / max(min(quota, total_slots), 1)
    if kind == WaitKind.TURN:
        if policy == "fifo":
            return None
        return max(ahead + 1 - free_slots, 0) * chunk_seconds / total_slots
    if kind == WaitKind.SLOT:
        # No waiting job before it: the first of the busy slots to free up.
        return 0.0 if free_slots > 0 else chunk_seconds / total_slots
    beyond_free = position - free_slots
    if beyond_free <= 0:
        return 0.0
    return beyond_free * chunk_seconds / total_slots


def explain_waiting(policy: Policy, snapshot: Snapshot) -> dict[int, WaitingEntry]:
    """Why each waiting job in ``snapshot`` is (not yet) running.

    Every figure comes from one ranking: the policy's preference over every
    active job, each running one as it will be when its chunk ends (queued
    again, waiting since now), with a slot for each and no quota limits. A
    waiting job's position is its place in that ranking, the jobs before it
    are the ones that "go first" (``ahead``, of which ``running_ahead`` hold a
    slot now), and the tenant's own waiting jobs before it are what a
    quota-bound job waits on. Two rankings (waiting jobs only for the
    position, everyone for "go first") once told a user "4 jobs go first.
    Queue position 3." (issue 38).

    Example: LAS, 2 slots, both running jobs 1 and 2 with less attained
    service than waiting jobs 3, 4 and 5 -> job 3 position 3 with 2 jobs (2
    running) ahead, waiting its turn; job 5 position 5 with 4 ahead.
    """
    waiting = snapshot.waiting()
    if not waiting:
        return {}
    room = snapshot.total_slots + len(snapshot.jobs)
    unlimited = {t: TenantView(t, max_slots=room, share_weight=snapshot.tenant(t).share_weight)
                 for t in {job.tenant_id for job in snapshot.jobs}}
    everyone = replace(snapshot, free_slots=len(snapshot.jobs), tenants=unlimited,
                       jobs=[replace(j, running=False, waiting_since=snapshot.now)
                             if j.running else j for j in snapshot.jobs])
    grants: dict[int, Grant] = {}
    for granted in policy.allocate(everyone):
        grants.setdefault(granted.job_id, granted)
    # Jobs the policy did not rank (none left to run, say) come last, as listed.
    ranking = list(grants) + [j.job_id for j in snapshot.jobs if j.job_id not in grants]
    by_id = {job.job_id: job for job in snapshot.jobs}
    waiting_ids = {job.job_id for job in waiting}
    running = snapshot.running_by_tenant()
    out: dict[int, WaitingEntry] = {}
    waiting_before = 0
    own_waiting_before: dict[int, int] = {}
    for place, job_id in enumerate(ranking, start=1):
        if job_id not in waiting_ids:
            continue
        job = by_id[job_id]
        grant = grants.get(job_id)
        ahead = place - 1
        quota = snapshot.tenant(job.tenant_id).max_slots
        at_quota = running.get(job.tenant_id, 0) >= quota
        policy_reason = grant.reason if grant is not None else "not ranked by the policy"
        if at_quota and quota == 0:
            kind = WaitKind.QUOTA_ZERO
        elif at_quota:
            kind = WaitKind.QUOTA
        elif snapshot.total_slots == 0:
            kind = WaitKind.NO_WORKERS
        elif waiting_before < snapshot.free_slots:
            kind = WaitKind.NEXT
        else:
            kind = WaitKind.SLOT if waiting_before == 0 and ahead < snapshot.total_slots \
                else WaitKind.TURN
        out[job_id] = WaitingEntry(
            job_id, kind=kind, position=place, at_quota=at_quota,
            predicted_gain=grant.predicted_gain if grant else None, policy=policy.name,
            policy_reason=policy_reason, ahead=ahead, running_ahead=ahead - waiting_before,
            ahead_in_tenant=own_waiting_before.get(job.tenant_id, 0), quota=quota)
        waiting_before += 1
        own_waiting_before[job.tenant_id] = own_waiting_before.get(job.tenant_id, 0) + 1
    return out
