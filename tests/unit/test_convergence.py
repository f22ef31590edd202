"""The convergence test on literal series: noise does not trip it, a real plateau does."""

from __future__ import annotations

import numpy as np

from workers.convergence import MIN_WINDOW, plateau, span

# Twenty minibatch losses shaped like the torch_cnn run (0.109-0.338
# between two points 10 iterations apart) while the loss still falls about
# 22% from one window to the next. The last value equals the one ten
# iterations before it to 4e-5: the old two-point test called this converged.
NOISY_DESCENT = [
    0.338, 0.214, 0.301, 0.187, 0.262, 0.109, 0.295, 0.231, 0.176, 0.244,
    0.198, 0.151, 0.267, 0.129, 0.183, 0.224, 0.142, 0.171, 0.119, 0.24401,
]

# A loss that has stopped moving, read with about 0.4% noise.
QUIET_PLATEAU = [
    0.5012, 0.4987, 0.5004, 0.4993, 0.5019, 0.4982, 0.5008, 0.4996, 0.5011, 0.4990,
    0.5003, 0.4985, 0.5015, 0.4998, 0.5006, 0.4989, 0.5010, 0.4994, 0.5001, 0.5007,
]


def test_two_close_points_in_a_noisy_descent_are_not_convergence() -> None:
    first, last = NOISY_DESCENT[-11], NOISY_DESCENT[-1]
    assert abs(first - last) / first < 1e-4, "the series must set the old two-point trap"
    assert plateau(NOISY_DESCENT, window=10, tolerance=1e-4) is None
    # Still falling 22% a window: not flat at any sensible tolerance.
    assert plateau(NOISY_DESCENT, window=10, tolerance=0.1) is None


def test_a_quiet_plateau_converges_at_a_tolerance_its_noise_can_show() -> None:
    found = plateau(QUIET_PLATEAU, window=10, tolerance=0.01)
    assert found is not None
    assert found.window == 10
    assert abs(found.gain) < 1e-3 and abs(found.gain) < found.bound < 0.01


def test_noise_makes_the_test_later_never_earlier() -> None:
    # The same plateau cannot be shown flat to 0.1% with 0.4% noise per point...
    assert plateau(QUIET_PLATEAU, window=10, tolerance=1e-3) is None
    # ...and ten times the noise around the same level hides even a 1% plateau.
    louder = [0.5 + 10 * (v - 0.5) for v in QUIET_PLATEAU]
    assert plateau(louder, window=10, tolerance=0.01) is None


def test_an_exact_plateau_converges_and_a_steady_decline_does_not() -> None:
    flat = [0.25] * 20
    found = plateau(flat, window=10, tolerance=1e-4)
    assert found is not None and found.gain == 0.0 and found.bound == 0.0
    # Noise-free but falling 0.1% an iteration, about 1% a window: not under 1e-3.
    declining = [1.0 * 0.999**k for k in range(20)]
    assert plateau(declining, window=10, tolerance=1e-3) is None
    assert plateau(declining, window=10, tolerance=0.05) is not None


def test_a_window_that_swings_up_by_chance_is_not_a_plateau() -> None:
    # Flat, then one noisy window well above it: the one-sided "not improving"
    # reading would stop here; a chance swing up says nothing about convergence.
    swing = QUIET_PLATEAU[:10] + [v + 0.05 for v in QUIET_PLATEAU[10:]]
    assert plateau(swing, window=10, tolerance=0.05) is None


def test_never_on_single_points_and_never_before_two_windows() -> None:
    assert span(1) == 2 * MIN_WINDOW
    assert span(10) == 20
    # Window 1 used to compare two single values; it now means MIN_WINDOW.
    assert plateau([1.0, 1.0], window=1, tolerance=0.01) is None
    assert plateau([1.0] * (span(1) - 1), window=1, tolerance=0.01) is None
    found = plateau([1.0] * span(1), window=1, tolerance=0.01)
    assert found is not None and found.window == MIN_WINDOW
    assert plateau(QUIET_PLATEAU[:-1], window=10, tolerance=0.01) is None


def test_only_the_newest_values_count() -> None:
    assert plateau(NOISY_DESCENT + QUIET_PLATEAU, window=10, tolerance=0.01) is not None
    assert plateau(QUIET_PLATEAU + NOISY_DESCENT, window=10, tolerance=0.01) is None


def test_noisy_power_laws_never_converge_at_the_default_tolerance() -> None:
    """Falling minibatch-like losses with 30% noise, judged after every
    iteration for 1,000 iterations, as a live job is."""
    two_point_trips = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        k = np.arange(1000)
        losses = ((2.0 / (1 + k / 20)) * (1 + 0.3 * rng.standard_normal(1000))).tolist()
        two_point_trips += any(abs(losses[i] - losses[i - 10]) / abs(losses[i - 10]) < 1e-4
                               for i in range(10, 1000))
        fired = [i for i in range(span(10), 1001)
                 if plateau(losses[:i], window=10, tolerance=1e-4) is not None]
        assert fired == [], f"seed {seed}"
    assert two_point_trips > 0, "the series must include ones the old test stopped"
