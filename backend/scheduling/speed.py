"""Seconds per iteration learnt per kind of job, for sizing first chunks.

A new job has no timing of its own. Sizing its first chunk from jobs of the
same kind (algorithm, dataset and shape) that already ran makes that chunk fill the
chunk length like every other, instead of a handful of iterations that cost
a whole dispatch. The live scheduler state and the simulator both keep one
:class:`SpeedEstimates`, so the simulator sizes first chunks as live does.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from backend.scheduling.loss_history import LossHistory
from backend.scheduling.types import LossPoint

WEIGHT = 0.3
"""How far an estimate moves towards each new measurement."""
RECENT = 50
"""Points a measurement averages over: the job's speed now, not at its start."""


class SpeedEstimates:
    """Per kind, a moving average of the seconds per iteration its jobs report."""

    def __init__(self) -> None:
        self._by_kind: dict[Hashable, float] = {}

    def get(self, kind: Hashable) -> float | None:
        return self._by_kind.get(kind)

    def observe(self, kind: Hashable, points: Sequence[LossPoint]) -> float | None:
        """Fold the job's recent points into ``kind``'s estimate; the new estimate."""
        mean = LossHistory.of(points).mean_seconds(RECENT)
        if mean is None:
            return self._by_kind.get(kind)
        measured = max(mean, 1e-6)
        old = self._by_kind.get(kind)
        new = measured if old is None else old + WEIGHT * (measured - old)
        self._by_kind[kind] = new
        return new
