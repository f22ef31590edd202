"""The held-out synthetic trace: seeded, every shape, scales 1e-2..1e4, runnable."""

from __future__ import annotations

import numpy as np
import pytest

from backend.scheduling.metrics import figures
from backend.scheduling.simulator import SimConfig, build_policy, simulate
from backend.scheduling.synthetic import SHAPES, shape_of, synthetic_trace
from backend.scheduling.workload import generate_workload


def test_seeded_and_complete() -> None:
    trace = synthetic_trace(seed=3, per_shape=2)
    assert trace == synthetic_trace(seed=3, per_shape=2)
    assert trace != synthetic_trace(seed=4, per_shape=2)
    assert sorted({shape_of(c.id) for c in trace.curves}) == sorted(SHAPES)
    assert len(trace.curves) == 2 * len(SHAPES)
    starts = [c.initial_loss for c in trace.curves]
    assert min(starts) >= 1e-2 and max(starts) <= 1.5e4
    for c in trace.curves:
        assert 100 <= c.iterations <= 2000 and 0.02 <= c.chunk_overhead_seconds <= 0.05


def test_shapes_look_like_their_names() -> None:
    trace = synthetic_trace(seed=0, per_shape=3)
    for c in trace.curves:
        y = np.asarray(c.losses) / c.initial_loss
        shape = shape_of(c.id)
        if shape == "plateau":
            assert y[: len(y) // 8].min() > 0.8, "flat at first"
            assert y[-1] < 0.5, "then drops"
        elif shape == "diverge":
            assert y[-1] > 1.2 * y.min(), "ends above its best"
        elif shape in ("power", "exp", "step"):
            assert np.all(np.diff(y) <= 1e-12), "monotone"


@pytest.mark.parametrize("policy", ["fair", "las", "slaq", "oracle"])
def test_simulates_under_every_policy(policy: str) -> None:
    trace = synthetic_trace(seed=0, per_shape=1)
    arrivals = generate_workload(trace, slots=2, load=1.5, jobs=7, seed=0, chunk_seconds=0.5)
    result = simulate(build_policy(policy, trace, arrivals), trace, arrivals,
                      SimConfig(slots=2, chunk_seconds=0.5))
    assert all(j.finish is not None for j in result.jobs)
    assert 0.0 < figures(result).avg_norm_loss < 1.0
