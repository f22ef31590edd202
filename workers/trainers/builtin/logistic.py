"""Multinomial logistic (softmax) regression trained by mini-batch SGD.

Loss = mean cross-entropy + l2/2 * ||W||^2 (bias not penalised), the objective
scikit-learn's ``LogisticRegression`` minimises with ``C = 1 / (l2 * n)``.
For two classes the model has one logit column with class 0's logit pinned
at zero, i.e. ordinary binary logistic regression; a full two-column softmax
would halve the effective penalty and no longer match sklearn's binary model.
"""

from __future__ import annotations

import numpy as np

from workers.trainers.builtin.losses import cross_entropy, cross_entropy_grad
from workers.trainers.builtin.sgd import SGDParams, SGDTrainer, Weights, learning_rate_field


class LogisticRegressionParams(SGDParams):
    learning_rate: float = learning_rate_field(0.1)


class LogisticRegressionTrainer(SGDTrainer):
    name = kind = "logistic_regression"
    title = "Logistic regression"
    description = "Softmax regression by mini-batch SGD; loss = mean cross-entropy + l2/2 ||W||^2."
    tasks = ("classification",)
    Params = LogisticRegressionParams

    @property
    def _binary(self) -> bool:
        return self.dataset.n_classes == 2

    def init_weights(self, rng: np.random.Generator) -> Weights:
        # The objective is convex, so zero initialisation is the canonical
        # start and leaves the RNG for sampling alone.
        outputs = 1 if self._binary else self.dataset.n_classes
        return {
            "W": np.zeros((self.dataset.n_features, outputs)),
            "b": np.zeros(outputs),
        }

    def _logits(self, X: np.ndarray) -> np.ndarray:
        z = X @ self.weights["W"] + self.weights["b"]
        if self._binary:
            return np.hstack([np.zeros((z.shape[0], 1)), z])
        return z

    def data_loss(self, X: np.ndarray, y: np.ndarray) -> float:
        return cross_entropy(self._logits(X), y)

    def scores(self, X: np.ndarray) -> np.ndarray:
        return self._logits(X)

    def data_gradients(self, X: np.ndarray, y: np.ndarray) -> Weights:
        grad = cross_entropy_grad(self._logits(X), y)
        if self._binary:
            grad = grad[:, 1:]  # the pinned column has no parameters
        return {"W": X.T @ grad, "b": grad.sum(axis=0)}
