"""Prediction accuracy: mean relative error 1, 5 and 10 iterations ahead.

    .venv/bin/python -m tests.bench.prediction [--trace FILE] [--points 40]

For every curve of the trace, at ``--points`` evenly spaced iterations ``k``,
each predictor sees the history up to ``k`` and predicts the loss at
``k + h``; the error is ``|predicted - actual| / |actual|``, averaged per
algorithm (the SLAQ paper's Figure 5). Predictors:

* ``ours``: :class:`~backend.scheduling.predictor.LossPredictor` (used
  incrementally, as the live scheduler does: one instance per curve);
* ``naive``: the last drop repeated, ``L_k - h (L_{k-1} - L_k)``;
* ``geometric``: the last ratio repeated, ``L_k (L_k / L_{k-1})^h``.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np

from backend.scheduling.predictor import LossPredictor
from backend.scheduling.trace import load_trace
from backend.scheduling.types import JobView, LossPoint
from backend.simulation.cli import STANDARD_TRACE

HORIZONS = (1, 5, 10)
PREDICTORS = ("ours", "naive", "geometric")


def errors_for_curve(losses: tuple[float, ...], seconds: tuple[float, ...], points: int
                     ) -> dict[tuple[str, int], list[float]]:
    out: dict[tuple[str, int], list[float]] = defaultdict(list)
    n = len(losses)
    if n < 2 + max(HORIZONS):
        return out
    history = [LossPoint(i + 1, losses[i], seconds[i]) for i in range(n)]
    predictor = LossPredictor()
    ks = np.unique(np.linspace(2, n - max(HORIZONS), points).astype(int))
    for k in ks:
        view = JobView(job_id=0, tenant_id=0, submitted_at=0.0, iterations_done=int(k),
                       max_iterations=n, losses=history[:k])
        fit = predictor.fit(view)
        last, before = losses[k - 1], losses[k - 2]
        for h in HORIZONS:
            actual = losses[k - 1 + h]
            scale = max(abs(actual), 1e-12)
            ratio = last / before if before > 0 else 1.0
            guesses = {"ours": fit.predict(h)[0], "naive": last - h * (before - last),
                       "geometric": last * ratio**h}
            for name, guess in guesses.items():
                out[(name, h)].append(abs(guess - actual) / scale)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", type=Path, default=STANDARD_TRACE)
    parser.add_argument("--points", type=int, default=40, help="prediction points per curve")
    args = parser.parse_args(argv)
    trace = load_trace(args.trace)
    by_algo: dict[str, dict[tuple[str, int], list[float]]] = defaultdict(lambda: defaultdict(list))
    for curve in trace.curves:
        for key, errs in errors_for_curve(curve.losses, curve.seconds, args.points).items():
            by_algo[curve.algorithm or "unknown"][key].extend(errs)
            by_algo["ALL"][key].extend(errs)
    head = f"{'algorithm':<20}" + "".join(f"{p + ' +' + str(h):>15}"
                                          for h in HORIZONS for p in PREDICTORS)
    print("mean relative error (lower is better)")
    print(head)
    print("-" * len(head))
    worse = []
    for algo in sorted(by_algo, key=lambda a: (a == "ALL", a)):
        row = by_algo[algo]
        print(f"{algo:<20}" + "".join(f"{np.mean(row[(p, h)]):>15.4%}"
                                      for h in HORIZONS for p in PREDICTORS))
        if np.mean(row[("ours", 10)]) >= np.mean(row[("naive", 10)]):
            worse.append(algo)
    print("\n10 ahead, ours below naive for every algorithm:", "yes" if not worse else
          f"NO ({', '.join(worse)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
