"""PyTorch trainers (the optional ``torch`` extra): an MLP and a small CNN for
tabular classification and a character-level transformer language model.

Importing this package imports torch; the registry imports it only when
``import torch`` works, so the portal runs without the extra. See
``docs/trainers-torch.md``.
"""

from __future__ import annotations

from workers.trainers.contract import Trainer
from workers.trainers.deep.cnn import TorchCnn
from workers.trainers.deep.mlp import TorchMlp
from workers.trainers.deep.transformer import CharTransformer

TRAINERS: tuple[type[Trainer], ...] = (TorchMlp, TorchCnn, CharTransformer)

__all__ = ["TRAINERS", "CharTransformer", "TorchCnn", "TorchMlp"]
