"""Loss histories as arrays: views that never change, a bounded ring."""

from __future__ import annotations

import numpy as np
import pytest

from backend.scheduling.loss_history import LossHistory, LossRing
from backend.scheduling.types import JobView, LossPoint


def points(first: int, last: int) -> list[LossPoint]:
    return [LossPoint(i, 1.0 / i, 0.01 * i) for i in range(first, last + 1)]


def test_a_view_handed_out_never_changes_as_the_ring_moves_on() -> None:
    ring = LossRing(capacity=5)
    for p in points(1, 3):
        ring.append(p.iteration, p.loss, p.seconds)
    early = ring.view()
    # Enough appends to fill the buffer (twice the capacity) and move it twice.
    for p in points(4, 30):
        ring.append(p.iteration, p.loss, p.seconds)
    assert list(early) == points(1, 3)
    assert list(ring.view()) == points(26, 30)


def test_a_ring_keeps_its_newest_capacity_points_across_chunks() -> None:
    ring = LossRing(capacity=4)
    chunk = points(1, 3)
    ring.extend([p.iteration for p in chunk], [p.loss for p in chunk], [p.seconds for p in chunk])
    held = ring.view()
    chunk = points(4, 10)  # longer than the capacity
    ring.extend([p.iteration for p in chunk], [p.loss for p in chunk], [p.seconds for p in chunk])
    assert list(ring.view()) == points(7, 10)
    assert ring.newest_iteration == 10 and len(ring) == 4
    assert list(held) == points(1, 3)
    assert list(ring.view(newest=2)) == points(9, 10)


def test_an_unbounded_ring_keeps_every_point() -> None:
    ring = LossRing.of(points(1, 200))
    assert list(ring.view()) == points(1, 200)


def test_views_are_read_only() -> None:
    history = LossRing.of(points(1, 3)).view()
    with pytest.raises(ValueError):
        history.values[0] = 5.0


def test_a_history_reads_like_the_points_it_holds() -> None:
    given = points(1, 60)
    history = LossHistory.of(given)
    assert history == given and history == tuple(given)
    assert history[-1] == given[-1] and list(history[10:20]) == given[10:20]
    assert history.newest_iteration == 60 and LossHistory.of([]).newest_iteration == 0
    assert history != points(1, 59)
    # Summed in order like Python's sum, so simulated schedules do not move.
    recent = given[-50:]
    assert history.mean_seconds(50) == sum(p.seconds for p in recent) / len(recent)
    assert LossHistory.of([]).mean_seconds(50) is None


def test_a_job_view_holds_any_sequence_of_points_as_arrays() -> None:
    view = JobView(job_id=1, tenant_id=1, submitted_at=0.0, iterations_done=3,
                   max_iterations=10, losses=tuple(points(1, 3)))
    assert isinstance(view.losses, LossHistory) and view.history is view.losses
    assert np.array_equal(view.history.iterations, [1, 2, 3])
    assert view.seconds_per_iteration == pytest.approx(0.02)
