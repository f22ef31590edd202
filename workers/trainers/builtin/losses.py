"""Numerically stable softmax cross-entropy, shared by the softmax models."""

from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    # Subtracting the row maximum keeps exp() from overflowing for large logits.
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def cross_entropy(logits: np.ndarray, y: np.ndarray) -> float:
    """Mean negative log-likelihood of integer labels ``y`` under softmax(logits)."""
    logp = log_softmax(logits)
    return float(-logp[np.arange(y.shape[0]), y].mean())


def cross_entropy_grad(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d(mean cross-entropy)/d(logits) = (softmax - one_hot) / n."""
    grad = np.exp(log_softmax(logits))
    grad[np.arange(y.shape[0]), y] -= 1.0
    grad /= y.shape[0]
    return grad
