"""Stopping rules: when a job's loss history says it is done or broken.

The convergence test (:func:`workers.convergence.plateau`) runs on the job's
quality series: the per-iteration training loss, or the held-out metric at
each evaluation. Minibatch training losses are noisy and fall in fits and
starts, so on the training loss the test may fire only once the job has run
``MIN_SHARE`` of its ``max_iterations``; a held-out metric is measured on the
same rows every time and may fire as soon as it has two windows of
evaluations. The verdict's reason names the series that converged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from workers.convergence import plateau, span

# A loss this many times its starting value means training has diverged.
DIVERGENCE_FACTOR = 1e4

MIN_SHARE = 0.3
"""Share of ``max_iterations`` a job runs before its training loss may be
judged converged: early minibatch losses stall and recover, and a new user's
job should run long enough to watch."""


@dataclass(frozen=True)
class StopRule:
    max_iterations: int
    target_loss: float | None = None
    tolerance: float | None = None
    window: int = 10
    metric: str = "loss"
    """The quality metric ``target_loss`` and ``tolerance`` judge (``loss`` or
    a held-out one such as ``val_loss``, judged after each evaluation)."""

    @property
    def history_length(self) -> int:
        """Recent values of the judged series the convergence test reads."""
        return span(self.window)


class VerdictStatus(StrEnum):
    """How a stopping rule ends a job; the values are the job statuses they set."""

    completed = "completed"
    failed = "failed"


@dataclass(frozen=True)
class Verdict:
    # Typed str so callers that still pass "failed" type-check; __post_init__
    # turns it into a VerdictStatus, which rejects any other value.
    status: str
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", VerdictStatus(self.status))


def check(
    rule: StopRule, iteration: int, losses: Sequence[float], initial: float
) -> Verdict | None:
    """Judge the training-loss history after ``iteration``; ``losses`` ends with its loss.

    ``losses`` needs at least ``rule.history_length`` recent values for the
    convergence test; ``initial`` is the job's first reported loss. The
    target and convergence tests apply here only when the rule's metric is
    the training loss; otherwise :func:`check_quality` applies them.
    """
    last = losses[-1]
    if not math.isfinite(last):
        return Verdict(VerdictStatus.failed, f"loss became {last} at iteration {iteration}")
    if abs(last) > DIVERGENCE_FACTOR * max(abs(initial), 1.0):
        return Verdict(
            VerdictStatus.failed,
            f"loss diverged at iteration {iteration}: {last:.4g} from {initial:.4g} "
            "(try a smaller learning rate)",
        )
    if rule.metric == "loss":
        verdict = check_quality(rule, iteration, losses,
                                converge=iteration >= MIN_SHARE * rule.max_iterations)
        if verdict is not None:
            return verdict
    if iteration >= rule.max_iterations:
        return Verdict(VerdictStatus.completed, f"reached max iterations ({rule.max_iterations})")
    return None


def check_quality(rule: StopRule, iteration: int, values: Sequence[float], *,
                  converge: bool = True) -> Verdict | None:
    """The target and convergence tests on the rule's metric; ``values`` ends
    with the newest (one per iteration for ``loss``, per evaluation otherwise).
    ``converge`` False skips the convergence test (too early to judge)."""
    last = values[-1]
    named = "loss" if rule.metric == "loss" else rule.metric
    if not math.isfinite(last):
        return Verdict(VerdictStatus.failed, f"{named} became {last} at iteration {iteration}")
    if rule.target_loss is not None and last <= rule.target_loss:
        return Verdict(VerdictStatus.completed, f"reached target {named} {rule.target_loss:g}")
    if rule.tolerance is None or not converge:
        return None
    found = plateau(values, window=rule.window, tolerance=rule.tolerance)
    if found is None:
        return None
    if rule.metric == "loss":
        series, unit = "the training loss", "iterations"
    else:
        series, unit = f"the held-out {rule.metric}", "evaluations"
    return Verdict(
        VerdictStatus.completed,
        f"converged: {series} stopped improving (mean of the last {found.window} {unit} "
        f"vs the {found.window} before: {found.gain:+.2e} relative, at most "
        f"{found.bound:.2e} allowing for noise; tolerance {rule.tolerance:g})",
    )
