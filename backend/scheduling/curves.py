"""Batched weighted least-squares fits of the SLAQ loss-curve families.

The three families, in iteration ``k``:

* ``inv_quad``: ``1/(a k^2 + b k + c) + d``
* ``exp``:      ``a^(k-b) + c`` with ``0 < a < 1``
* ``inv_lin``:  ``1/(a k + b) + c``

Every family is fitted by *variable projection*: one parameter is scanned on a
fixed grid and, for each grid value, the others enter linearly, so the fit is
a closed-form weighted least-squares solve. A grid over many jobs at once is a
few numpy array operations; an iterative optimiser per job would cost
milliseconds each and make refitting thousands of jobs unaffordable.

Coordinates are scaled per job so one grid suits every curve: ``x`` maps the
fitted window's iterations onto [0, 1] (``x = 1`` is the newest point) and
``y`` maps its losses onto [0, 1]. In those coordinates the families become

* ``exp``:      ``y = c + s * exp(-r x)``       (grid over the rate ``r``)
* ``inv_lin``:  ``y = c + s / (x + h)``         (grid over the shift ``h``)
* ``inv_quad``: ``y = d + 1 / (q0 + q1 x + q2 x^2)`` (grid over the floor ``d``;
  for fixed ``d``, ``1 / (y - d)`` is a quadratic in ``x``, fitted with
  delta-method weights so residuals count as loss residuals)

Only decreasing fits are accepted (``s > 0``; a non-decreasing quadratic
``q``), because a fitted curve that turns upwards would predict negative gain
for ever and starve its job.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

FAMILIES: tuple[str, ...] = ("inv_quad", "exp", "inv_lin")
"""Family names in a fixed order; index ``i`` of a fit result refers to ``FAMILIES[i]``."""

_RATES = np.geomspace(0.05, 80.0, 20)
"""Decay rates of ``exp`` per window length: from almost linear to a sharp knee."""

_SHIFTS = np.geomspace(1e-3, 1e2, 20)
"""Shifts of ``inv_lin``: small is a steep early drop, large is almost linear."""

_FLOORS = -np.geomspace(1e-3, 1e2, 16)
"""Asymptotes of ``inv_quad`` below the window's lowest loss (which is y = 0)."""

_FINE = 5
"""Points of each finer scan between the previous optimum's two neighbours."""

_REFINE = 2
"""Finer scans after the coarse one: each narrows the step about threefold."""

_BLOCK = 512
"""Jobs per numpy block; bounds temporary arrays to a few megabytes."""

_HANKEL = np.array([[0, 1, 2], [1, 2, 3], [2, 3, 4]])
"""Where the moments of x^0..x^4 sit in the normal equations of a quadratic."""

_DIAGONAL = np.arange(3)

_COFACTORS = np.array([[4, 2, 1, 0, 1, 0], [8, 5, 5, 8, 2, 4],
                       [5, 1, 2, 2, 0, 1], [5, 8, 4, 2, 5, 1]])
"""The distinct entries of a symmetric 3x3 adjugate, of the matrix flattened
to ``m``: ``m[i] m[j] - m[k] m[l]`` for each column ``(i, j, k, l)``."""

_SYMMETRIC = np.array([[0, 1, 2], [1, 3, 4], [2, 4, 5]])
"""Where those six entries sit in the full adjugate."""

_FINE_STEPS = np.linspace(-1.0, 1.0, _FINE)
"""Exponents of the finer scans' steps around the previous optimum."""

_SCRATCH = threading.local()
"""Each thread's work memory for the scans' (J, G, W) arrays, kept between
fits (see :func:`_scratch`)."""


@dataclass(frozen=True)
class BatchFit:
    """Best fit of one family for each of ``J`` jobs.

    ``params`` is ``(J, 4)``: ``exp`` and ``inv_lin`` store ``(s, c, r_or_h, 0)``,
    ``inv_quad`` stores ``(q0, q1, q2, d)``. ``sse`` is the weighted sum of
    squared residuals in scaled units, ``inf`` where no decreasing fit exists.
    """

    family: str
    params: FloatArray
    sse: FloatArray


def evaluate(family: str, params: FloatArray, x: FloatArray) -> FloatArray:
    """Scaled loss of ``family`` at scaled iterations ``x`` (``(J, M)``)."""
    p = params[:, :, None] if params.ndim == 2 else params
    if family == "inv_quad":
        q = p[:, 0] + p[:, 1] * x + p[:, 2] * x * x
        return p[:, 3] + 1.0 / np.maximum(q, 1e-12)
    if family == "exp":
        return p[:, 1] + p[:, 0] * np.exp(-p[:, 2] * x)
    if family == "inv_lin":
        return p[:, 1] + p[:, 0] / (x + p[:, 2])
    raise ValueError(f"unknown curve family {family!r}")


