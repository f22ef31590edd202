"""A multi-class averaged perceptron, written against the SLAQ trainer contract.

Each iteration takes one mini-batch, updates the weights of the rows it
misclassifies, and keeps a running average of the weights; the reported loss
is the perceptron criterion (mean margin violation) of the averaged weights.
"""

from __future__ import annotations

import io
import json

import numpy as np
from pydantic import Field

from workers.trainers.contract import Metrics, Trainer, TrainerParams, TrainingData


class PerceptronParams(TrainerParams):
    learning_rate: float = Field(1.0, gt=0, le=100, description="Size of each correction.",
                                 json_schema_extra={"log_scale": True})
    batch_size: int = Field(32, ge=1, le=10_000, description="Rows per iteration.")


class AveragedPerceptron(Trainer):
    name = "averaged_perceptron"
    title = "Averaged perceptron (example plugin)"
    description = "Multi-class perceptron with weight averaging; loss = perceptron criterion."
    tasks = ("classification",)
    Params = PerceptronParams

    def __init__(self, params: TrainerParams, data: TrainingData, seed: int) -> None:
        super().__init__(params, data, seed)
        assert isinstance(params, PerceptronParams)
        table = data.tabular
        if table.y is None or table.n_classes < 2:
            raise ValueError("the averaged perceptron needs labelled classification data")
        self.X, self.y, self.k = table.X, table.y, table.n_classes
        self.rate, self.batch = params.learning_rate, params.batch_size
        self.W = np.zeros((table.n_features + 1, self.k))
        self.W_sum = np.zeros_like(self.W)
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def _with_bias(X: np.ndarray) -> np.ndarray:
        return np.hstack([X, np.ones((X.shape[0], 1))])

    def _criterion(self, X: np.ndarray, y: np.ndarray, W: np.ndarray) -> tuple[float, float]:
        scores = self._with_bias(X) @ W
        true = scores[np.arange(len(y)), y]
        scores[np.arange(len(y)), y] = -np.inf
        worst = scores.max(axis=1)
        return float(np.maximum(0.0, worst - true).mean()), float((true > worst).mean())

    def _averaged(self) -> np.ndarray:
        return self.W_sum / max(self.iteration, 1)

    def step(self, n: int) -> list[Metrics]:
        out: list[Metrics] = []
        for _ in range(n):
            rows = self.rng.integers(0, len(self.y), size=min(self.batch, len(self.y)))
            X, y = self._with_bias(self.X[rows]), self.y[rows]
            predicted = (X @ self.W).argmax(axis=1)
            wrong = predicted != y
            np.add.at(self.W.T, y[wrong], self.rate * X[wrong])
            np.add.at(self.W.T, predicted[wrong], -self.rate * X[wrong])
            self.W_sum += self.W
            self.iteration += 1
            loss, accuracy = self._criterion(self.X, self.y, self._averaged())
            out.append({"loss": loss, "accuracy": accuracy})
        return out

    def evaluate(self) -> Metrics:
        held = self.data.validation
        if held is None or held.y is None:
            return {}
        loss, accuracy = self._criterion(held.X, held.y, self._averaged())
        return {"val_loss": loss, "val_accuracy": accuracy}

    def state(self) -> bytes:
        buffer = io.BytesIO()
        meta = json.dumps({"iteration": self.iteration, "rng": self.rng.bit_generator.state})
        np.savez(buffer, W=self.W, W_sum=self.W_sum,
                 meta=np.frombuffer(meta.encode(), dtype=np.uint8))
        return buffer.getvalue()

    def restore(self, blob: bytes) -> None:
        with np.load(io.BytesIO(blob), allow_pickle=False) as saved:
            self.W, self.W_sum = saved["W"].copy(), saved["W_sum"].copy()
            meta = json.loads(saved["meta"].tobytes().decode())
        self.iteration = int(meta["iteration"])
        self.rng.bit_generator.state = meta["rng"]
