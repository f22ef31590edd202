"""Linear support-vector machine (hinge loss + L2) trained by mini-batch SGD.

Binary problems use one weight vector with targets in {-1, +1}. With more
classes it is one-vs-rest: one binary SVM per class trained jointly, and the
loss is the mean over rows of the per-class hinge losses summed over classes,
plus l2/2 * ||W||^2. For two classes this is the standard soft-margin
objective, i.e. sklearn's ``LinearSVC(loss="hinge")`` with ``C = 1 / (l2 * n)``
except that the bias is not penalised here.
"""

from __future__ import annotations

import numpy as np

from workers.trainers.builtin.sgd import SGDParams, SGDTrainer, Weights, l2_field


class LinearSVMParams(SGDParams):
    l2: float = l2_field(1e-3)


class LinearSVMTrainer(SGDTrainer):
    name = kind = "linear_svm"
    title = "Linear SVM"
    description = "Hinge loss (one-vs-rest for >2 classes) + l2/2 ||W||^2, mini-batch SGD."
    tasks = ("classification",)
    Params = LinearSVMParams

    @property
    def _outputs(self) -> int:
        return 1 if self.dataset.n_classes == 2 else self.dataset.n_classes

    def init_weights(self, rng: np.random.Generator) -> Weights:
        # Convex objective: start at zero, as LinearSVC does.
        return {
            "W": np.zeros((self.dataset.n_features, self._outputs)),
            "b": np.zeros(self._outputs),
        }

    def _signs(self, y: np.ndarray) -> np.ndarray:
        """Targets as +1 (this class) / -1 (the rest), one column per binary SVM."""
        if self._outputs == 1:
            return (2.0 * y - 1.0)[:, None]
        signs = -np.ones((y.shape[0], self._outputs))
        signs[np.arange(y.shape[0]), y] = 1.0
        return signs

    def _margins(self, X: np.ndarray, signs: np.ndarray) -> np.ndarray:
        return signs * (X @ self.weights["W"] + self.weights["b"])

    def scores(self, X: np.ndarray) -> np.ndarray:
        raw = X @ self.weights["W"] + self.weights["b"]
        # A binary SVM has one column: class 1 when positive.
        return np.hstack([-raw, raw]) if self._outputs == 1 else raw

    def data_loss(self, X: np.ndarray, y: np.ndarray) -> float:
        margins = self._margins(X, self._signs(y))
        return float(np.maximum(0.0, 1.0 - margins).sum(axis=1).mean())

    def data_gradients(self, X: np.ndarray, y: np.ndarray) -> Weights:
        signs = self._signs(y)
        active = self._margins(X, signs) < 1.0
        # Subgradient of max(0, 1 - s*f): -s where the margin is violated.
        grad = np.where(active, -signs, 0.0) / y.shape[0]
        return {"W": X.T @ grad, "b": grad.sum(axis=0)}
