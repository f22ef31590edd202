"""Linear least-squares regression trained by mini-batch SGD.

Loss = MSE / 2 + l2/2 * ||w||^2, where MSE is the mean squared error on the
(standardised) targets. Halving the MSE keeps the gradient ``X^T r / n``
simple; the minimiser is sklearn's ``Ridge(alpha=l2 * n)`` (and plain
``LinearRegression`` when l2 = 0). With standardised targets, MSE = 1 - R^2.
"""

from __future__ import annotations

import numpy as np

from workers.trainers.builtin.sgd import SGDParams, SGDTrainer, Weights, l2_field


class LinearRegressionParams(SGDParams):
    l2: float = l2_field(0.0)


class LinearRegressionTrainer(SGDTrainer):
    name = kind = "linear_regression"
    title = "Linear regression"
    description = "Least squares by mini-batch SGD; loss = MSE/2 + l2/2 ||w||^2."
    tasks = ("regression",)
    Params = LinearRegressionParams

    def init_weights(self, rng: np.random.Generator) -> Weights:
        return {"W": np.zeros(self.dataset.n_features), "b": np.zeros(1)}

    def _residuals(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        return X @ self.weights["W"] + self.weights["b"] - y

    def data_loss(self, X: np.ndarray, y: np.ndarray) -> float:
        residuals = self._residuals(X, y)
        return 0.5 * float(np.mean(residuals * residuals))

    def data_gradients(self, X: np.ndarray, y: np.ndarray) -> Weights:
        residuals = self._residuals(X, y) / y.shape[0]
        return {"W": X.T @ residuals, "b": np.array([residuals.sum()])}
