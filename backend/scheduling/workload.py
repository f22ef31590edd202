"""Workloads: which recorded curve arrives when.

The same list of :class:`Arrival` drives the simulator and can be replayed
live (submit the curve's algorithm, dataset, params and seed at each
``time``), so simulated and live comparisons use one workload.
"""

from __future__ import annotations

import numpy as np

from backend.scheduling.trace import Arrival, Trace, TraceCurve

__all__ = ["Arrival", "generate_workload", "job_seconds"]


def job_seconds(curve: TraceCurve, chunk_seconds: float) -> float:
    """Slot-seconds a curve occupies run alone: its iterations plus per-chunk overhead."""
    chunks = max(1.0, curve.total_seconds / chunk_seconds)
    return curve.total_seconds + chunks * curve.chunk_overhead_seconds


def generate_workload(
    trace: Trace,
    *,
    slots: int,
    load: float,
    jobs: int | None = None,
    seed: int = 0,
    tenants: int = 1,
    chunk_seconds: float = 1.0,
) -> list[Arrival]:
    """Poisson arrivals offering ``load`` times the capacity of ``slots``.

    The arrival rate is ``load * slots / mean job slot-seconds``, so at
    ``load > 1`` work arrives faster than it can be served. Curves are drawn
    as shuffled passes over the whole trace (every curve once per pass), so
    the mix of algorithms stays balanced; ``jobs`` defaults to two passes.
    Tenants are assigned round-robin (1..tenants). The first job arrives at 0.

    Example: a trace of 3 curves averaging 10 slot-seconds, ``slots=2``,
    ``load=1.5`` -> rate 0.3 jobs/s, 6 arrivals about 3.3 s apart on average.
    """
    if slots <= 0 or load <= 0:
        raise ValueError("slots and load must be positive")
    rng = np.random.default_rng(seed)
    count = jobs if jobs is not None else 2 * len(trace.curves)
    mean_seconds = float(np.mean([job_seconds(c, chunk_seconds) for c in trace.curves]))
    rate = load * slots / mean_seconds
    gaps = rng.exponential(1.0 / rate, size=count)
    times = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    order: list[int] = []
    while len(order) < count:
        order.extend(int(i) for i in rng.permutation(len(trace.curves)))
    return [
        Arrival(index=i, time=float(times[i]), curve_id=trace.curves[order[i]].id,
                tenant_id=1 + i % max(tenants, 1))
        for i in range(count)
    ]
