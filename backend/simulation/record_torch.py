"""Record deep-learning loss curves: the PyTorch trainers' preset of ``slaq record-trace``.

Same measurements as :mod:`backend.simulation.record` (per-iteration loss and
seconds, the stop rule a live job uses, per-chunk checkpoint overhead plus
dispatch latency), driving the trainers through the trainer contract. A
chunk's checkpoint overhead here is what a worker pays around a chunk:
``state()``, building a fresh trainer, and ``restore()``.

Needs the ``torch`` extra; recorded on the CPU unless the machine has a GPU
(the trace's description says which).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from backend.scheduling.trace import Trace, TraceCurve
from backend.simulation.record import DISPATCH_SECONDS, RunSpec
from workers.stopping import StopRule, check

TEXT_DATASET = "python_docs"


@dataclass(frozen=True)
class TorchRunSpec(RunSpec):
    """One PyTorch job to record, named like a portal job spec."""

    max_iterations: int = 1000
    eval_every: int = 0
    """Held-out evaluation every this many iterations (and at the end), on the
    live split (:func:`workers.trainers.data.holdout`); 0 trains on every row."""
    # Minibatch losses are noisy enough that a relative-change test stops runs
    # by chance; deep-learning runs get an iteration budget instead.
    tolerance: float | None = None


_SYNTH = {"n_samples": 5000, "n_features": 20, "n_classes": 4}

TORCH_RUNS: tuple[TorchRunSpec, ...] = (
    TorchRunSpec("torch_mlp", "digits", max_iterations=1500),
    TorchRunSpec("torch_mlp", "digits", {"learning_rate": 0.01, "hidden_units": 64}),
    TorchRunSpec("torch_mlp", "breast_cancer", {"learning_rate": 0.0003}, seed=1),
    TorchRunSpec("torch_mlp", "synthetic_classification", {"batch_size": 256}, _SYNTH,
                 max_iterations=1500),
    TorchRunSpec("torch_cnn", "digits", max_iterations=1500),
    TorchRunSpec("torch_cnn", "digits", {"learning_rate": 0.003, "channels": 8}, seed=1),
    TorchRunSpec("torch_cnn", "wine", {"learning_rate": 0.0003}, max_iterations=800),
    TorchRunSpec("torch_cnn", "synthetic_classification", {"batch_size": 128}, _SYNTH,
                 seed=2),
    TorchRunSpec("char_transformer", TEXT_DATASET, max_iterations=800),
    TorchRunSpec("char_transformer", TEXT_DATASET,
                 {"d_model": 32, "context": 32, "learning_rate": 0.001}, seed=1,
                 max_iterations=800),
    TorchRunSpec("char_transformer", TEXT_DATASET,
                 {"d_model": 96, "n_heads": 4, "learning_rate": 0.001}, seed=2,
                 max_iterations=600),
)
"""The torch trace: MLP and CNN on image and tabular data, transformer LMs on text."""


def _build(spec: TorchRunSpec) -> Any:
    from workers.datasets import load_dataset
    from workers.datasets.text import load_text
    from workers.trainers.contract import TrainingData
    from workers.trainers.deep import TRAINERS

    trainer_class = next(t for t in TRAINERS if t.name == spec.algorithm)
    if "text" in trainer_class.tasks:
        train, validation = load_text(spec.dataset)
        data = TrainingData(name=spec.dataset, task="text", text=train,
                            validation_text=validation)
    elif spec.eval_every > 0:
        from workers.trainers.data import holdout

        data = holdout(load_dataset(spec.dataset, spec.dataset_params))
    else:
        table = load_dataset(spec.dataset, spec.dataset_params)
        data = TrainingData(name=spec.dataset, task="classification", train=table)
    params = trainer_class.Params.model_validate(dict(spec.params))
    return lambda: trainer_class(params, data, spec.seed)


def record_torch_curve(spec: TorchRunSpec, *, overhead_samples: int = 5) -> TraceCurve:
    """Run ``spec`` to the stop rule's verdict and time every iteration."""
    make = _build(spec)
    trainer = make()
    rule = StopRule(max_iterations=spec.max_iterations, tolerance=spec.tolerance,
                    window=spec.window)
    sample_every = max(spec.max_iterations // overhead_samples, 1)
    losses: list[float] = []
    seconds: list[float] = []
    overheads: list[float] = []
    evaluations: dict[str, list[tuple[int, float]]] = {}
    verdict = None
    while verdict is None:
        started = time.perf_counter()
        loss = float(trainer.step(1)[0]["loss"])
        losses.append(loss)
        verdict = check(rule, len(losses), losses[-rule.history_length:], losses[0])
        if spec.eval_every > 0 and (len(losses) % spec.eval_every == 0 or verdict is not None):
            # Timed with the iteration: a live chunk pays for its evaluations.
            for name, value in trainer.evaluate().items():
                evaluations.setdefault(name, []).append((len(losses), float(value)))
        seconds.append(time.perf_counter() - started)
        if len(losses) % sample_every == 1:
            started = time.perf_counter()
            make().restore(trainer.state())
            overheads.append(time.perf_counter() - started)
    if verdict.status != "completed":
        raise RuntimeError(f"{spec.curve_id} failed: {verdict.reason}")
    return TraceCurve(
        id=spec.curve_id, losses=tuple(losses), seconds=tuple(seconds),
        algorithm=spec.algorithm, dataset=spec.dataset, params=dict(spec.params),
        dataset_params=dict(spec.dataset_params), seed=spec.seed,
        max_iterations=spec.max_iterations, stop_reason=verdict.reason,
        chunk_overhead_seconds=DISPATCH_SECONDS + statistics.median(overheads),
        evaluations={name: tuple(points) for name, points in evaluations.items()},
    )


def record_torch_trace(runs: Sequence[TorchRunSpec] = TORCH_RUNS, progress: Any = None
                       ) -> Trace:
    device = "GPU" if torch.cuda.is_available() else "CPU"
    curves = []
    for spec in runs:
        curve = record_torch_curve(spec)
        if progress is not None:
            progress(curve)
        curves.append(curve)
    return Trace(curves=tuple(curves),
                 description=f"torch runs of the PyTorch trainers (torch {torch.__version__}, "
                 f"{device}, {torch.get_num_threads()} thread(s))")