def asymptote(family: str, params: FloatArray) -> FloatArray:
    """Scaled loss each fit approaches as iterations grow."""
    if family == "inv_quad":
        flat = (params[:, 1] <= 0) & (params[:, 2] <= 0)
        return np.where(flat, params[:, 3] + 1.0 / np.maximum(params[:, 0], 1e-12), params[:, 3])
    return params[:, 1]


def fit_all(x: FloatArray, y: FloatArray, w: FloatArray) -> list[BatchFit]:
    """Fit every family to ``J`` padded windows (``(J, W)``; padding has ``w = 0``).

    Each family's grid is scanned coarsely, then twice more, each time finely
    around each job's best value so far: within about 1% of the optimum at a
    fraction of the cost of a fine grid everywhere.
    """
    results: dict[str, list[tuple[FloatArray, FloatArray]]] = {f: [] for f in FAMILIES}
    for start in range(0, x.shape[0], _BLOCK):
        sl = slice(start, start + _BLOCK)
        window = _window(x[sl], y[sl], w[sl])
        for family, coarse, fit in (("inv_quad", _FLOORS, _fit_inv_quad),
                                    ("exp", _RATES, _fit_exp), ("inv_lin", _SHIFTS, _fit_inv_lin)):
            grid = np.broadcast_to(coarse, (window.x.shape[0], coarse.size))
            found = fit(window, grid)
            ratio = coarse[1] / coarse[0]
            for _ in range(_REFINE):
                best = found[0][:, 3] if family == "inv_quad" else found[0][:, 2]
                step = ratio ** _FINE_STEPS
                found = fit(window, best[:, None] * step[None, :])
                ratio = ratio ** (2.0 / (_FINE - 1))
            results[family].append(found)
    return [
        BatchFit(f, np.concatenate([r[0] for r in results[f]]),
                 np.concatenate([r[1] for r in results[f]]))
        for f in FAMILIES
    ]


class _Window(NamedTuple):
    """A block of windows and what every scan of them reads: the same for
    each of a family's three scans, and for both two-parameter families."""

    x: FloatArray
    y: FloatArray
    w: FloatArray
    s0: FloatArray
    ty: FloatArray
    syy: FloatArray
    weights: FloatArray
    """``w`` and ``w y`` stacked, ``(J, W, 2)``."""
    powers: FloatArray
    """``x^0..x^4``, ``(J, W, 5)``."""


def _window(x: FloatArray, y: FloatArray, w: FloatArray) -> _Window:
    wy = w * y
    xx = x[:, :, None]
    return _Window(
        x, y, w, s0=w.sum(-1, keepdims=True), ty=wy.sum(-1, keepdims=True),
        syy=(wy * y).sum(-1, keepdims=True), weights=np.stack([w, wy], -1),
        powers=np.concatenate([np.ones_like(xx), xx, xx * xx, xx * xx * xx, (xx * xx) ** 2], -1))


def _scratch(count: int, shape: tuple[int, int, int]) -> list[FloatArray]:
    """``count`` arrays of ``shape`` in this thread's work memory, which the
    next call overwrites.

    A refit's scans need a few (J, G, W) arrays (a third of a megabyte each
    at 64 jobs): allocated afresh, the allocator handed them back to the
    system between scans and every scan page-faulted its way through them
    again, a third of the scans' time."""
    size = shape[0] * shape[1] * shape[2]
    memory = getattr(_SCRATCH, "memory", None)
    if memory is None or memory.size < count * size:
        memory = _SCRATCH.memory = np.empty(count * size)
    return [memory[i * size:(i + 1) * size].reshape(shape) for i in range(count)]


def _fit_exp(window: _Window, grid: FloatArray) -> tuple[FloatArray, FloatArray]:
    basis = _scratch(1, grid.shape + window.x.shape[1:])[0]
    np.multiply(-grid[:, :, None], window.x[:, None, :], out=basis)
    return _fit_two(window, np.exp(basis, out=basis), grid)


def _fit_inv_lin(window: _Window, grid: FloatArray) -> tuple[FloatArray, FloatArray]:
    basis = _scratch(1, grid.shape + window.x.shape[1:])[0]
    np.add(window.x[:, None, :], grid[:, :, None], out=basis)
    return _fit_two(window, np.divide(1.0, basis, out=basis), grid)


