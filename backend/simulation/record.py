"""Record loss-curve traces by running the portal's own algorithms to convergence.

Each run uses the same trainers and stopping rule (:mod:`workers.stopping`)
as a live job, times every iteration, and measures the per-chunk overhead a
live chunk pays: a checkpoint save plus a restore (what a worker does around
every chunk) and a fixed dispatch latency for the scheduler -> Celery -> worker
round trip, which a single process cannot measure.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backend.scheduling.trace import Trace, TraceCurve
from workers.datasets import load_dataset
from workers.iterations import Iterations, run_iterations
from workers.stopping import StopRule
from workers.trainers.registry import make_trainer, restore_trainer

DISPATCH_SECONDS = 0.02
"""Assumed scheduler->broker->worker->report latency per chunk (Redis on localhost)."""


@dataclass(frozen=True)
class RunSpec:
    """One job to record, named like a portal job spec."""

    algorithm: str
    dataset: str
    params: Mapping[str, Any] = field(default_factory=dict)
    dataset_params: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    max_iterations: int = 4000
    tolerance: float | None = 1e-4
    window: int = 10

    @property
    def curve_id(self) -> str:
        extras = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.algorithm}/{self.dataset}" + (f"/{extras}" if extras else "") + \
            f"/s{self.seed}"


_BIG_CLS = {"n_samples": 30000, "n_features": 60, "n_classes": 4}
_BIG_BIN = {"n_samples": 30000, "n_features": 40, "n_classes": 2, "seed": 1}
_BIG_REG = {"n_samples": 30000, "n_features": 150, "noise": 10.0}
_BIG_BLOBS = {"n_samples": 40000, "n_features": 16, "centers": 12}

STANDARD_RUNS: tuple[RunSpec, ...] = (
    RunSpec("logistic_regression", "digits", {"batch_size": 256}),
    RunSpec("logistic_regression", "digits", {"learning_rate": 0.01, "batch_size": 256}),
    RunSpec("logistic_regression", "synthetic_classification",
            {"batch_size": 1024, "learning_rate": 0.05}, _BIG_CLS),
    RunSpec("logistic_regression", "synthetic_classification",
            {"batch_size": 512, "learning_rate": 0.005}, _BIG_BIN, seed=1),
    RunSpec("logistic_regression", "breast_cancer", {"batch_size": 128, "learning_rate": 0.01}),
    RunSpec("linear_svm", "digits", {"batch_size": 512}),
    RunSpec("linear_svm", "synthetic_classification", {"batch_size": 2048}, _BIG_CLS, seed=2),
    RunSpec("linear_svm", "synthetic_classification",
            {"batch_size": 1024, "learning_rate": 0.001}, _BIG_BIN),
    RunSpec("mlp", "digits", {"hidden_units": 256, "batch_size": 256}),
    RunSpec("mlp", "digits", {"hidden_units": 64, "batch_size": 128, "learning_rate": 0.01},
            max_iterations=2500),
    RunSpec("mlp", "synthetic_classification",
            {"hidden_units": 128, "batch_size": 512, "learning_rate": 0.02}, _BIG_CLS),
    RunSpec("mlp", "synthetic_classification",
            {"hidden_units": 64, "hidden_layers": 2, "batch_size": 256}, _BIG_BIN, seed=3),
    RunSpec("mlp", "breast_cancer", {"hidden_units": 128, "batch_size": 256,
                                     "learning_rate": 0.005}),
    RunSpec("mlp", "wine", {"hidden_units": 256, "batch_size": 64, "learning_rate": 0.002}),
    RunSpec("kmeans", "blobs", {"n_clusters": 12, "batch_size": 4096}, _BIG_BLOBS,
            tolerance=1e-5, window=20),
    RunSpec("kmeans", "blobs", {"n_clusters": 24, "batch_size": 2048}, _BIG_BLOBS, seed=1,
            tolerance=1e-5, window=20),
    RunSpec("kmeans", "digits", {"n_clusters": 10, "batch_size": 512}, tolerance=1e-5,
            window=20),
    RunSpec("linear_regression", "synthetic_regression",
            {"batch_size": 2048, "learning_rate": 0.002}, _BIG_REG),
    RunSpec("linear_regression", "synthetic_regression",
            {"batch_size": 1024, "learning_rate": 0.0005}, _BIG_REG, seed=1),
    RunSpec("linear_regression", "diabetes", {"batch_size": 64, "learning_rate": 0.0005},
            tolerance=1e-5, window=20),
    RunSpec("logistic_regression", "iris", {"learning_rate": 0.005, "batch_size": 32},
            max_iterations=2000),
    RunSpec("linear_svm", "breast_cancer", {"learning_rate": 0.001, "batch_size": 256}),
    RunSpec("mlp", "iris", {"hidden_units": 512, "learning_rate": 0.005, "batch_size": 64},
            max_iterations=2000),
    RunSpec("kmeans", "wine", {"n_clusters": 6, "batch_size": 64}, tolerance=1e-5, window=20),
)
"""The standard trace: five algorithms on eight datasets, fast and slow learners."""


def record_curve(spec: RunSpec, *, overhead_samples: int = 5) -> TraceCurve:
    """Run ``spec`` to convergence (or its max iterations) and time it."""
    dataset = load_dataset(spec.dataset, spec.dataset_params)
    trainer = make_trainer(spec.algorithm, dataset, spec.params, spec.seed)
    rule = StopRule(max_iterations=spec.max_iterations, tolerance=spec.tolerance,
                    window=spec.window)
    overheads: list[float] = []
    sample_every = max(spec.max_iterations // overhead_samples, 1)

    def sample_overhead(run: Iterations) -> bool:
        if run.iteration % sample_every == 1:
            overheads.append(_checkpoint_seconds(trainer, spec, dataset))
        return True

    # The stop rule caps the run at max_iterations, so that is the whole budget.
    run = run_iterations(trainer, rule, spec.max_iterations, sample_overhead)
    if run.error is not None:
        raise run.error
    if run.verdict is None:
        raise RuntimeError(f"{spec.curve_id} stopped without a verdict")
    reason = run.verdict.reason
    if run.verdict.status != "completed":
        raise RuntimeError(f"{spec.curve_id} failed: {reason}")
    return TraceCurve(
        id=spec.curve_id, losses=tuple(p[1] for p in run.points),
        seconds=tuple(p[2] for p in run.points),
        algorithm=spec.algorithm, dataset=spec.dataset, params=dict(spec.params),
        dataset_params=dict(spec.dataset_params),
        seed=spec.seed, max_iterations=spec.max_iterations, stop_reason=reason,
        chunk_overhead_seconds=DISPATCH_SECONDS + statistics.median(overheads),
    )


def _checkpoint_seconds(trainer: Any, spec: RunSpec, dataset: Any) -> float:
    """Seconds to save and restore the trainer, as a worker does around a chunk."""
    started = time.perf_counter()
    data = trainer.state()
    restore_trainer(spec.algorithm, data, dataset, spec.params, spec.seed)
    return time.perf_counter() - started


def record_trace(runs: Sequence[RunSpec], description: str = "",
                 progress: Any = None) -> Trace:
    curves = []
    for spec in runs:
        curve = record_curve(spec)
        if progress is not None:
            progress(curve)
        curves.append(curve)
    return Trace(curves=tuple(curves), description=description)

SMALL_RUNS: tuple[RunSpec, ...] = (
    RunSpec("logistic_regression", "breast_cancer", max_iterations=600),
    RunSpec("linear_svm", "synthetic_classification", seed=2, max_iterations=600),
    RunSpec("kmeans", "blobs", max_iterations=600),
    RunSpec("linear_regression", "diabetes", {"learning_rate": 0.001}, max_iterations=600),
    RunSpec("mlp", "synthetic_classification", {"hidden_units": 32}, max_iterations=600),
    RunSpec("logistic_regression", "wine", {"learning_rate": 0.02}, max_iterations=600),
)
"""The golden-test trace: six quick runs (under a second each), at most 600 iterations."""
