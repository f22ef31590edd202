"""Stopping rules: when a job's loss history says it is done or broken."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

# A loss this many times its starting value means training has diverged.
DIVERGENCE_FACTOR = 1e4


@dataclass(frozen=True)
class StopRule:
    max_iterations: int
    target_loss: float | None = None
    tolerance: float | None = None
    window: int = 10
    metric: str = "loss"
    """The quality metric ``target_loss`` and ``tolerance`` judge (``loss`` or
    a held-out one such as ``val_loss``, judged after each evaluation)."""


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

    ``losses`` needs at least ``rule.window + 1`` recent values for the
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
        verdict = check_quality(rule, iteration, losses)
        if verdict is not None:
            return verdict
    if iteration >= rule.max_iterations:
        return Verdict(VerdictStatus.completed, f"reached max iterations ({rule.max_iterations})")
    return None


def check_quality(rule: StopRule, iteration: int, values: Sequence[float]) -> Verdict | None:
    """The target and convergence tests on the rule's metric; ``values`` ends
    with the newest (one per iteration for ``loss``, per evaluation otherwise)."""
    last = values[-1]
    named = "loss" if rule.metric == "loss" else rule.metric
    if not math.isfinite(last):
        return Verdict(VerdictStatus.failed, f"{named} became {last} at iteration {iteration}")
    if rule.target_loss is not None and last <= rule.target_loss:
        return Verdict(VerdictStatus.completed, f"reached target {named} {rule.target_loss:g}")
    if rule.tolerance is not None and len(values) > rule.window:
        before = values[-1 - rule.window]
        change = abs(before - last) / max(abs(before), 1e-12)
        if change < rule.tolerance:
            unit = "iterations" if rule.metric == "loss" else "evaluations"
            return Verdict(
                VerdictStatus.completed,
                f"converged: {named} changed {change:.2e} over {rule.window} {unit} "
                f"(tolerance {rule.tolerance:g})",
            )
    return None
