"""Held-out synthetic loss curves: shapes the policies were not tuned on.

The standard trace is 24 runs of the portal's own sklearn-scale trainers:
smooth, mostly convex curves whose loss scales sit near 1. A policy tuned on
it can mistake a plateau for convergence or chase a diverging job. This
module makes a seeded :class:`~backend.scheduling.trace.Trace` of other
shapes, with loss scales spread log-uniformly over ``1e-2 .. 1e4``:

=========== ==========================================================
``power``    ``s (f + (1 + k/k0)^-p)``: slow polynomial decay
``exp``      ``s (f + e^(-k/tau))``: fast exponential decay, long flat tail
``plateau``  flat (slight noise) for a while, then a sigmoid drop
``step``     step learning-rate decay: exponential decay to a plateau,
             then a drop at each of 2-3 schedule steps
``noisy``    power law with multiplicative SGD noise (5-15%)
``stall``    power law with a flat stretch in the middle
``diverge``  falls, then rises for the last 20-40% of the run
=========== ==========================================================

Each curve runs 100-2,000 iterations at 0.5-5 ms an iteration (0.05-10 s of
compute, like the standard trace) with 20-50 ms of chunk overhead. The curve
id starts with its shape (``plateau/7``), which the benchmarks use to report
per shape. Pure: no I/O; ``synthetic_trace(seed)`` always returns the same trace.

Example: ``synthetic_trace(seed=0, per_shape=2)`` -> 14 curves, ids
``power/0 .. diverge/13``; ``trace.curve("plateau/4").losses`` stays near its
start for its first 15-50% of iterations and then drops.
"""

from __future__ import annotations

import numpy as np

from backend.scheduling.trace import Trace, TraceCurve

SHAPES: tuple[str, ...] = ("power", "exp", "plateau", "step", "noisy", "stall", "diverge")


def shape_of(curve_id: str) -> str:
    """The shape a synthetic curve id names (``"plateau/4"`` -> ``"plateau"``)."""
    return curve_id.split("/", 1)[0]


def synthetic_curve(shape: str, index: int, rng: np.random.Generator) -> TraceCurve:
    """One curve of ``shape``; all randomness comes from ``rng``."""
    n = int(np.exp(rng.uniform(np.log(100), np.log(2000))))
    k = np.arange(1, n + 1, dtype=float)
    scale = float(10 ** rng.uniform(-2, 4))
    floor = float(rng.uniform(0.02, 0.3))
    if shape == "power":
        y = floor + (1 + k / rng.uniform(2, 20)) ** -rng.uniform(0.5, 1.5)
    elif shape == "exp":
        y = floor + np.exp(-k / (n * rng.uniform(0.05, 0.3)))
    elif shape == "plateau":
        start, width = n * rng.uniform(0.15, 0.5), n * rng.uniform(0.02, 0.08)
        y = floor + (1 - floor) * (1 - 0.03 * k / n) / (1 + np.exp((k - start) / width))
        y = y * (1 + 0.002 * rng.standard_normal(n))
    elif shape == "step":
        # Each segment decays exponentially towards its plateau; a schedule
        # step sets a lower plateau, as a learning-rate drop does.
        steps = list(np.sort(rng.uniform(0.2, 0.85, size=int(rng.integers(2, 4)))) * n)
        tau = n * rng.uniform(0.02, 0.06)
        begin, level, target = 0.0, 1.0, float(rng.uniform(0.4, 0.7))
        y = np.empty(n)
        for i, kk in enumerate(k):
            if steps and kk > steps[0]:
                steps.pop(0)
                begin, level = kk - 1, float(y[i - 1])
                target = level * float(rng.uniform(0.3, 0.6))
            y[i] = target + (level - target) * np.exp(-(kk - begin) / tau)
        y = 0.2 * floor + y
    elif shape == "noisy":
        y = floor + (1 + k / rng.uniform(2, 20)) ** -rng.uniform(0.5, 1.2)
        y = y * (1 + rng.uniform(0.05, 0.15) * rng.standard_normal(n))
    elif shape == "stall":
        a, b = sorted(rng.uniform(0.2, 0.7, size=2) * n)
        b = max(b, a + 0.1 * n)
        # Iterations inside [a, b) make no progress: the clock of the curve stops.
        eff = np.where(k < a, k, np.where(k < b, a, k - (b - a)))
        y = floor + (1 + eff / rng.uniform(2, 20)) ** -rng.uniform(0.6, 1.2)
        y = y * (1 + 0.003 * rng.standard_normal(n))
    elif shape == "diverge":
        turn = n * rng.uniform(0.6, 0.8)
        y = floor + (1 + np.minimum(k, turn) / rng.uniform(2, 10)) ** -1.0
        y = y * np.exp(np.maximum(k - turn, 0) / (n * rng.uniform(0.05, 0.2)) * 0.3)
    else:
        raise ValueError(f"unknown shape {shape!r}; choose one of {SHAPES}")
    spi = float(np.exp(rng.uniform(np.log(5e-4), np.log(5e-3))))
    seconds = spi * (1 + 0.1 * rng.standard_normal(n)).clip(0.5, 1.5)
    losses = np.maximum(scale * y, 1e-12 * scale)
    return TraceCurve(
        id=f"{shape}/{index}", losses=tuple(float(v) for v in losses),
        seconds=tuple(float(v) for v in seconds), algorithm=f"synthetic-{shape}",
        dataset="synthetic", seed=index, max_iterations=n,
        stop_reason="synthetic", chunk_overhead_seconds=float(rng.uniform(0.02, 0.05)),
    )


def synthetic_trace(seed: int = 0, per_shape: int = 4,
                    shapes: tuple[str, ...] = SHAPES) -> Trace:
    """``per_shape`` curves of each shape, interleaved, from one seeded generator."""
    rng = np.random.default_rng([seed, 0x5EED])
    curves = [synthetic_curve(shape, i * len(shapes) + j, rng)
              for i in range(per_shape) for j, shape in enumerate(shapes)]
    return Trace(curves=tuple(curves),
                 description=f"synthetic shapes {', '.join(shapes)}; seed {seed}")
