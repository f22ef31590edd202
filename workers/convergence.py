"""The convergence test: has a noisy series stopped improving?

Comparing two single points (the newest value with the one ``window`` steps
earlier) fires on noise: minibatch losses that range 0.11-0.34 within a few
iterations will, sooner or later, land two points 1e-4 apart while the loss
is still falling fast. So the test compares the *means* of two adjacent
windows and charges the comparison its noise:

- ``before`` = mean of the ``window`` values before the last ``window``,
  ``after`` = mean of the last ``window``; ``gain = before - after`` (how
  much the series improved; lower is better, as for a loss).
- The noise of each value is estimated from successive differences (von
  Neumann's estimator, ``sigma^2 = sum(diff^2) / (2 (n - 1))``), which a
  smooth trend barely inflates, unlike the plain variance; the standard
  error of ``gain`` is ``sigma * sqrt(2 / window)``.
- The series has converged when even the far bound of its change,
  ``|gain| + Z * se``, is below ``tolerance`` relative to ``before``. Noise
  therefore makes the test *later*, never earlier: a noisy series converges
  only once its windows show that it is flat to within the tolerance. The
  test is two-sided, like the tolerance has always been ("relative change
  below"): a window that swings up by chance is noise, not a plateau.

The test is pure and knows nothing of jobs: :mod:`workers.stopping` decides
which series it runs on and from when.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z = 2.0
"""Standard errors added to the measured gain: about a 2.5% chance, per test,
that noise hides a real gain of the tolerance's size."""

MIN_WINDOW = 3
"""Values per window at the least, whatever the rule's window says: a mean of
one value is a single point, and the noise estimate needs several."""


@dataclass(frozen=True)
class Plateau:
    """The evidence that a series stopped improving (relative to ``before``)."""

    window: int
    """Values in each of the two compared windows."""
    gain: float
    """Relative improvement of the last window's mean over the one before."""
    bound: float
    """``|gain|`` plus its noise allowance: what fell below the tolerance."""


def span(window: int) -> int:
    """How many recent values :func:`plateau` reads for a rule's ``window``."""
    return 2 * max(window, MIN_WINDOW)


def plateau(values: Sequence[float], *, window: int, tolerance: float) -> Plateau | None:
    """The plateau the last ``span(window)`` of ``values`` show, or None.

    None also while there are fewer values than that. Worked example, window 3
    (so six values), tolerance 0.01: ``[1.00, 1.01, 0.99, 1.00, 1.00, 1.00]``
    has ``before`` 1.0 and ``after`` 1.0, gain 0; successive differences give
    sigma about 0.0077, se about 0.0063, bound about 0.013 > 0.01: not yet.
    Six values of ``1.0`` have bound 0 and converge.
    """
    w = max(window, MIN_WINDOW)
    if len(values) < 2 * w:
        return None
    recent = [float(v) for v in values[-2 * w:]]
    before = sum(recent[:w]) / w
    after = sum(recent[w:]) / w
    diffs = [b - a for a, b in zip(recent, recent[1:], strict=False)]
    sigma = math.sqrt(sum(d * d for d in diffs) / (2 * len(diffs)))
    se = sigma * math.sqrt(2 / w)
    scale = max(abs(before), 1e-12)
    gain = (before - after) / scale
    bound = abs(gain) + Z * se / scale
    if bound < tolerance:
        return Plateau(window=w, gain=gain, bound=bound)
    return None
