"""Registry of training algorithms and helpers to create or restore a trainer.

Modules here import ``Dataset`` only for type checking: ``workers.datasets``
imports ``ParamSpec`` from this package, and a runtime import back would be
circular.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workers.algorithms import kmeans, linear_regression, logistic, mlp, svm
from workers.algorithms.base import Trainer
from workers.algorithms.params import ParamSpec, ParamValue, fill_params

if TYPE_CHECKING:
    from workers.datasets import Dataset

__all__ = [
    "ALGORITHMS",
    "AlgorithmInfo",
    "ParamSpec",
    "Trainer",
    "algorithm_params",
    "make_trainer",
    "restore_trainer",
]


@dataclass(frozen=True)
class AlgorithmInfo:
    """A catalogue entry: what the algorithm does, its tasks and hyper-parameters."""

    name: str
    title: str
    description: str
    tasks: tuple[str, ...]
    params: tuple[ParamSpec, ...]
    trainer_cls: type[Trainer]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "tasks": list(self.tasks),
            "params": [p.to_json() for p in self.params],
        }


ALGORITHMS: dict[str, AlgorithmInfo] = {
    info.name: info
    for info in (
        AlgorithmInfo(
            "logistic_regression",
            "Logistic regression",
            "Softmax regression by mini-batch SGD; loss = mean cross-entropy + l2/2 ||W||^2.",
            ("classification",),
            logistic.PARAMS,
            logistic.LogisticRegressionTrainer,
        ),
        AlgorithmInfo(
            "linear_svm",
            "Linear SVM",
            "Hinge loss (one-vs-rest for >2 classes) + l2/2 ||W||^2, mini-batch SGD.",
            ("classification",),
            svm.PARAMS,
            svm.LinearSVMTrainer,
        ),
        AlgorithmInfo(
            "mlp",
            "Neural network (MLP)",
            "1-2 hidden-layer perceptron with softmax output; loss = cross-entropy + l2.",
            ("classification",),
            mlp.PARAMS,
            mlp.MLPTrainer,
        ),
        AlgorithmInfo(
            "kmeans",
            "Mini-batch k-means",
            "Sculley's mini-batch k-means; loss = inertia (sum of squared distances).",
            ("clustering",),
            kmeans.PARAMS,
            kmeans.MiniBatchKMeansTrainer,
        ),
        AlgorithmInfo(
            "linear_regression",
            "Linear regression",
            "Least squares by mini-batch SGD; loss = MSE/2 + l2/2 ||w||^2.",
            ("regression",),
            linear_regression.PARAMS,
            linear_regression.LinearRegressionTrainer,
        ),
    )
}


def _info(algorithm: str) -> AlgorithmInfo:
    info = ALGORITHMS.get(algorithm)
    if info is None:
        raise KeyError(
            f"unknown algorithm {algorithm!r}; known algorithms: {', '.join(sorted(ALGORITHMS))}"
        )
    return info


def algorithm_params(algorithm: str, params: Mapping[str, Any] | None) -> dict[str, ParamValue]:
    """Validated hyper-parameters with defaults filled (also usable at submit time)."""
    return fill_params(_info(algorithm).params, params, f"algorithm {algorithm}")


def _check_task(info: AlgorithmInfo, dataset: Dataset) -> None:
    if not any(dataset.supports(task) for task in info.tasks):
        raise ValueError(
            f"{info.name} ({'/'.join(info.tasks)}) cannot train on dataset "
            f"{dataset.name!r} ({dataset.task})"
        )


def make_trainer(
    algorithm: str, dataset: Dataset, params: Mapping[str, Any] | None, seed: int
) -> Trainer:
    """A fresh trainer at iteration 0."""
    info = _info(algorithm)
    _check_task(info, dataset)
    return info.trainer_cls(dataset, algorithm_params(algorithm, params), seed)


def restore_trainer(
    algorithm: str, data: bytes, dataset: Dataset, params: Mapping[str, Any] | None, seed: int
) -> Trainer:
    """A trainer rebuilt from a checkpoint taken with ``Trainer.state_bytes()``."""
    info = _info(algorithm)
    _check_task(info, dataset)
    return info.trainer_cls.from_bytes(data, dataset, algorithm_params(algorithm, params), seed)
