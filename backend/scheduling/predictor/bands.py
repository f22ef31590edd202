"""Band calibration: how far each job's newest points fell from its
earlier fits, in band widths, and the split-conformal quantile ``z`` that
makes its band hold about ``BAND_COVERAGE`` of them."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from statistics import NormalDist

from backend.scheduling.predictor.fit import CurveFit

BAND_COVERAGE = 0.95
"""Share of a job's recent misses its band holds: the split-conformal
quantile ``z`` is taken at this level. The band is asked to hold the truth
a chunk ahead 90% of the time, but the misses are judged at each refit's
newest point (nearer than a chunk ahead while a job is young), and a
quantile of past misses under-covers when a curve changes course. At 0.9
the band held the truth a chunk ahead 83-92% of the time on the 0.1 s rows
of ``tests.bench.chunk_prediction --every-chunk``, at 0.95 94-96%."""

_PRIOR_Z = NormalDist().inv_cdf((1 + BAND_COVERAGE) / 2)
"""``z`` before any job has a miss to calibrate on (a normal error's
quantile): 1 made the first bands of a young portal hold the truth 75-88%
of the time at 1 s chunks."""

_MISSES_KEPT = 40
"""Recent misses a job's band is calibrated on."""

_OWN_MISSES = 10
"""A job with fewer misses of its own takes the quantile of every job's recent misses."""

_POOLED_MISSES = 400
"""Recent misses of all jobs kept for that."""


def _calibrated(previous: CurveFit | None, newest: tuple[int, float] | None,
                pool: deque[float], pooled_z: Callable[[], float | None]
                ) -> tuple[tuple[float, ...], float]:
    """``misses`` and ``z`` after judging ``previous``'s band on the newest
    point ``newest`` (iteration, loss; ``None`` when no point arrived since
    ``previous``) (split-conformal, per job: ``z`` is the coverage quantile of the
    recent misses measured in band widths, so a job whose curve surprises its
    fits gets a wider band, a steady one a tighter one).

    Judged at the newest point only: that is the farthest horizon since the
    earlier fit, a chunk ahead live, where the band matters; nearer points
    miss less and would make the band too narrow there. A job with fewer
    than ``_OWN_MISSES`` misses of its own takes the quantile of every job's
    recent ones (``pool``, which this call extends)."""
    misses = list(previous.misses) if previous is not None else []
    if previous is not None and previous.known and not previous.pending and newest:
        mean, _, high = previous.predict(newest[0] - previous.k_last)
        width = (high - mean) / previous.z if previous.z > 0 else 0.0
        error = abs(newest[1] - mean)
        if math.isfinite(error):
            miss = error / width if width > 0 else (0.0 if error == 0 else 1e3)
            misses.append(miss)
            pool.append(miss)
    misses = misses[-_MISSES_KEPT:]
    z = _quantile(misses) if len(misses) >= _OWN_MISSES else pooled_z()
    return tuple(misses), _PRIOR_Z if z is None else z


def _quantile(misses: list[float]) -> float | None:
    """The ``BAND_COVERAGE`` split-conformal quantile (the ``ceil(c (m + 1))``-th
    smallest of ``m``), kept within [0.25, 1000]; ``None`` without misses."""
    if not misses:
        return None
    ranked = sorted(misses)
    at = min(math.ceil(BAND_COVERAGE * (len(ranked) + 1)), len(ranked)) - 1
    return min(max(ranked[at], 0.25), 1e3)
