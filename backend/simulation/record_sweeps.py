"""Sweep traces: every configuration of a hyper-parameter sweep, recorded.

``slaq record-trace --preset sweep-numpy`` records the numpy MLP on digits
over learning rate x batch size; ``--preset sweep-torch`` the PyTorch MLP on
digits over learning rate x width; ``--preset sweep-cnn`` the PyTorch CNN on
digits over learning rate x width (channels); ``--preset sweep-transformer``
the character transformer on the bundled text over learning rate x depth.
Each configuration runs to its own stop rule, as a live job of the sweep
would. The torch sweeps evaluate on held-out data as often as a live job does
by default, and are sized so that each records in minutes on one CPU thread. The sweep benchmark
(``tests/bench/sweeps.py``) replays a trace as one experiment next to
background jobs.

A configuration that fails (a learning rate that diverges to NaN) would fail
live too and take no further slot time; it is left out of the trace, and the
recording says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import product
from typing import Any

from backend.core.models import Job
from backend.scheduling.trace import Trace, TraceCurve
from backend.simulation.record import RunSpec, record_curve

# The fastest rates diverge at small batches (left out, as failed jobs); the
# rest is at least 30 configurations.
NUMPY_RATES = (0.0003, 0.001, 0.003, 0.01, 0.03, 0.06, 0.1)
NUMPY_BATCHES = (16, 32, 64, 128, 256)
TORCH_RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
TORCH_WIDTHS = (16, 32, 64, 128, 256)
CNN_RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
CNN_CHANNELS = (4, 8, 16)
TRANSFORMER_RATES = (3e-4, 1e-3, 3e-3, 1e-2)
TRANSFORMER_LAYERS = (1, 2, 3, 4)

EVAL_EVERY = Job.model_fields["eval_every"].default

NUMPY_SWEEP: tuple[RunSpec, ...] = tuple(
    RunSpec("mlp", "digits", {"hidden_units": 128, "learning_rate": lr, "batch_size": b},
            max_iterations=3000)
    for lr, b in product(NUMPY_RATES, NUMPY_BATCHES))
"""35 configurations of the numpy MLP: learning rate x batch size."""


def torch_sweep() -> tuple[Any, ...]:
    """30 configurations of the PyTorch MLP: learning rate x width (needs torch),
    evaluated on held-out rows as often as a live job is by default."""
    from backend.simulation.record_torch import TorchRunSpec

    return tuple(TorchRunSpec("torch_mlp", "digits",
                              {"learning_rate": lr, "hidden_units": w, "hidden_layers": 2},
                              max_iterations=3000, eval_every=EVAL_EVERY)
                 for lr, w in product(TORCH_RATES, TORCH_WIDTHS))


def cnn_sweep() -> tuple[Any, ...]:
    """18 configurations of the PyTorch CNN on digits: learning rate x width
    (channels of the first convolution), judged on ``val_loss``."""
    from backend.simulation.record_torch import TorchRunSpec

    return tuple(TorchRunSpec("torch_cnn", "digits",
                              {"learning_rate": lr, "channels": c, "hidden_units": 32},
                              max_iterations=1000, eval_every=EVAL_EVERY)
                 for lr, c in product(CNN_RATES, CNN_CHANNELS))


def transformer_sweep() -> tuple[Any, ...]:
    """16 configurations of the character transformer on the bundled text:
    learning rate x depth (blocks), judged on ``val_loss``."""
    from backend.simulation.record_torch import TEXT_DATASET, TorchRunSpec

    return tuple(TorchRunSpec("char_transformer", TEXT_DATASET,
                              {"learning_rate": lr, "n_layers": n, "d_model": 32,
                               "n_heads": 2, "context": 32},
                              max_iterations=600, eval_every=EVAL_EVERY)
                 for lr, n in product(TRANSFORMER_RATES, TRANSFORMER_LAYERS))


def record_sweep(runs: Sequence[Any], record: Callable[[Any], TraceCurve], description: str,
                 progress: Callable[[str], None] = print) -> Trace:
    curves = []
    for spec in runs:
        try:
            curve = record(spec)
        except (RuntimeError, FloatingPointError) as exc:
            progress(f"{spec.curve_id}: left out ({exc})")
            continue
        progress(f"{curve.id}: {curve.iterations} iterations, {curve.total_seconds:.1f}s "
                 f"({curve.stop_reason})")
        curves.append(curve)
    return Trace(curves=tuple(curves), description=description)


def record_numpy_sweep(progress: Callable[[str], None] = print) -> Trace:
    return record_sweep(NUMPY_SWEEP, record_curve,
                        "sweep: numpy mlp on digits, learning rate x batch size", progress)


def _record_torch(runs: Sequence[Any], what: str, progress: Callable[[str], None]) -> Trace:
    import torch

    from backend.simulation.record_torch import record_torch_curve

    device = "GPU" if torch.cuda.is_available() else "CPU"
    return record_sweep(runs, record_torch_curve,
                        f"sweep: {what} (torch {torch.__version__}, {device}, "
                        f"{torch.get_num_threads()} thread(s))", progress)


def record_torch_sweep(progress: Callable[[str], None] = print) -> Trace:
    return _record_torch(torch_sweep(), "torch_mlp on digits, learning rate x width", progress)


def record_cnn_sweep(progress: Callable[[str], None] = print) -> Trace:
    return _record_torch(cnn_sweep(), "torch_cnn on digits, learning rate x channels",
                         progress)


def record_transformer_sweep(progress: Callable[[str], None] = print) -> Trace:
    return _record_torch(transformer_sweep(),
                         "char_transformer on python_docs, learning rate x depth", progress)


RECORDERS: dict[str, Callable[[Callable[[str], None]], Trace]] = {
    "sweep-numpy": record_numpy_sweep,
    "sweep-torch": record_torch_sweep,
    "sweep-cnn": record_cnn_sweep,
    "sweep-transformer": record_transformer_sweep,
}
"""Each sweep preset of ``slaq record-trace`` and what records it."""
