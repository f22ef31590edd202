"""Prediction at the chunk horizon: the gain the policy ranks by, and its band.

    .venv/bin/python -m tests.bench.chunk_prediction [--traces standard torch synthetic:0
        synthetic:1] [--chunk-seconds 1.0 0.1] [--points 40]

The policy ranks a job by the loss drop its next chunk should bring. For
every curve of each trace, at ``--points`` evenly spaced iterations ``k``,
the predictor sees the history up to ``k`` (one predictor for the trace's
curves, one job each, used incrementally as the live scheduler uses it) and
predicts the loss one chunk ahead, ``h`` iterations: a chunk length at the
curve's own mean speed. Per trace and chunk length it prints:

* ``ours`` / ``geometric``: mean absolute error of the predicted gain
  ``L_k - L_{k+h}``, as a share of the curve's whole drop ``L_0 - L_final``
  (percentage points); ``geometric`` repeats the last ratio,
  ``L_k (L_k / L_{k-1})^h`` (the original SLAQ rule; a rising last step
  predicts no gain rather than an exponential rise);
* ``ratio``: ours over geometric (the scheduling issue asks for <= 0.5);
* ``band``: how often the truth ``L_{k+h}`` lies inside our band (asked: >= 90%).

``--every-chunk`` predicts at every chunk boundary instead (a refit per
chunk, as the live scheduler refits after each chunk a job runs).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from backend.scheduling.predictor import LossPredictor
from backend.scheduling.trace import TraceCurve
from backend.scheduling.types import JobView, LossPoint
from tests.bench.quality import get_trace


@dataclass
class Errors:
    ours: list[float]
    geometric: list[float]
    inside: list[bool]

    def extend(self, other: Errors) -> None:
        self.ours += other.ours
        self.geometric += other.geometric
        self.inside += other.inside


def curve_errors(curve: TraceCurve, chunk_seconds: float, points: int | None,
                 predictor: LossPredictor, job_id: int) -> Errors:
    losses = curve.losses
    n = len(losses)
    out = Errors([], [], [])
    scale = losses[0] - min(losses[-1], min(losses))
    if n < 4 or scale <= 0:
        return out
    spi = max(curve.total_seconds / n, 1e-9)
    h = max(1, round(chunk_seconds / spi))
    history = [LossPoint(i + 1, losses[i], curve.seconds[i]) for i in range(n)]
    # ``points=None``: at every chunk boundary, a refit per chunk, as live.
    ks = range(min(h, n - 1), n - 1, h) if points is None else \
        np.unique(np.linspace(3, n - 1, points).astype(int))
    for k in ks:
        ahead = min(h, n - int(k))
        view = JobView(job_id=job_id, tenant_id=0, submitted_at=0.0, iterations_done=int(k),
                       max_iterations=n, losses=history[:k])
        fit = predictor.fit(view)
        last, before, actual = losses[k - 1], losses[k - 2], losses[k - 1 + ahead]
        true_gain = (last - actual) / scale
        mean, low, high = fit.predict(ahead)
        ratio = min(last / before, 1.0) if before > 0 else 1.0
        out.ours.append(abs((last - mean) / scale - true_gain))
        out.geometric.append(abs(last * (1.0 - ratio**ahead) / scale - true_gain))
        out.inside.append(bool(low <= actual <= high))
    return out


def measure(trace_name: str, chunk_seconds: float, points: int | None
            ) -> dict[str, Errors]:
    """Errors per algorithm (shape, on synthetic traces) and in ``"all"``."""
    out: dict[str, Errors] = {"all": Errors([], [], [])}
    # One predictor for every curve, as the live scheduler has: a young job's
    # band borrows the other jobs' recent misses.
    predictor = LossPredictor()
    for job_id, curve in enumerate(get_trace(trace_name).curves):
        errors = curve_errors(curve, chunk_seconds, points, predictor, job_id)
        out["all"].extend(errors)
        out.setdefault(curve.algorithm or "unknown", Errors([], [], [])).extend(errors)
    return out


def _row(label: str, chunk: float, e: Errors) -> str:
    ours, geo = 100 * float(np.mean(e.ours)), 100 * float(np.mean(e.geometric))
    return (f"{label:<30}{chunk:>8.2g}{len(e.ours):>8}{ours:>8.2f}%{geo:>10.2f}%"
            f"{ours / geo if geo else float('nan'):>8.2f}{np.mean(e.inside):>8.0%}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", nargs="+",
                        default=["standard", "torch", "synthetic:0", "synthetic:1"])
    parser.add_argument("--chunk-seconds", type=float, nargs="+", default=[1.0, 0.1])
    parser.add_argument("--points", type=int, default=40)
    parser.add_argument("--every-chunk", action="store_true",
                        help="predict at every chunk boundary instead of --points points")
    parser.add_argument("--by-algorithm", action="store_true",
                        help="also one row per algorithm (per shape on synthetic traces)")
    args = parser.parse_args(argv)
    print(f"{'trace':<30}{'chunk s':>8}{'points':>8}{'ours':>9}{'geometric':>11}{'ratio':>8}"
          f"{'band':>8}")
    for name in args.traces:
        for chunk in args.chunk_seconds:
            groups = measure(name, chunk, None if args.every_chunk else args.points)
            print(_row(name, chunk, groups.pop("all")), flush=True)
            if args.by_algorithm:
                for algorithm, e in sorted(groups.items()):
                    print(_row(f"  {algorithm}", chunk, e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
