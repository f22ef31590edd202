"""What would the portal's recent history have looked like under other policies?

Replays :func:`backend.services.portal_trace.record_portal_workload`'s
workload (the jobs as submitted, with their real curves, speeds and chunk
costs) in the simulator under each policy asked for, and scores the real
history with the same metrics next to them. The tenants' current slot quotas
and share weights apply. The answer holds the figures and the series the
admin page charts (the CLI writes the same charts as an HTML report).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from sqlmodel import Session, select

from backend.core.models import Tenant
from backend.scheduling.metrics import Figures, figures, mean_loss_timeline, time_to_fraction
from backend.scheduling.registry import POLICIES, policy_runs
from backend.scheduling.simulator import SimConfig, SimResult, build_policy, simulate
from backend.scheduling.types import LIVE_HISTORY_POINTS, TenantView
from backend.services.errors import Invalid
from backend.services.portal_trace import PortalWorkload

DEFAULT_POLICIES = ("fair", "las", "slaq")
REPLAYABLE = tuple(sorted(POLICIES))
"""Every registry policy, ``oracle`` included (it is handed the recorded curves)."""
TIMELINE_POINTS = 300


class NothingToReplay(Invalid, ValueError):
    """No job of the window completed."""


@dataclass(frozen=True)
class Replay:
    label: str
    result: SimResult
    figures: Figures


Progress = Callable[[str, int], None]
"""``progress(run label, jobs finished)`` while that run's replay goes on."""

MAX_RUNS = 8
"""Most simulated runs in one replay (a guarded policy counts once per guard)."""


def replay(workload: PortalWorkload, policies: Sequence[str], *, slots: int,
           chunk_seconds: float, tenants: Mapping[int, TenantView] | None = None,
           progress: Progress | None = None, completion_guards: Sequence[float] = (),
           in_force: float | None = None, completion_weight: float | None = None,
           completion_weights: Sequence[float] = ()) -> list[Replay]:
    """The workload as it ran, then under each of ``policies``: the guarded
    ones once per completion guard in ``completion_guards`` (none: the one in
    force, ``in_force``), slaq also once per completion weight in
    ``completion_weights`` (none: the operators' ``completion_weight``, as
    the live scheduler runs it), labelled as
    :func:`~backend.scheduling.registry.policy_runs` does."""
    check_replayable(workload)
    check_policies(policies)
    arrivals = list(workload.trace.arrivals)
    # As the live scheduler would run them: policies see a job's newest
    # points, and attained service counts iterations' seconds only.
    config = SimConfig(slots=slots, chunk_seconds=chunk_seconds, tenants=dict(tenants or {}),
                       history_points=LIVE_HISTORY_POINTS, attained_overhead=False)
    out = [Replay("as run", workload.as_run, figures(workload.as_run))]
    for run in policy_runs(policies, completion_guards, in_force, completion_weights,
                           completion_weight):
        tick = None if progress is None else partial(progress, run.label)
        if tick is not None:
            tick(0)
        policy = build_policy(run.policy, workload.trace, arrivals,
                              completion_guard=run.completion_guard,
                              completion_weight=run.completion_weight)
        result = simulate(policy, workload.trace, arrivals, config, progress=tick)
        out.append(Replay(run.label, result, figures(result)))
    return out


NO_COMPLETED_JOB = "No job submitted in that window has completed yet: nothing to replay."


def check_replayable(workload: PortalWorkload) -> None:
    if not workload.trace.arrivals:
        raise NothingToReplay(NO_COMPLETED_JOB)


def check_policies(policies: Sequence[str]) -> None:
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; choose from {', '.join(REPLAYABLE)}")


def report(workload: PortalWorkload, replays: Sequence[Replay]) -> dict[str, Any]:
    """JSON for the admin page: figures per run and the series it charts."""
    return {
        "jobs": len(workload.trace.arrivals),
        "since": workload.since.isoformat(),
        "until": workload.until.isoformat(),
        "left_out": workload.left_out,
        "runs": [{"label": r.label, "figures": r.figures.as_dict(),
                  "timeline": _timeline(r.result), "t90": _t90(r.result)} for r in replays],
    }


def _timeline(result: SimResult) -> dict[str, list[float]]:
    t, mean = mean_loss_timeline(result, TIMELINE_POINTS)
    return {"seconds": [round(v, 3) for v in t], "mean_norm_loss": [round(v, 5) for v in mean]}


def _t90(result: SimResult) -> list[float]:
    """Seconds from arrival to 90% of each job's loss reduction, sorted (a CDF)."""
    return [round(float(v), 3) for v in np.sort([time_to_fraction(j, 0.9) for j in result.jobs])]


def tenant_views(session: Session) -> dict[int, TenantView]:
    """Every tenant's current slot quota and share weight, as the scheduler sees them."""
    return {t.id: TenantView(t.id, t.max_slots, t.share_weight, dict(t.pool_slots or {}))
            for t in session.exec(select(Tenant)) if t.id is not None}
