"""Classification on tables (built-in or uploaded datasets): shared minibatch
training and held-out evaluation; the models live in ``mlp`` and ``cnn``."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from workers.trainers.contract import Metrics, TrainerParams, TrainingData
from workers.trainers.deep.base import TorchTrainer

EVAL_BATCH = 4096
"""Rows evaluated at a time, so a big validation split cannot exhaust memory."""


def _table(X: np.ndarray, y: np.ndarray | None, device: torch.device
           ) -> tuple[torch.Tensor, torch.Tensor]:
    if y is None:
        raise ValueError("classification needs a labelled dataset")
    features = torch.tensor(np.asarray(X, dtype=np.float32), device=device)
    labels = torch.tensor(np.asarray(y, dtype=np.int64), device=device)
    return features, labels


class TabularClassifier(TorchTrainer):
    """Minibatch cross-entropy training of ``self.model`` on ``data.train``."""

    tasks = ("classification",)

    def __init__(self, params: TrainerParams, data: TrainingData, seed: int) -> None:
        train = data.tabular
        if train.y is None or train.n_classes < 2:
            raise ValueError(f"{self.name} needs a labelled dataset with at least 2 classes")
        self.n_features = train.n_features
        self.n_classes = train.n_classes
        self.batch_size = int(params.model_dump()["batch_size"])
        super().__init__(params, data, seed)
        self.X, self.y = _table(train.X, train.y, self.device)
        self.validation: tuple[torch.Tensor, torch.Tensor] | None = None
        if data.validation is not None and data.validation.y is not None \
                and data.validation.n_samples > 0:
            self.validation = _table(data.validation.X, data.validation.y, self.device)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Class logits for rows ``X`` (shape ``(batch, n_features)``)."""
        logits: torch.Tensor = self.model(X)
        return logits

    def train_step(self) -> Metrics:
        batch = self.sample(self.X.shape[0], self.batch_size)
        logits = self.forward(self.X[batch])
        target = self.y[batch]
        loss = F.cross_entropy(logits, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        with torch.no_grad():
            accuracy = (logits.argmax(dim=1) == target).float().mean()
        return {"loss": float(loss.item()), "accuracy": float(accuracy.item())}

    def evaluate(self) -> Metrics:
        if self.validation is None:
            return {}
        X, y = self.validation
        self.model.eval()
        total_loss = 0.0
        correct = 0
        with torch.no_grad():
            for start in range(0, X.shape[0], EVAL_BATCH):
                logits = self.forward(X[start:start + EVAL_BATCH])
                target = y[start:start + EVAL_BATCH]
                total_loss += float(F.cross_entropy(logits, target, reduction="sum").item())
                correct += int((logits.argmax(dim=1) == target).sum().item())
        self.model.train()
        n = int(X.shape[0])
        return {"val_loss": total_loss / n, "val_accuracy": correct / n}


def hidden_stack(n_in: int, hidden: int, layers: int) -> list[nn.Module]:
    """``layers`` Linear+ReLU blocks of width ``hidden`` starting from ``n_in`` inputs."""
    blocks: list[nn.Module] = []
    width = n_in
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return blocks


def image_side(n_features: int) -> int | None:
    """The side of the square image ``n_features`` pixels make, if they make one
    bigger than 1x1 (``None``: treat the features as a 1-D signal)."""
    side = math.isqrt(n_features)
    return side if side >= 2 and side * side == n_features else None
