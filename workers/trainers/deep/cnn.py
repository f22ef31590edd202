"""``torch_cnn``: a small convolutional classifier for tabular rows.

A row whose feature count is a perfect square (the ``digits`` dataset's 64
pixels) is read as a one-channel square image and convolved in 2-D; any other
row is read as a one-channel 1-D signal. Downsampling is a strided
convolution rather than pooling, whose CUDA backward kernels are not
deterministic.
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from workers.trainers.contract import TrainerParams
from workers.trainers.deep.tabular import TabularClassifier, image_side


class CnnParams(TrainerParams):
    channels: int = Field(16, ge=2, le=64,
                          description="Channels of the first convolution (the second has twice).")
    kernel_size: int = Field(3, ge=1, le=7, description="Convolution kernel width.")
    hidden_units: int = Field(64, ge=4, le=512, description="Width of the dense layer.")
    learning_rate: float = Field(1e-3, ge=1e-5, le=1.0, description="Adam step size.",
                                 json_schema_extra={"log_scale": True})
    batch_size: int = Field(64, ge=1, le=4096, description="Rows per minibatch.",
                            json_schema_extra={"log_scale": True})
    weight_decay: float = Field(0.0, ge=0.0, le=0.1, description="L2 penalty (Adam).")


def _out(length: int, kernel: int, stride: int) -> int:
    pad = kernel // 2
    return (length + 2 * pad - kernel) // stride + 1


class TorchCnn(TabularClassifier):
    name = "torch_cnn"
    title = "CNN (PyTorch)"
    description = ("Two convolutions and a dense layer; square feature counts (e.g. 8x8 "
                   "digits) are convolved as images, others as 1-D signals.")
    Params = CnnParams

    def build_model(self) -> nn.Module:
        p = self.params
        assert isinstance(p, CnnParams)
        k, c = p.kernel_size, p.channels
        side = image_side(self.n_features)
        self.shape: tuple[int, ...]
        if side is not None:
            self.shape = (1, side, side)
            conv: type[nn.Conv1d] | type[nn.Conv2d] = nn.Conv2d
            cells = _out(_out(side, k, 1), k, 2) ** 2
        else:
            self.shape = (1, self.n_features)
            conv = nn.Conv1d
            cells = _out(_out(self.n_features, k, 1), k, 2)
        return nn.Sequential(
            conv(1, c, k, padding=k // 2), nn.ReLU(),
            conv(c, 2 * c, k, stride=2, padding=k // 2), nn.ReLU(),
            nn.Flatten(),
            nn.Linear(2 * c * cells, p.hidden_units), nn.ReLU(),
            nn.Linear(p.hidden_units, self.n_classes),
        )

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(X.reshape(X.shape[0], *self.shape))
        return logits