def _fit_two(window: _Window, basis: FloatArray, grid: FloatArray
             ) -> tuple[FloatArray, FloatArray]:
    """``y = c + s * basis`` for every grid value; keep the best decreasing one.

    Closed-form 2x2 normal equations; the residual sum of squares at the
    solution is ``y'Wy - beta' X'Wy``, so no residual array is needed.
    ``basis`` is overwritten.
    """
    x, w, s0, ty, syy = window.x, window.w, window.s0, window.ty, window.syy
    # Sums over the window as batched products, one per (J, G, W) array.
    sums = basis @ window.weights  # (J, G, 2)
    s1, tby = sums[..., 0], sums[..., 1]
    s2 = (np.multiply(basis, basis, out=basis) @ w[:, :, None])[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        det = s2 * s0 - s1 * s1
        slope = (s0 * tby - s1 * ty) / det
        icpt = (s2 * ty - s1 * tby) / det
        sse = np.maximum(syy - slope * tby - icpt * ty, 0.0)
    ok = (det > 1e-12 * np.maximum(s2 * s0, 1e-300)) & (slope > 0) & np.isfinite(sse)
    sse = np.where(ok, sse, np.inf)
    best = np.argmin(sse, axis=1)
    rows = np.arange(x.shape[0])
    params = np.zeros((x.shape[0], 4))
    params[:, 0] = slope[rows, best]
    params[:, 1] = icpt[rows, best]
    params[:, 2] = grid[rows, best]
    return params, sse[rows, best]


def _fit_inv_quad(window: _Window, grid: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``y = d + 1/q(x)`` for every floor ``d``: ``1/(y - d)`` is fitted as a
    quadratic with weights ``w (y - d)^4`` (a residual ``e`` in ``1/(y-d)`` is a
    loss residual of about ``e (y - d)^2``), then scored in loss units.

    Two (J, G, W) arrays of work memory (:func:`_scratch`), each
    overwritten as the step before is done with it."""
    x, y, w, powers = window.x, window.y, window.w, window.powers
    floors = np.minimum(grid, -1e-6)  # strictly below the lowest loss
    v, z = _scratch(2, grid.shape + x.shape[1:])
    np.subtract(y[:, None, :], floors[:, :, None], out=v)  # (J, G, W), > 0: the lift
    np.divide(1.0, v, out=z)
    np.multiply(v, v, out=v)
    np.multiply(v, v, out=v)
    np.multiply(v, w[:, None, :], out=v)  # w lift^4
    # The weighted moments of x^0..x^4 for every grid value as one batched
    # product: elementwise powers of (J, G, W) arrays cost twice as much.
    m = v @ powers  # (J, G, 5)
    mat = m[..., _HANKEL]
    rhs = np.multiply(z, v, out=z) @ powers[..., :3]
    # A tiny ridge keeps the batched solve defined for degenerate windows.
    ridge = 1e-10 * (mat[..., 0, 0] + mat[..., 2, 2] + 1e-300)
    mat[..., _DIAGONAL, _DIAGONAL] += ridge[..., None]
    q = _solve3(mat, rhs)  # (J, G, 3)
    qx = np.matmul(q, powers[..., :3].transpose(0, 2, 1), out=v)  # (J, G, W)
    used = w[:, None, :] > 0
    positive = ((qx > 0) | ~used).all(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        fitted = np.add(np.divide(1.0, qx, out=qx), floors[:, :, None], out=qx)
        residual = np.subtract(y[:, None, :], fitted, out=fitted)
        sse = (np.square(residual, out=residual) @ w[:, :, None])[..., 0]
    # q must keep growing beyond the window (q2 >= 0) and grow at its end.
    rising = (q[..., 2] >= 0) & (q[..., 1] + 2 * q[..., 2] > 0)
    ok = positive & rising & np.isfinite(sse)
    sse = np.where(ok, sse, np.inf)
    best = np.argmin(sse, axis=1)
    rows = np.arange(x.shape[0])
    params = np.zeros((x.shape[0], 4))
    params[:, :3] = q[rows, best]
    params[:, 3] = floors[rows, best]
    return params, sse[rows, best]


def _solve3(mat: FloatArray, rhs: FloatArray) -> FloatArray:
    """``mat^-1 rhs`` for stacks of symmetric 3x3 systems, by the adjugate.

    ``np.linalg.solve`` calls LAPACK once per system: for thousands of 3x3
    systems that call, not the arithmetic, is the cost. The six distinct
    cofactors are one gather-multiply-subtract, so a batch of one job (a
    simulated decision refits about one) costs a dozen numpy calls too."""
    m = mat.reshape(mat.shape[:-2] + (9,))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        adj = m[..., _COFACTORS[0]] * m[..., _COFACTORS[1]] \
            - m[..., _COFACTORS[2]] * m[..., _COFACTORS[3]]
        det = (m[..., :3] * adj[..., :3]).sum(-1)
        return (adj[..., _SYMMETRIC] * rhs[..., None, :]).sum(-1) / det[..., None]
