"""Shared machinery for models trained by mini-batch SGD with heavy-ball momentum.

A subclass supplies the initial weights, the data-term gradient and the data
term of the loss; this class owns sampling, the L2 penalty, the momentum
update, evaluation and checkpointing, so every SGD model checkpoints alike.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import Field

from workers.trainers.builtin.base import (
    NumpyTrainer,
    check_compatible,
    pack_state,
    rng_state,
    unpack_state,
)
from workers.trainers.builtin.sampling import BatchSampler, evaluation_indices
from workers.trainers.contract import Metrics, TrainerParams, TrainingData

if TYPE_CHECKING:
    from workers.datasets import Dataset

Weights = dict[str, np.ndarray]
LOG_SCALE: dict[str, Any] = {"log_scale": True}


def learning_rate_field(default: float) -> Any:
    return Field(default, ge=1e-6, le=10.0, description="Step size of each mini-batch update.",
                 json_schema_extra=LOG_SCALE)


def batch_size_field(default: int) -> Any:
    return Field(default, ge=1, le=100_000, json_schema_extra=LOG_SCALE,
                 description="Rows per mini-batch update (capped at the dataset size).")


def l2_field(default: float) -> Any:
    return Field(default, ge=0.0, le=10.0, description="L2 penalty on the weights (not biases).")


def momentum_field(default: float) -> Any:
    return Field(default, ge=0.0, le=0.99, description="Heavy-ball momentum.")


class SGDParams(TrainerParams):
    """The optimiser parameters every SGD model takes; subclasses set per-model defaults."""

    learning_rate: float = learning_rate_field(0.01)
    batch_size: int = batch_size_field(64)
    l2: float = l2_field(1e-4)
    momentum: float = momentum_field(0.9)


class SGDTrainer(NumpyTrainer):
    """Mini-batch SGD with momentum on ``data_loss + l2/2 * ||weights||^2``.

    Parameters named with a leading ``W`` are penalised; biases (``b...``)
    are not, matching scikit-learn so objectives compare.
    """

    kind: ClassVar[str]

    def __init__(self, params: TrainerParams, data: TrainingData, seed: int) -> None:
        super().__init__(params, data, seed)
        dataset = self.dataset
        self.learning_rate = float(self.hp["learning_rate"])
        self.momentum = float(self.hp["momentum"])
        self.l2 = float(self.hp["l2"])
        self.rng = np.random.default_rng(self.seed)
        self.weights: Weights = self.init_weights(self.rng)
        self.velocity: Weights = {k: np.zeros_like(v) for k, v in self.weights.items()}
        self.sampler = BatchSampler(dataset.n_samples, int(self.hp["batch_size"]), self.rng)
        rows = evaluation_indices(dataset.n_samples)
        self._X_eval = dataset.X if rows is None else dataset.X[rows]
        self._y_eval = self._targets() if rows is None else self._targets()[rows]

    def _targets(self, dataset: Dataset | None = None) -> np.ndarray:
        y = (dataset or self.dataset).y
        assert y is not None  # guaranteed by supports()
        return y

    @abstractmethod
    def init_weights(self, rng: np.random.Generator) -> Weights:
        """Fresh weights drawn from ``rng`` (the only randomness besides sampling)."""

    @abstractmethod
    def data_gradients(self, X: np.ndarray, y: np.ndarray) -> Weights:
        """Gradient of the mean data loss over the batch, one array per weight."""

    @abstractmethod
    def data_loss(self, X: np.ndarray, y: np.ndarray) -> float:
        """Mean data loss (without the L2 term)."""

    def objective(self, X: np.ndarray, y: np.ndarray) -> float:
        """The reported loss: data loss plus ``l2/2`` times the squared weight norm."""
        penalty = sum(float(np.sum(w * w)) for k, w in self.weights.items() if k.startswith("W"))
        return self.data_loss(X, y) + 0.5 * self.l2 * penalty

    def held_out(self, validation: Dataset) -> Metrics:
        X, y = validation.X, self._targets(validation)
        metrics = {"val_loss": self.objective(X, y)}
        scores = self.scores(X)
        if scores is not None:
            metrics["val_accuracy"] = float(np.mean(scores.argmax(axis=1) == y))
        return metrics

    def scores(self, X: np.ndarray) -> np.ndarray | None:
        """Per-class scores for accuracy (classifiers); None for regression."""
        return None

    def losses(self, n: int) -> list[float]:
        X, y = self.dataset.X, self._targets()
        losses: list[float] = []
        # A diverging run overflows to inf/NaN; the caller detects that and
        # fails the job, so numpy's warnings would only be noise in worker logs.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            for _ in range(n):
                rows = self.sampler.next()
                grads = self.data_gradients(X[rows], y[rows])
                for key, weight in self.weights.items():
                    grad = grads[key]
                    if self.l2 and key.startswith("W"):
                        grad = grad + self.l2 * weight
                    velocity = self.velocity[key]
                    velocity *= self.momentum
                    velocity -= self.learning_rate * grad
                    weight += velocity
                self.iteration += 1
                losses.append(self.objective(self._X_eval, self._y_eval))
        return losses

    def state(self) -> bytes:
        arrays = {f"w_{k}": v for k, v in self.weights.items()}
        arrays.update({f"v_{k}": v for k, v in self.velocity.items()})
        meta = {
            "algorithm": self.kind,
            "data_shape": [self.dataset.n_samples, self.dataset.n_features],
            "iteration": self.iteration,
            "rng": rng_state(self.rng),
            "sampler": self.sampler.state(),
        }
        return pack_state(arrays, meta)

    def restore(self, blob: bytes) -> None:
        arrays, meta = unpack_state(blob)
        check_compatible(meta, self.kind, self.dataset)
        trainer = self
        for prefix, target in (("w_", trainer.weights), ("v_", trainer.velocity)):
            for key, fresh in target.items():
                saved = arrays[prefix + key]
                if saved.shape != fresh.shape:
                    raise ValueError(
                        f"checkpoint weight {key} has shape {saved.shape}, "
                        f"these parameters need {fresh.shape}"
                    )
                target[key] = np.array(saved, dtype=np.float64)
        trainer.iteration = int(meta["iteration"])
        # The sampler draws from the same generator object, so setting its
        # state in place (not swapping the object) keeps the two linked.
        trainer.rng.bit_generator.state = dict(meta["rng"])
        trainer.sampler.restore(meta["sampler"])
