"""Answers for "why is my job waiting?" that the live API can serve.

:func:`explain_waiting` asks the active policy for its full preference order
(the same ``allocate`` call, on a copy of the snapshot with a slot for every
waiting job and no quota limits) and combines it with the real limits: the
tenant's quota and the number of free slots. The predicted curve itself is
the scheduler's own fit, published each time it refits
(:mod:`backend.core.fits`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from backend.scheduling.types import Grant, Policy, Snapshot, TenantView

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


class WaitKind:
    """What a waiting job waits for (``WaitingReason.kind``)."""

    NEXT = "next"
    """A slot is free and the job is among the next granted."""
    SLOT = "slot"
    """First in line; every slot is busy."""
    TURN = "turn"
    """Behind other waiting jobs the policy ranks ahead of it."""
    QUOTA = "quota"
    """Its tenant runs as many chunks as its slot quota allows."""
    QUOTA_ZERO = "quota_zero"
    """Its tenant's slot quota is 0."""
    NEW = "new"
    """A new job not yet admitted to warm up (see the live scheduler)."""
    NO_WORKERS = "no_workers"
    """No worker slot is alive."""
    POOL = "pool"
    """Every slot of the pools that can run it is busy (or there is none)."""


@dataclass(frozen=True)
class WaitingReason:
    """Where a waiting job stands: its rank in the policy's order (1 = next),
    whether its tenant is at its slot quota, and a sentence for the user.

    ``kind`` says what it waits for, ``ahead_in_tenant`` how many of its own
    tenant's waiting jobs rank before it (what a quota-bound job waits on),
    and ``policy_reason`` is the policy's own technical account of its rank."""

    job_id: int
    position: int
    at_quota: bool
    reason: str
    predicted_gain: float | None
    kind: str = WaitKind.SLOT
    ahead: int = 0
    """Jobs, running or waiting, the policy prefers to it: with at least as
    many as there are slots, it waits for its turn, not just for a chunk to end."""
    ahead_in_tenant: int = 0
    quota: int = 0
    policy_reason: str = ""


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

    Example: position 5, no free slot, 2 slots, chunks of 10 s -> 25.0.
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
    beyond_free = position - free_slots
    if beyond_free <= 0:
        return 0.0
    return beyond_free * chunk_seconds / total_slots


def explain_waiting(policy: Policy, snapshot: Snapshot) -> dict[int, WaitingReason]:
    """Why each waiting job in ``snapshot`` is (not yet) running.

    Example: two waiting jobs under ``slaq`` with no free slot -> job 7 gets
    position 1, "waiting for a free slot; next in line: rank 1 by predicted
    gain ..."; job 9 position 2 with its own predicted gain.
    """
    waiting = snapshot.waiting()
    if not waiting:
        return {}
    unlimited = {t: TenantView(t, max_slots=snapshot.total_slots + len(waiting),
                               share_weight=snapshot.tenant(t).share_weight)
                 for t in {job.tenant_id for job in snapshot.jobs}}
    probe = replace(snapshot, free_slots=len(waiting), tenants=unlimited)
    order = policy.allocate(probe)
    # The same preference over every active job, each running one as it will
    # be when its chunk ends (queued again, waiting since now): those the
    # policy still prefers to a waiting job take their slot again.
    everyone = replace(probe, free_slots=len(snapshot.jobs),
                       jobs=[replace(j, running=False, waiting_since=snapshot.now)
                             if j.running else j for j in snapshot.jobs])
    overall = {g.job_id: i for i, g in enumerate(policy.allocate(everyone))}
    running = snapshot.running_by_tenant()
    out: dict[int, WaitingReason] = {}
    ranked = {g.job_id: (i, g) for i, g in enumerate(order, start=1)}
    # Each tenant's waiting jobs in rank order: a quota-bound job waits on its own.
    seen_in_tenant: dict[int, int] = {}
    ahead_in_tenant: dict[int, int] = {}
    for job in sorted(waiting, key=lambda j: ranked.get(j.job_id, (len(order) + 1, None))[0]):
        ahead_in_tenant[job.job_id] = seen_in_tenant.get(job.tenant_id, 0)
        seen_in_tenant[job.tenant_id] = ahead_in_tenant[job.job_id] + 1
    for job in waiting:
        position, grant = ranked.get(job.job_id, (len(order) + 1, None))
        quota = snapshot.tenant(job.tenant_id).max_slots
        at_quota = running.get(job.tenant_id, 0) >= quota
        policy_reason = grant.reason if grant is not None else "not ranked by the policy"
        if at_quota and quota == 0:
            kind = WaitKind.QUOTA_ZERO
            text = ("your team's slot quota is 0: no job of it runs until an admin "
                    "raises the quota")
        elif at_quota:
            kind = WaitKind.QUOTA
            text = (f"your team is using all {quota} of its slots (its quota); when one "
                    f"frees up: {policy_reason}")
        elif snapshot.total_slots == 0:
            kind = WaitKind.NO_WORKERS
            text = f"no worker is running; when one starts: {policy_reason}"
        elif position <= snapshot.free_slots:
            kind = WaitKind.NEXT
            text = f"about to run: {policy_reason}"
        else:
            ahead = overall.get(job.job_id, len(snapshot.jobs))
            kind = WaitKind.SLOT if position == 1 and ahead < snapshot.total_slots \
                else WaitKind.TURN
            text = f"waiting for a free slot, position {position}: {policy_reason}"
        out[job.job_id] = WaitingReason(job.job_id, position, at_quota, text,
                                        grant.predicted_gain if grant else None, kind=kind,
                                        ahead=overall.get(job.job_id, position - 1),
                                        ahead_in_tenant=ahead_in_tenant[job.job_id],
                                        quota=quota, policy_reason=policy_reason)
    return out
