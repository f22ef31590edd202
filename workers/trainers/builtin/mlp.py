"""Multi-layer perceptron classifier (1-2 hidden layers, softmax output), SGD-trained.

Loss = mean cross-entropy + l2/2 * sum of squared weights (biases excluded).
Weights are drawn from the job's seeded RNG: He initialisation for ReLU
(keeps activation variance ~constant through rectifiers) and Glorot/Xavier for
tanh (keeps it ~constant through a symmetric saturating unit).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from workers.trainers.builtin.losses import cross_entropy, cross_entropy_grad
from workers.trainers.builtin.sgd import (
    LOG_SCALE,
    SGDParams,
    SGDTrainer,
    Weights,
    learning_rate_field,
)


class MLPParams(SGDParams):
    hidden_units: int = Field(64, ge=1, le=1024, description="Units per hidden layer.",
                              json_schema_extra=LOG_SCALE)
    hidden_layers: int = Field(1, ge=1, le=2, description="Number of hidden layers.")
    activation: Literal["relu", "tanh"] = Field("relu", description="Hidden-unit non-linearity.")
    learning_rate: float = learning_rate_field(0.05)


class MLPTrainer(SGDTrainer):
    name = kind = "mlp"
    title = "Neural network (MLP)"
    description = "1-2 hidden-layer perceptron with softmax output; loss = cross-entropy + l2."
    tasks = ("classification",)
    Params = MLPParams

    @property
    def _n_hidden(self) -> int:
        return int(self.hp["hidden_layers"])

    def init_weights(self, rng: np.random.Generator) -> Weights:
        units = int(self.hp["hidden_units"])
        sizes = [self.dataset.n_features] + [units] * self._n_hidden + [self.dataset.n_classes]
        relu = self.hp["activation"] == "relu"
        weights: Weights = {}
        for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            hidden = layer < self._n_hidden
            scale = np.sqrt(2.0 / fan_in) if hidden and relu else np.sqrt(2.0 / (fan_in + fan_out))
            weights[f"W{layer}"] = rng.normal(0.0, scale, size=(fan_in, fan_out))
            weights[f"b{layer}"] = np.zeros(fan_out)
        return weights

    def _activate(self, z: np.ndarray) -> np.ndarray:
        return np.maximum(z, 0.0) if self.hp["activation"] == "relu" else np.tanh(z)

    def _forward(self, X: np.ndarray) -> list[np.ndarray]:
        """Activations of every layer: [X, h1, (h2,) logits]."""
        outputs = [X]
        for layer in range(self._n_hidden + 1):
            z = outputs[-1] @ self.weights[f"W{layer}"] + self.weights[f"b{layer}"]
            outputs.append(self._activate(z) if layer < self._n_hidden else z)
        return outputs

    def scores(self, X: np.ndarray) -> np.ndarray:
        return self._forward(X)[-1]

    def data_loss(self, X: np.ndarray, y: np.ndarray) -> float:
        return cross_entropy(self._forward(X)[-1], y)

    def data_gradients(self, X: np.ndarray, y: np.ndarray) -> Weights:
        outputs = self._forward(X)
        delta = cross_entropy_grad(outputs[-1], y)
        grads: Weights = {}
        for layer in range(self._n_hidden, -1, -1):
            grads[f"W{layer}"] = outputs[layer].T @ delta
            grads[f"b{layer}"] = delta.sum(axis=0)
            if layer:
                back = delta @ self.weights[f"W{layer}"].T
                h = outputs[layer]
                # Derivatives written in terms of the activation itself:
                # relu' = [h > 0], tanh' = 1 - h^2.
                delta = (
                    back * (h > 0) if self.hp["activation"] == "relu" else back * (1 - h * h)
                )
        return grads
