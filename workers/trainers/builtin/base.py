"""What the built-in numpy trainers share: tabular data and the checkpoint format.

Checkpoints are an ``.npz`` archive (arrays) plus one JSON metadata entry,
never pickle: a checkpoint is data read back by a worker process, and
unpickling it would let whoever can write the checkpoint store run code.
"""

from __future__ import annotations

import io
import json
from abc import abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from workers.trainers.contract import Metrics, Trainer, TrainerParams, TrainingData

if TYPE_CHECKING:
    from workers.datasets import Dataset

FORMAT_VERSION = 1
_META_KEY = "__meta__"


class NumpyTrainer(Trainer):
    """A built-in trainer on a table: one iteration is one mini-batch update.

    ``losses`` reports the loss after each iteration on fixed evaluation rows
    of the training split, so a restored trainer reports exactly (bitwise)
    what an uninterrupted one would; ``held_out`` measures the validation split.
    """

    def __init__(self, params: TrainerParams, data: TrainingData, seed: int) -> None:
        super().__init__(params, data, seed)
        self.dataset = data.tabular
        self.validation = data.validation
        self.hp: dict[str, Any] = params.model_dump()
        if not any(self.dataset.supports(task) for task in self.tasks):
            raise ValueError(
                f"{self.name} ({'/'.join(self.tasks)}) cannot train on dataset "
                f"{self.dataset.name!r} ({self.dataset.task})"
            )

    def step(self, n: int) -> list[Metrics]:
        return [{"loss": loss} for loss in self.losses(n)]

    def evaluate(self) -> Metrics:
        if self.validation is None:
            return {}
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            return self.held_out(self.validation)

    @abstractmethod
    def losses(self, n: int) -> list[float]:
        """Run ``n`` iterations; return the loss after each (``len == n``)."""

    @abstractmethod
    def held_out(self, validation: Dataset) -> Metrics:
        """``val_loss`` (same objective as ``loss``) and any other held-out metrics."""


def pack_state(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> bytes:
    """Serialise numeric arrays and JSON-able metadata into one ``.npz`` blob."""
    if _META_KEY in arrays:
        raise ValueError(f"array name {_META_KEY!r} is reserved")
    blob = json.dumps({"format": FORMAT_VERSION, **meta}, sort_keys=True).encode()
    buffer = io.BytesIO()
    # Metadata rides along as raw UTF-8 bytes so the archive needs no pickle.
    payload: dict[str, Any] = {_META_KEY: np.frombuffer(blob, dtype=np.uint8), **arrays}
    np.savez(buffer, **payload)
    return buffer.getvalue()


def unpack_state(data: bytes) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Inverse of ``pack_state``; refuses pickled content."""
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    raw = arrays.pop(_META_KEY, None)
    if raw is None:
        raise ValueError("not a trainer checkpoint: metadata missing")
    meta: dict[str, Any] = json.loads(raw.tobytes().decode())
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"unsupported checkpoint format {meta.get('format')!r}")
    return arrays, meta


def check_compatible(meta: Mapping[str, Any], kind: str, dataset: Dataset) -> None:
    """Refuse to restore a checkpoint onto a different algorithm or dataset shape.

    Loading weights of the wrong shape would fail later with an obscure
    broadcasting error; failing here names the actual problem.
    """
    if meta.get("algorithm") != kind:
        raise ValueError(f"checkpoint is for {meta.get('algorithm')!r}, not {kind!r}")
    shape = [dataset.n_samples, dataset.n_features]
    if meta.get("data_shape") != shape:
        raise ValueError(
            f"checkpoint was taken on data of shape {meta.get('data_shape')}, "
            f"but dataset {dataset.name!r} has shape {shape}"
        )


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """The generator's state as JSON-able data (PCG64's 128-bit ints are fine in JSON)."""
    return dict(rng.bit_generator.state)
