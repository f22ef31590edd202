"""Answers for "why is my job waiting?" that the live API can serve.

:func:`explain_waiting` asks the active policy for its full preference order
(the same ``allocate`` call, on a copy of the snapshot with a slot for every
waiting job and no quota limits) and combines it with the real limits: the
tenant's quota and the number of free slots. The predicted curve itself is
the scheduler's own fit, published each time it refits
(:mod:`backend.core.fits`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from backend.scheduling.types import Policy, Snapshot, TenantView


@dataclass(frozen=True)
class WaitingReason:
    """Where a waiting job stands: its rank in the policy's order (1 = next),
    whether its tenant is at its slot quota, and a sentence for the user."""

    job_id: int
    position: int
    at_quota: bool
    reason: str
    predicted_gain: float | None


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
    running = snapshot.running_by_tenant()
    out: dict[int, WaitingReason] = {}
    ranked = {g.job_id: (i, g) for i, g in enumerate(order, start=1)}
    for job in waiting:
        position, grant = ranked.get(job.job_id, (len(order) + 1, None))
        quota = snapshot.tenant(job.tenant_id).max_slots
        at_quota = running.get(job.tenant_id, 0) >= quota
        policy_reason = grant.reason if grant is not None else "not ranked by the policy"
        if at_quota and quota == 0:
            text = ("your team's slot quota is 0: no job of it runs until an admin "
                    "raises the quota")
        elif at_quota:
            text = (f"your team is using all {quota} of its slots (its quota); when one "
                    f"frees up: {policy_reason}")
        elif position <= snapshot.free_slots:
            text = f"about to run: {policy_reason}"
        else:
            text = f"waiting for a free slot, position {position}: {policy_reason}"
        out[job.job_id] = WaitingReason(job.job_id, position, at_quota, text,
                                        grant.predicted_gain if grant else None)
    return out
