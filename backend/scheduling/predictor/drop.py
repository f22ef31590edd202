"""The drop model, vectorised: :meth:`CurveFit.drop` for hundreds of fits
at several horizons in one array pass per family."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain
from operator import attrgetter

import numpy as np

from backend.scheduling.curves import evaluate
from backend.scheduling.predictor.fit import FLAT, GEOMETRIC, PENDING, UNKNOWN, CurveFit


def drop_model(fits: Sequence[CurveFit], after: np.ndarray
               ) -> Callable[[np.ndarray], np.ndarray]:
    """:meth:`CurveFit.drop` for many fits at once: the returned function maps
    ``(J, M)`` iteration counts (row ``j`` for ``fits[j]``) to the predicted
    drops; ``after`` is ``(J,)``.

    One array pass per family instead of a Python call per fit and horizon
    (a round re-reads hundreds of jobs' fits at several horizons); the
    fits' parameters are gathered once, however many horizons are asked."""
    by_family: dict[str, list[int]] = {}
    for j, fit in enumerate(fits):
        by_family.setdefault(fit.family, []).append(j)
    groups: list[tuple[str, list[int], tuple[np.ndarray, ...]]] = []
    for family, rows in by_family.items():
        if family in (FLAT, UNKNOWN, PENDING):
            continue
        picked = [fits[j] for j in rows]
        later = after[rows, None]
        if family == GEOMETRIC:
            ratio = np.array([f.params[0] for f in picked])[:, None]
            anchor = np.array([max(f.anchor, 0.0) for f in picked])[:, None]
            groups.append((family, rows, (ratio, anchor * ratio**later)))
            continue
        # Gathered in C: a round rescores hundreds of fits.
        count, width = len(picked), len(picked[0].params)
        params = np.fromiter(chain.from_iterable(map(_PARAMS, picked)), float,
                             width * count).reshape(count, width)
        span, height = np.fromiter(chain(map(_SPAN, picked), map(_HEIGHT, picked)), float,
                                   2 * count).reshape(2, count, 1)
        start = 1.0 + later / span
        groups.append((family, rows, (params, span, height, start,
                                      evaluate(family, params, start))))

    def drop(n: np.ndarray) -> np.ndarray:
        out = np.zeros(n.shape)
        for family, rows, arrays in groups:
            m = n[rows]
            if family == GEOMETRIC:
                ratio, scaled = arrays
                out[rows] = scaled * (1.0 - ratio**m)
                continue
            params, span, height, start, now = arrays
            later = evaluate(family, params, start + m / span)
            out[rows] = np.maximum(height * (now - later), 0.0)
        out[n <= 0] = 0.0
        return out

    return drop


_PARAMS = attrgetter("params")
_SPAN = attrgetter("span")
_HEIGHT = attrgetter("height")
