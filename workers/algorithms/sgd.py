"""Shared machinery for models trained by mini-batch SGD with heavy-ball momentum.

A subclass supplies the initial weights, the data-term gradient and the data
term of the loss; this class owns sampling, the L2 penalty, the momentum
update, evaluation and checkpointing, so every SGD model checkpoints alike.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from workers.algorithms.base import (
    Trainer,
    check_compatible,
    pack_state,
    rng_state,
    unpack_state,
)
from workers.algorithms.params import ParamSpec
from workers.algorithms.sampling import BatchSampler, evaluation_indices

if TYPE_CHECKING:
    from workers.datasets import Dataset

S = TypeVar("S", bound="SGDTrainer")

Weights = dict[str, np.ndarray]


def sgd_params(
    learning_rate: float, batch_size: int = 64, l2: float = 1e-4, momentum: float = 0.9
) -> tuple[ParamSpec, ...]:
    """The optimiser parameters every SGD model takes, with per-model defaults."""
    return (
        ParamSpec(
            "learning_rate",
            "float",
            learning_rate,
            1e-6,
            10.0,
            help="Step size of each mini-batch update.",
            log_scale=True,
        ),
        ParamSpec(
            "batch_size",
            "int",
            batch_size,
            1,
            100_000,
            help="Rows per mini-batch update (capped at the dataset size).",
            log_scale=True,
        ),
        ParamSpec("l2", "float", l2, 0.0, 10.0, help="L2 penalty on the weights (not biases)."),
        ParamSpec("momentum", "float", momentum, 0.0, 0.99, help="Heavy-ball momentum."),
    )


class SGDTrainer(Trainer):
    """Mini-batch SGD with momentum on ``data_loss + l2/2 * ||weights||^2``.

    Parameters named with a leading ``W`` are penalised; biases (``b...``)
    are not, matching scikit-learn so objectives compare.
    """

    kind: ClassVar[str]
    task: ClassVar[str]

    def __init__(self, dataset: Dataset, params: Mapping[str, Any], seed: int) -> None:
        super().__init__(dataset, params, seed)
        if not dataset.supports(self.task):
            raise ValueError(
                f"{self.kind} needs a {self.task} dataset; {dataset.name!r} is {dataset.task}"
            )
        self.learning_rate = float(self.params["learning_rate"])
        self.momentum = float(self.params["momentum"])
        self.l2 = float(self.params["l2"])
        self.rng = np.random.default_rng(self.seed)
        self.weights: Weights = self.init_weights(self.rng)
        self.velocity: Weights = {k: np.zeros_like(v) for k, v in self.weights.items()}
        self.sampler = BatchSampler(dataset.n_samples, int(self.params["batch_size"]), self.rng)
        rows = evaluation_indices(dataset.n_samples)
        self._X_eval = dataset.X if rows is None else dataset.X[rows]
        self._y_eval = self._targets() if rows is None else self._targets()[rows]

    def _targets(self) -> np.ndarray:
        assert self.dataset.y is not None  # guaranteed by supports()
        return self.dataset.y

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

    def step(self, n: int) -> list[float]:
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

    def state_bytes(self) -> bytes:
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

    @classmethod
    def from_bytes(
        cls: type[S], data: bytes, dataset: Dataset, params: Mapping[str, Any], seed: int
    ) -> S:
        arrays, meta = unpack_state(data)
        check_compatible(meta, cls.kind, dataset)
        trainer = cls(dataset, params, seed)
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
        return trainer
